"""Private services and service processes for the fault tests.

Faults are injected into servers these tests own, never into the shared PostgreSQL on 5432 or
Redis on 6379 that other test sessions use at the same time:

- `PrivateRedis`: a redis-server on a free port that keeps nothing on disk, so a restart
  loses every queued message, as a crash of a non-persistent broker does.
- `PrivatePostgres`: a cluster initdb'd into a temporary directory owned by `postgres`, on a
  free port, stopped and started with pg_ctl.
- `Processes`: `speedwatch serve|worker|beat` as subprocesses in their own process groups,
  each with a log file to show when an assertion fails.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import redis

from devkit.ports import free_port

T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str,
              interval: float = 0.2, on_timeout: Callable[[], str] | None = None) -> T:
    """Poll until `predicate` returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = on_timeout() if on_timeout else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{extra}")
        time.sleep(interval)


class PrivateRedis:
    """redis-server --save "" on its own port; `restart()` = crash + start, queues gone."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.workdir / f"redis-{self.port}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(self.ping, 10, f"private redis on port {self.port}")

    def ping(self) -> bool:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: what the broker's host losing power looks like to its clients."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_connect_timeout=2, socket_timeout=5)


class PrivatePostgres:
    """A throw-away PostgreSQL cluster (trust auth) run as the `postgres` user."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        assert bins, "PostgreSQL server binaries not found under /usr/lib/postgresql"
        self.bindir = Path(bins[-1]).parent
        # Not under pytest's tmp_path: its parents are root-only and postgres must enter it.
        self.root = Path(tempfile.mkdtemp(prefix="speedwatch-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                          "--no-sync", "-E", "UTF8")

    def _as_postgres(self, tool: str, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(self.bindir / tool), *args],
                       check=True, capture_output=True, timeout=120, cwd=self.root)

    def start(self) -> None:
        self._as_postgres(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
            "-t", "60", "-o",
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1",
            "start",
        )

    def stop(self, mode: str = "immediate") -> None:
        """`immediate` is a crash: no shutdown checkpoint, the restart replays the WAL."""
        self._as_postgres("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


class Processes:
    """`python -m cli ...` subprocesses sharing one environment, each in its own group."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 (lives with the process)
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "cli", *args], env={**self.env, **(env or {})},
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def serve(self, name: str = "api", *extra: str) -> str:
        """Start the API and wait until it answers; returns its base URL."""
        port = free_port()
        self.start(name, "serve", "--host", "127.0.0.1", "--port", str(port), "--no-migrate",
                   *extra)
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert self.alive(name), self.log(name)
            try:
                httpx.get(f"{url}/healthz", timeout=2)
                return True
            except httpx.HTTPError:
                return False

        wait_for(up, 60, f"{name} to answer", interval=0.3, on_timeout=lambda: self.log(name))
        return url

    def worker(self, name: str, queues: str, concurrency: int = 1) -> None:
        """Start a worker and wait until Celery says it is ready to consume."""
        self.start(name, "worker", "--queues", queues, "--concurrency", str(concurrency),
                   "--hostname", f"{name}@faults")
        wait_for(lambda: self.alive(name) and "ready." in self.log(name), 60,
                 f"worker {name} to be ready", interval=0.3, on_timeout=lambda: self.log(name))

    def log(self, name: str, tail: int = 6000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def kill(self, name: str) -> None:
        """SIGKILL the whole process group (Celery's main process and its pool children)."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (by /proc parent links), any session or group."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_running(pid: int) -> bool:
    """True for a live process (a zombie waiting for its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
