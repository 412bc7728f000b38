"""`speedwatch serve` in a child process on the Celery executor, for load measurements: the
API as production runs it, on a scratch database and a queue of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from devkit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent


def start_server(dsn: str, workers: int, queue: str, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "SPEEDWATCH_DATABASE_URL": dsn, "SPEEDWATCH_EXECUTOR": "celery",
           "SPEEDWATCH_CPU_QUEUE": queue, "SPEEDWATCH_GPU_QUEUES": json.dumps({"cuda": queue}),
           "SPEEDWATCH_PUBLIC_READS": "false", "SPEEDWATCH_ENVIRONMENT": "development"}
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--port", str(port), "--workers",
         str(workers), "--no-migrate"],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    if not wait_until_up(base, process, timeout_s=60):
        raise SystemExit(f"the API did not come up; see {log}")
    return process, base


def wait_until_up(base: str, process: subprocess.Popen[Any] | None = None, *,
                  path: str = "/healthz", timeout_s: float = 60.0) -> bool:
    """Whether `base + path` answered 200 within `timeout_s`; False early when `process`
    (the server, if this caller started it) exits first. The server is not killed: what
    to do with one that never came up is the caller's."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{base}{path}", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or (process is not None and process.poll() is not None):
            return False
        time.sleep(0.3)
