"""Run one spec in a child process so that a crash, hang or OOM costs one result, not the caller.

The child is `python -m benchmarks.child SPEC.json OUT.json` in its own process group (the
session leader of a new session), so a timeout kills it together with anything it spawned
(inductor compile workers, ORT threads are in-process but helpers are not). Its stdout and
stderr go to one log file rather than a pipe: a chatty compiler cannot fill a pipe buffer
and stall the child, and memory stays bounded however much it prints.

This module imports neither torch nor the service: a worker process can supervise
benchmarks in environments (`python=`) that it does not share.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import fingerprint
from benchmarks.result import BenchResult, ResultError
from benchmarks.spec import BenchSpec

STDERR_TAIL_BYTES = 4096
_OOM_PATTERNS = re.compile(r"out of memory|MemoryError|OutOfMemoryError|std::bad_alloc",
                           re.IGNORECASE)
# The directory that holds the `benchmarks` package: put first on the child's PYTHONPATH so
# an interpreter from another environment runs this very code.
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def _tail(path: Path, limit: int = STDERR_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return text if size <= limit else "..." + text


def _last_error_line(tail: str) -> str | None:
    """The 'SomeError: message' line Python prints last in a traceback, if there is one."""
    for line in reversed(tail.strip().splitlines()):
        line = line.strip()
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line):
            return line[:300]
    return None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _failed(spec: BenchSpec, reason: str, tail: str, started: float) -> BenchResult:
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc)
    elapsed = time.monotonic() - started
    try:
        device_class = fingerprint.device_class(spec.device)
    except Exception:
        device_class = "cuda" if spec.device == "cuda" else "cpu"
    return BenchResult(
        series_key=spec.series_key(device_class),
        spec=spec.to_dict(),
        status="failed",
        reason=reason,
        started_at=(now - dt.timedelta(seconds=elapsed)).isoformat(timespec="milliseconds"),
        finished_at=now.isoformat(timespec="milliseconds"),
        duration_seconds=elapsed,
        stderr_tail=tail or None,
    )


def explain_exit(returncode: int, tail: str) -> str:
    """A one-line reason for a child that ended without a valid result."""
    if returncode < 0:
        name = _signal_name(-returncode)
        if -returncode == signal.SIGKILL:
            return f"killed by signal {name} (likely out of memory: the OOM killer sends SIGKILL)"
        return f"killed by signal {name}"
    error = _last_error_line(tail)
    if _OOM_PATTERNS.search(error if error else tail[-1000:]):
        return f"out of memory (exit code {returncode}): {error or 'see stderr tail'}"
    if returncode != 0:
        return f"child exited with code {returncode}: {error or 'see stderr tail'}"
    return "child exited without writing a result"


def run_isolated(
    spec: BenchSpec,
    *,
    timeout_s: float,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> BenchResult:
    """Measure `spec` in a child process; always returns a result, never raises for the child.

    `env` is merged over this process's environment (replacing it would drop PATH and the
    CUDA variables a benchmark needs). On a timeout the whole process group is killed.
    """
    started = time.monotonic()
    child_env = dict(os.environ)
    if env:
        child_env.update(env)
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_PACKAGE_ROOT, child_env.get("PYTHONPATH", "")) if p
    )
    with tempfile.TemporaryDirectory(prefix="speedwatch-bench-") as tmp:
        spec_path, out_path, log_path = (Path(tmp) / n for n in ("spec.json", "out.json",
                                                                 "child.log"))
        spec_path.write_text(spec.to_json(), encoding="utf-8")
        cmd = [python, "-m", "benchmarks.child", str(spec_path), str(out_path)]
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=child_env, cwd=cwd,
                                        start_new_session=True)
            except OSError as exc:
                return _failed(spec, f"cannot start {python}: {exc}", "", started)
            try:
                returncode = proc.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
                returncode, timed_out = proc.returncode, True
            # Leftover helpers (compile workers) of a finished child must not outlive it.
            _kill_group(proc.pid)
        tail = _tail(log_path)
        if timed_out:
            return _failed(spec, f"timed out after {timeout_s:g}s", tail, started)
        if returncode == 0 and out_path.exists():
            try:
                result = BenchResult.from_json(out_path.read_text(encoding="utf-8"))
            except (ResultError, OSError, UnicodeDecodeError) as exc:
                return _failed(spec, f"child wrote an invalid result: {exc}", tail, started)
            if result.status != "ok" and result.stderr_tail is None and tail:
                result.stderr_tail = tail
            return result
        return _failed(spec, explain_exit(returncode, tail), tail, started)
