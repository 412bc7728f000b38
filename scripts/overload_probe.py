"""Overload probe: what a flood of clients does to `speedwatch serve` on PostgreSQL.

Starts the API (private reads, no executor: runs are recorded, never executed) on a fresh
PostgreSQL database with a package index that answers after `--index-delay` seconds (a
slow mirror), then:

1. uploads: `--uploads` different result documents at once, then the same document
   `--uploads` times at once; counts each status and, for every answer that is not a
   201/200, whether the document was stored anyway (read back from the database). Then
   the different documents again through the command-line client (cli.client.Api, which
   retries): how many were stored, each once.
2. sweeps: one ci token starts `--sweeps` sweeps at once (each reads the slow index)
   while another token reads `GET /api/v1/runs` every 0.2 s; counts each side's statuses
   and the reader's slowest answer.
3. slow bodies: `--slow-bodies` connections without a token announce a 2 MiB body, send
   90% of it and stop, then a fifth as many with a ci token; reports the server's memory
   before, during and after, and how many of those connections the server still held
   `--hold` seconds later.

    .venv/bin/python scripts/overload_probe.py [--uploads 200] [--sweeps 30]
        [--slow-bodies 100] [--json out.json]

Needs PostgreSQL on 127.0.0.1:5432 with trust authentication (as CI has).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.db import session_scope  # noqa: E402
from app.services.tokens import create_token  # noqa: E402
from devkit.factories import bench_result, ingest_body, tiny_spec  # noqa: E402
from devkit.ports import free_port  # noqa: E402
from devkit.slow_index import PACKAGE, slow_index  # noqa: E402

PG = "postgresql://{user}@127.0.0.1:5432/{db}"


def fresh_database() -> str:
    name = f"probe_{secrets.token_hex(4)}"
    for user in ("postgres", "root"):
        try:
            with psycopg.connect(PG.format(user=user, db="postgres"), autocommit=True) as c:
                c.execute(f'CREATE DATABASE "{name}"')
            return f"postgresql+psycopg://{user}@127.0.0.1:5432/{name}"
        except psycopg.OperationalError:
            continue
    raise SystemExit("overload_probe: no PostgreSQL on 127.0.0.1:5432 with trust auth")


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (uvicorn runs in one process here)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def stored_revisions(url: str) -> set[str]:
    sync = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(sync) as c:
        return {r[0] for r in c.execute("SELECT revision FROM runs WHERE kind = 'ingest' "
                                        "AND EXISTS (SELECT 1 FROM cells WHERE cells.run_id "
                                        "= runs.id)")}


async def post_all(base: str, token: str, bodies: list[dict[str, Any]]) -> list[Any]:
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
        async def one(body: dict[str, Any]) -> Any:
            try:
                r = await client.post("/api/v1/results", json=body,
                                      headers={"Authorization": f"Bearer {token}"})
                return r.status_code
            except httpx.HTTPError as exc:
                return type(exc).__name__
        return list(await asyncio.gather(*(one(b) for b in bodies)))


def uploads(base: str, token: str, url: str, n: int) -> dict[str, Any]:
    spec = tiny_spec()
    tag = secrets.token_hex(3)
    different = [ingest_body(bench_result(spec), project="probe", revision=f"u{tag}-{i}")
                 for i in range(n)]
    statuses = asyncio.run(post_all(base, token, different))
    stored = stored_revisions(url)
    told_failed = [b["revision"] for b, s in zip(different, statuses, strict=True)
                   if s not in (200, 201)]
    same = ingest_body(bench_result(spec), project="probe", revision=f"same-{tag}")
    same_statuses = asyncio.run(post_all(base, token, [same] * n))
    same_stored = same["revision"] in stored_revisions(url)
    return {
        "different": dict(Counter(map(str, statuses))),
        "different_told_failed_yet_stored": sum(r in stored for r in told_failed),
        "identical": dict(Counter(map(str, same_statuses))),
        "identical_stored": same_stored,
        "identical_created_answers": sum(s == 201 for s in same_statuses),
        "identical_all_failed_yet_stored": same_stored and not any(
            s in (200, 201) for s in same_statuses),
    }


def uploads_with_retries(base: str, token: str, url: str, n: int) -> dict[str, Any]:
    """The same flood through the command-line client's API calls, which retry a 429 (and
    a 503 or lost connection: an upload is the stored result for the same document)."""
    from concurrent.futures import ThreadPoolExecutor

    from cli.client import Api, ClientError

    tag = secrets.token_hex(3)
    bodies = [ingest_body(bench_result(tiny_spec()), project="probe", revision=f"r{tag}-{i}")
              for i in range(n)]
    retries = Counter[str]()

    def pause(seconds: float) -> None:
        retries.update(["retry"])
        time.sleep(seconds)

    def one(body: dict[str, Any]) -> str:
        api = Api(base, token, sleep=pause)
        try:
            return "created" if api.upload(body)["created"] else "already stored"
        except ClientError as exc:
            return f"error: {str(exc)[:60]}"
        finally:
            api.close()

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=n) as pool:
        answers = list(pool.map(one, bodies))
    stored = stored_revisions(url)
    return {"answers": dict(Counter(answers)), "retries": retries["retry"],
            "stored": sum(b["revision"] in stored for b in bodies),
            "seconds": round(time.monotonic() - started, 1)}


async def sweeps_and_reader(base: str, ci: str, read: str, n: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=0)
    stop = asyncio.Event()
    reads: list[tuple[Any, float]] = []
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as client:
        async def reader() -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    r = await client.get("/api/v1/runs?limit=5",
                                         headers={"Authorization": f"Bearer {read}"})
                    status: Any = r.status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                reads.append((status, time.monotonic() - t0))
                await asyncio.sleep(0.2)

        async def sweep(i: int) -> Any:
            body = {"project": "probe", "package": PACKAGE, "from_version": "1.0",
                    "to_version": "1.4", "matrix": {"models": ["resnet18"],
                                                    "backends": ["onnxruntime"],
                                                    "width": 8, "image_size": 32}}
            try:
                r = await client.post("/api/v1/sweeps", json=body,
                                      headers={"Authorization": f"Bearer {ci}"})
                return r.status_code, r.headers.get("retry-after")
            except httpx.HTTPError as exc:
                return type(exc).__name__, None

        task = asyncio.create_task(reader())
        await asyncio.sleep(0.5)
        answers = await asyncio.gather(*(sweep(i) for i in range(n)))
        await asyncio.sleep(0.5)
        stop.set()
        await task
    return {
        "sweeps": dict(Counter(str(s) for s, _ in answers)),
        "sweeps_429_with_retry_after": sum(s == 429 and ra is not None for s, ra in answers),
        "reader": dict(Counter(str(s) for s, _ in reads)),
        "reader_slowest_s": round(max(t for _, t in reads), 2) if reads else None,
    }


def slow_bodies(port: int, pid: int, n: int, hold_s: float,
                token: str | None = None) -> dict[str, Any]:
    size = 2 * 1024 * 1024
    before = rss_mb(pid)
    socks = []
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /api/v1/results HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Type: "
                  b"application/json\r\nContent-Length: " + str(size).encode() + b"\r\n\r\n")
        socks.append(s)
    chunk = b"[" + b"1," * 1024
    for s in socks:
        s.settimeout(0.5)
        sent = 0
        try:
            while sent < size * 0.9:
                sent += s.send(chunk)
        except OSError:
            pass  # the server answered and closed first
    time.sleep(1)
    during = rss_mb(pid)
    time.sleep(hold_s)
    held = 0
    answered: Counter[str] = Counter()
    for s in socks:
        s.settimeout(0.05)
        try:
            data = s.recv(200)
            if data:
                answered[data.split(b"\r\n", 1)[0].decode(errors="replace")] += 1
            else:
                answered["closed"] += 1
        except TimeoutError:
            held += 1
        except OSError:
            answered["reset"] += 1
    for s in socks:
        s.close()
    time.sleep(2)
    return {"rss_before_mb": round(before), "rss_during_mb": round(during),
            "rss_after_mb": round(rss_mb(pid)), "still_held_after_s": hold_s,
            "held": held, "answered": dict(answered)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--sweeps", type=int, default=30)
    parser.add_argument("--slow-bodies", type=int, default=100)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument("--index-delay", type=float, default=5.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    url = fresh_database()
    with slow_index(args.index_delay) as index_url:
        probe(args, url, index_url)


def probe(args: argparse.Namespace, url: str, index_url: str) -> None:
    port = free_port()
    env = {**os.environ, "SPEEDWATCH_DATABASE_URL": url, "SPEEDWATCH_EXECUTOR": "none",
           "SPEEDWATCH_PUBLIC_READS": "false",
           "SPEEDWATCH_ENV_ALLOWLIST": json.dumps([PACKAGE, "onnxruntime"]),
           "PIP_INDEX_URL": index_url, "PIP_TRUSTED_HOST": "127.0.0.1", "PIP_RETRIES": "0"}
    settings = Settings(database_url=url)
    subprocess.run([sys.executable, "-m", "cli", "migrate"], env=env, check=True,
                   capture_output=True)
    with session_scope(settings) as s:
        _, ci = create_token(s, "ci", "probe-ci")
        _, read = create_token(s, "read", "probe-reader")
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (lives with the server)
        prefix="probe-serve-", suffix=".log", delete=False)
    server = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--port", str(port),
                               "--no-migrate"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(f"{base}/livez", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        out: dict[str, Any] = {"load": os.getloadavg()}
        print("uploads ...", flush=True)
        out["uploads"] = uploads(base, ci, url, args.uploads)
        print(json.dumps(out["uploads"]), flush=True)
        print("uploads through the client ...", flush=True)
        out["uploads_with_retries"] = uploads_with_retries(base, ci, url, args.uploads)
        print(json.dumps(out["uploads_with_retries"]), flush=True)
        print("sweeps ...", flush=True)
        out["sweeps"] = asyncio.run(sweeps_and_reader(base, ci, read, args.sweeps))
        print(json.dumps(out["sweeps"]), flush=True)
        print("slow bodies ...", flush=True)
        out["slow_bodies"] = slow_bodies(port, server.pid, args.slow_bodies, args.hold)
        print(json.dumps(out["slow_bodies"]), flush=True)
        out["slow_bodies_with_token"] = slow_bodies(port, server.pid, args.slow_bodies // 5,
                                                    args.hold, token=ci)
        print(json.dumps(out["slow_bodies_with_token"]), flush=True)
        out["server_errors_in_log"] = Path(log.name).read_text(errors="replace").count(
            "Traceback")
        print(json.dumps(out, indent=1))
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
