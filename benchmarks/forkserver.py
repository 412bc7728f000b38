"""Warm starts for GPU children: one server per interpreter that has imported the harness
(torch, scipy, the runner) once and forks each measuring process from there.

Measured on an H200 (the four-cell GPU demo), a child's start, from spawn to its first
line of measuring code, took 8-12 s of a 25-35 s process, most of it importing torch and
scipy; a cell takes at least three processes, so a GPU run spent a third of its time
importing the same modules again. A forked child starts with them imported.

What stays fresh in every forked child: its session and process group (a timeout kills it
with its compile workers), its environment (set before it imports anything more, so
inductor and Triton read the process's own cache directories), its log, its working
directory, and everything it builds: the server never touches CUDA, builds no model and
reads no spec, so a child's device state, model, build and timing are its own, as in a
fresh process. What a forked child shares with its siblings is the address-space layout
of what the server imported; on the GPU that is not what varies between processes (the
spread between fresh processes of pinned builds is 0.07-0.10% there), but on a CPU it is
the very spread a cell's interval must sample (benchmarks.paired_units), so CPU cells are
never forked unless asked (`FORK_ENV`).

The protocol is one JSON object a line. To the server: {"argv", "env", "cwd", "log"};
from it: "ready" once its imports are done, {"pid"} for each fork, {"exit", "status"}
when a child ends (status as `subprocess` gives it: negative for a signal). The server
ends when its input closes (the supervisor gone), and asks Linux to kill it and its
children with it.

This module's client imports neither torch nor the service."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from benchmarks.bytecode import keep_bytecode
from benchmarks.child import kill_with_parent
from benchmarks.process_state import FORKED_ENV

FORK_ENV = "SPEEDWATCH_FORK_SERVER"
PRELOAD_ENV = "SPEEDWATCH_FORK_PRELOAD"
# imported by a server beyond the runner when PRELOAD_ENV allows: on an H200 a forked
# child still spent 4-7 s importing these before it measured
PRELOADED = ("torch._dynamo", "torch._inductor.compile_fx", "torch._inductor.codecache",
             "torch._inductor.runtime.triton_heuristics", "benchmarks.backends.eager",
             "benchmarks.backends.inductor")
_CACHE_DIRS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
_NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
_CUDA_ERROR_NOT_INITIALIZED = 3
# a server's imports (torch, scipy, the runner) must finish within this
READY_TIMEOUT_S = 300.0
# servers kept by one supervisor at once (one per interpreter and environment)
MAX_SERVERS = 4
# variables a supervisor sets per child: they are the child's, never the server's
PER_CHILD = ("SPEEDWATCH_PIN_CORES", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
             "SPEEDWATCH_GATE_FDS", FORKED_ENV)


def setting(device: str, environ: dict[str, str] | None = None) -> bool:
    """Whether a child on `device` starts forked: "auto" (the default) forks GPU children
    only, "1" every child, "0" none. A bad value is an error naming the variable."""
    value = (environ if environ is not None else os.environ).get(FORK_ENV, "auto").strip()
    if value in ("", "auto"):
        return device == "cuda"
    if value in ("0", "1"):
        return value == "1"
    raise ValueError(f"{FORK_ENV}={value!r}: expected auto, 0 or 1")


# -- the server, in the environment's interpreter ---------------------------------------


def _run_forked(request: dict[str, Any]) -> None:
    """The forked child: a process of its own from here on; never returns. Its standard
    streams, the server's pipes until now, become its log and /dev/null."""
    code = 1
    try:
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in (log, devnull):
            if fd > 2:
                os.close(fd)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[FORKED_ENV] = "1"
        if request.get("cwd"):
            os.chdir(request["cwd"])
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from benchmarks import child

        code = child.main(list(request["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # the child's own failure, reported as a fresh child's would be
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(out: TextIO) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        out.write(json.dumps({"exit": pid, "status": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


def cuda_driver_initialised() -> bool | None:
    """Whether this process has initialised the CUDA driver (cuInit), which a forked child
    could not use; None where there is no driver. Asked of the driver itself: before cuInit,
    `cuDeviceGetCount` answers CUDA_ERROR_NOT_INITIALIZED and does nothing else."""
    import ctypes

    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    count = ctypes.c_int(0)
    return int(driver.cuDeviceGetCount(ctypes.byref(count))) != _CUDA_ERROR_NOT_INITIALIZED


def preload_setting(environ: dict[str, str] | None = None) -> bool:
    """Whether a server also imports what a GPU child imports next (`PRELOAD_ENV`, 1 by
    default); a bad value is an error naming the variable."""
    value = (environ if environ is not None else os.environ).get(PRELOAD_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{PRELOAD_ENV}={value!r}: expected 0 or 1")
    return value == "1"


def _preload() -> None:
    """Import the compiler stack a GPU child imports before it measures (dynamo, inductor,
    Triton, the backends: 4-6 s and 3-5 s on an H200), with the cache directories pointed
    at a directory of the server's own: a module that reads its cache path at import keeps
    the server's, never a path shared with the children, which set their own."""
    import importlib
    import shutil
    import tempfile

    private = tempfile.mkdtemp(prefix="speedwatch-forkserver-")
    saved = {name: os.environ.get(name) for name in (*_CACHE_DIRS, _NVML_CHECK)}
    os.environ.update({name: os.path.join(private, name.lower()) for name in _CACHE_DIRS})
    # inductor asks torch.cuda.is_available() at import; through NVML that initialises no
    # CUDA (measured on an H200: without it, importing compile_fx did)
    os.environ[_NVML_CHECK] = "1"
    try:
        for name in PRELOADED:
            with contextlib.suppress(Exception):  # a child imports it again and says why
                importlib.import_module(name)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(private, ignore_errors=True)


def serve() -> int:
    kill_with_parent()
    keep_bytecode()  # before the imports it speeds up (benchmarks.bytecode)
    import benchmarks.runner  # noqa: F401  (the imports every child needs: the point)

    if preload_setting():
        _preload()
        if cuda_driver_initialised():
            # Something imported initialised CUDA: a fork would inherit a driver it cannot
            # use. Start again as a server of the runner's imports only.
            os.execve(sys.executable, [sys.executable, "-m", "benchmarks.forkserver"],
                      {**os.environ, PRELOAD_ENV: "0"})

    stdin, out = sys.stdin.buffer, sys.stdout
    out.write("ready\n")
    out.flush()
    pending = b""
    while True:
        readable, _, _ = select.select([stdin], [], [], 0.1)
        _reap(out)
        if not readable:
            continue
        chunk = os.read(stdin.fileno(), 65536)
        if not chunk:
            return 0  # the supervisor is gone: PDEATHSIG ends the children
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _run_forked(request)
            out.write(json.dumps({"pid": pid}) + "\n")
            out.flush()


# -- the client, in the supervisor -------------------------------------------------------


class ServerGone(RuntimeError):
    """The server ended or did not answer; the caller starts the child fresh instead."""


class ForkedProcess:
    """A forked child as the supervisor sees it: the parts of `subprocess.Popen` it uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None
        self.args = ["forked", str(pid)]

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.status_of(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            if not self.server.wait_for_exit(self.pid, min(left or 1.0, 1.0)) \
                    and not self.server.alive():
                # the server died: Linux killed its children with it
                self.returncode = -signal.SIGKILL
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """One server process and the thread that reads what it says."""

    def __init__(self, python: str, env: dict[str, str], cwd: str | None) -> None:
        self.proc = subprocess.Popen(
            [python, "-m", "benchmarks.forkserver"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd,
            start_new_session=True)
        self.last_used = time.monotonic()
        self._cond = threading.Condition()
        self._ready = False
        self._closed = False  # its output ended: it has exited, or is about to
        self._pids: list[int] = []
        self._status: dict[int, int] = {}
        self._spawning = threading.Lock()  # one request in flight: pids answer in order
        self._python = python
        self._started = time.monotonic()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def wait_ready(self) -> None:
        """Return once the server has imported what it imports; ServerGone (the server
        closed) when it ended first or did not get there within READY_TIMEOUT_S of its
        start."""
        left = READY_TIMEOUT_S - (time.monotonic() - self._started)
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._closed, timeout=max(left, 0.0))
            ready = self._ready
        if not ready:
            self.close()
            raise ServerGone(f"the fork server of {self._python} did not start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            with self._cond:
                if line == "ready":
                    self._ready = True
                elif line.startswith("{"):
                    message = json.loads(line)
                    if "pid" in message:
                        self._pids.append(int(message["pid"]))
                    elif "exit" in message:
                        self._status[int(message["exit"])] = int(message["status"])
                self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def alive(self) -> bool:
        return not self._closed and self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str | None,
              log: Path) -> ForkedProcess:
        request = {"argv": argv, "env": env, "cwd": cwd, "log": str(log)}
        self.last_used = time.monotonic()
        with self._spawning, self._cond:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise ServerGone(str(exc)) from exc
            if not self._cond.wait_for(lambda: bool(self._pids) or not self.alive(),
                                       timeout=30):
                raise ServerGone("the fork server did not answer")
            if not self._pids:
                raise ServerGone("the fork server ended")
            return ForkedProcess(self, self._pids.pop(0))

    def status_of(self, pid: int) -> int | None:
        with self._cond:
            return self._status.pop(pid, None)

    def wait_for_exit(self, pid: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: pid in self._status, timeout=timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


_SERVERS: dict[tuple[Any, ...], ForkServer] = {}
_LOCK = threading.Lock()


def _key(python: str, env: dict[str, str], cwd: str | None) -> tuple[Any, ...]:
    """A server per interpreter (as it is on disk now), environment, directory and thread:
    Linux kills a server when the thread that started it ends (PR_SET_PDEATHSIG counts
    the thread), so a thread never uses another's."""
    try:
        stamp = os.stat(python).st_mtime_ns
    except OSError:
        stamp = 0
    return (python, stamp, cwd, tuple(sorted(env.items())), threading.get_ident())


def server_env(child_env: dict[str, str]) -> dict[str, str]:
    """The environment a server starts in: the child's, less what is set per child."""
    return {k: v for k, v in child_env.items() if k not in PER_CHILD}


def spawn(python: str, child_env: dict[str, str], cwd: str | None, argv: list[str],
          log: Path) -> ForkedProcess:
    """Fork `python -m benchmarks.child ARGV` from a warm server of `python` and the
    child's environment (started on first use, kept for the next child); ServerGone when
    that cannot be done."""
    key, server = _server_for(python, child_env, cwd)
    try:
        server.wait_ready()
    except ServerGone:
        with _LOCK:
            if _SERVERS.get(key) is server:
                del _SERVERS[key]
        raise
    return server.spawn(argv, child_env, cwd, log)


def start(python: str, child_env: dict[str, str], cwd: str | None) -> None:
    """Start, without waiting for it, the server that children of `python` with
    `child_env` (less what is set per child) in `cwd` will be forked from, when this
    thread spawns them. A worker calls it before its first cells arrive, so that the
    first child of its first run does not wait for the server's imports (13-18 s on an
    H200: results/nvidia-h200-2026-11-29-frozen-loads/)."""
    _server_for(python, child_env, cwd)


def _server_for(python: str, child_env: dict[str, str],
                cwd: str | None) -> tuple[tuple[Any, ...], ForkServer]:
    """This thread's server for the child's interpreter and environment, started (not
    waited for) if there is none."""
    base = server_env(child_env)
    key = _key(python, base, cwd)
    with _LOCK:
        for gone in [k for k, s in _SERVERS.items() if not s.alive()]:
            _SERVERS.pop(gone).close()
        server = _SERVERS.get(key)
        if server is None:
            while len(_SERVERS) >= MAX_SERVERS:
                oldest = min(_SERVERS, key=lambda k: _SERVERS[k].last_used)
                _SERVERS.pop(oldest).close()
            server = ForkServer(python, base, cwd)
            _SERVERS[key] = server
    return key, server


def close_all() -> None:
    with _LOCK:
        while _SERVERS:
            _SERVERS.popitem()[1].close()


if __name__ == "__main__":
    sys.exit(serve())
