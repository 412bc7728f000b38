"""`speedwatch serve` in a child process on the Celery executor, for load measurements: the
API as production runs it, on a scratch database and a queue of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

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
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit(f"the API did not come up; see {log}")
        time.sleep(0.3)
