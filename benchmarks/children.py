"""One benchmark child process, supervised: started in a session of its own, its output in a
log file, killed with its group on a timeout, its exit explained in words, its result read
back with how busy the host was while it timed. Also the units a run starts ahead of their
turn (benchmarks.prepared): launched gated, and let go one at a time.

The child asks the kernel to kill it when this process dies (`child.die_with_supervisor`):
a worker that is SIGKILLed does not leave a benchmark running in a session of its own.
This module imports neither torch nor the service."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import build, fingerprint, forkserver, host, prepared
from benchmarks.result import BenchResult, ResultError
from benchmarks.result_schema import HostLoadRecord
from benchmarks.spec import (
    LATER_PROCESS_OPTION,
    BenchSpec,
)
from benchmarks.stored_parts import written

STDERR_TAIL_BYTES = 4096


# The CPU load guard: units of one cell measured again because other processes kept the
# host busier than timing.max_host_load (benchmarks.host), at most this many a cell; and
# how long to wait for the host to calm down before each.
LOAD_REMEASURES = 2


LOAD_WAIT_S = 3.0


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


def failed_result(spec: BenchSpec, reason: str, tail: str, started: float) -> BenchResult:
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


def process_spec(spec: BenchSpec, index: int) -> BenchSpec:
    """The spec child `index` (0-based) measures: one process, its own bootstrap seed."""
    options = dict(spec.options)
    fault_process = options.pop("_fault_process", None)
    if fault_process is not None and fault_process != index + 1:
        options.pop("_fault", None)
    if index > 0:
        options[LATER_PROCESS_OPTION] = True
    return replace(spec, options=options,
                   timing=replace(spec.timing, processes=1, max_processes=0,
                                  seed=spec.timing.seed + index))


COMPILE_CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR",)


def _fresh_compile_caches(child_env: dict[str, str], tmp: Path,
                          explicit: dict[str, str] | None) -> None:
    """Give each process compile caches of its own, so processes are independent samples.

    Inductor keeps its FX-graph and autotuning results on disk (/tmp/torchinductor_<user>
    by default), so the later processes of a run reuse the kernels the first one chose: the
    CI over processes then leaves out compile-time variance. On an H100 this hid it: dynamic
    shapes compiled on one machine gave 1.459x [1.459, 1.460] at batch 8 and 1.319x [1.316,
    1.321] on a fresh one (results/nvidia-h100-2026-11-25-issue17/). A cache the
    caller names in `env` is kept: sharing it is then a choice, not an accident. Triton's
    cache stays shared: it holds compiled binaries keyed by kernel source, no choices, and
    with it fresh too two dynamic-shape specs did not finish in 580 s on the H100 where four
    specs with shared caches took 490 s. Inductor puts Triton's cache inside its own
    directory unless TRITON_CACHE_DIR names one, so that is set here to the host's (beside
    its tuning caches; the binaries are keyed by source, compiler and device): without it a
    process's fresh directory recompiled every kernel. `timing.compile_cache` "host" skips
    this.
    """
    for name in COMPILE_CACHE_VARIABLES:
        if explicit is None or name not in explicit:
            child_env[name] = str(tmp / name.lower())
    if "TRITON_CACHE_DIR" not in child_env:
        child_env["TRITON_CACHE_DIR"] = str(build.tuning_cache_dir().parent / "triton")


def _host_tuning_cache(spec: BenchSpec, child_env: dict[str, str],
                       explicit: dict[str, str] | None) -> None:
    """Pinned builds of inductor's max-autotune modes time their candidates once per host:
    every process reads and adds to one inductor cache in the host's tuning directory
    (benchmarks.build.tuning_cache_dir), whose entries inductor keys by its version, the
    device and the graph. A cache the caller names in `env` is kept."""
    from benchmarks.backends.inductor import AUTOTUNE_MODES

    if spec.backend != "inductor" or spec.timing.builds != "pinned" \
            or spec.opt_level not in AUTOTUNE_MODES:
        return
    if explicit is None or "TORCHINDUCTOR_CACHE_DIR" not in explicit:
        child_env["TORCHINDUCTOR_CACHE_DIR"] = str(build.tuning_cache_dir() / "inductor")


class Child:
    """One benchmark child process: started by `start_child`, ended by `finish`."""

    def __init__(self, spec: BenchSpec,
                 proc: subprocess.Popen[bytes] | forkserver.ForkedProcess, out_path: Path,
                 log_path: Path) -> None:
        self.spec, self.proc, self.out_path, self.log_path = spec, proc, out_path, log_path
        self.timed_out = False

    def wait(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill()

    def kill(self) -> None:
        """The child and anything it spawned (compile workers) must not outlive it."""
        _kill_group(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)

    def finish(self, started: float, timeout_s: float | None = None) -> BenchResult:
        """Its result document, or a failure saying how it ended."""
        self.kill()
        tail = _tail(self.log_path)
        if self.timed_out:
            return failed_result(self.spec, f"timed out after {timeout_s or 0:g}s", tail, started)
        returncode = self.proc.returncode
        if returncode is None:  # not reaped even after the kill: report it as killed
            returncode = -signal.SIGKILL
        if returncode == 0 and self.out_path.exists():
            try:
                result = BenchResult.from_json(self.out_path.read_text(encoding="utf-8"))
            except (ResultError, OSError, UnicodeDecodeError) as exc:
                return failed_result(self.spec, f"child wrote an invalid result: {exc}", tail,
                               started)
            if result.status != "ok" and result.stderr_tail is None and tail:
                result.stderr_tail = tail
            return result
        return failed_result(self.spec, explain_exit(returncode, tail), tail, started)


def start_child(
    spec: BenchSpec, workdir: Path, *, python: str, env: dict[str, str] | None,
    cwd: str | None, pin: list[int], extra_env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> Child | BenchResult:
    """Start `python -m benchmarks.child` for `spec` in its own session (its files under
    `workdir`), or the failure saying why it could not start."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    child_env = _child_env(env)
    child_env[host.PIN_ENV] = ",".join(str(c) for c in pin)
    child_env.update(extra_env or {})
    spec_path, out_path, log_path = (workdir / n for n in ("spec.json", "out.json",
                                                           "child.log"))
    spec_path.write_text(spec.to_json(), encoding="utf-8")
    if spec.timing.compile_cache == "process":
        _fresh_compile_caches(child_env, workdir, env)
    _host_tuning_cache(spec, child_env, env)
    argv = [str(spec_path), str(out_path)]
    if not pass_fds and forkserver.setting(spec.device):
        try:
            return Child(spec, forkserver.spawn(python, child_env, cwd, argv, log_path),
                         out_path, log_path)
        except forkserver.ServerGone:
            pass  # started fresh below: slower, never wrong
    cmd = [python, "-m", "benchmarks.child", *argv]
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=child_env, cwd=cwd,
                                    start_new_session=True, pass_fds=pass_fds)
        except OSError as exc:
            return failed_result(spec, f"cannot start {python}: {exc}", "", started)
    return Child(spec, proc, out_path, log_path)


def _child_env(env: dict[str, str] | None) -> dict[str, str]:
    """A child's environment before what is set per child: this process's, the cell's
    `env`, the supervisor's pid (see child.die_with_supervisor) and the harness's path."""
    child_env = dict(os.environ)
    if env:
        child_env.update(env)
    child_env["SPEEDWATCH_SUPERVISOR_PID"] = str(os.getpid())
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_PACKAGE_ROOT, child_env.get("PYTHONPATH", "")) if p
    )
    return child_env


def start_fork_server(device: str, *, python: str, env: dict[str, str] | None,
                      cwd: str | None) -> bool:
    """Start, without waiting, the warm server this thread's children on `device` of
    `python` with `env` will be forked from (benchmarks.forkserver.start); whether one
    was started (children on `device` start fresh, or it cannot start)."""
    if not forkserver.setting(device):
        return False
    try:
        forkserver.start(python, _child_env(env), cwd)
    except OSError:
        return False  # the first child starts it again, or starts fresh
    return True


def unit_key(spec: BenchSpec, python: str, env: dict[str, str] | None,
             cwd: str | None) -> tuple[Any, ...]:
    """What names one unit's child: a child prepared ahead serves only this very unit."""
    return (spec.to_json(), python, tuple(sorted((env or {}).items())), cwd)


def _gated_launch(one: BenchSpec, python: str, env: dict[str, str] | None,
                  cwd: str | None) -> prepared.Launch:
    """How the preparer starts the child of unit `one` (benchmarks.prepared): with its
    gate's pipes, and kept off the core the timing child is pinned to."""
    def launch(workdir: Path, extra_env: dict[str, str],
               fds: tuple[int, ...]) -> Child | BenchResult:
        pin = host.pin_cores(one.device, one.threads)
        child = start_child(one, workdir, python=python, env=env, cwd=cwd, pin=pin,
                        extra_env=extra_env, pass_fds=fds)
        if isinstance(child, Child):
            host.keep_off(child.proc.pid, pin)  # the timing child's core is its own
        return child

    return launch


def run_one(
    spec: BenchSpec,
    *,
    timeout_s: float,
    python: str,
    env: dict[str, str] | None,
    cwd: str | None,
) -> BenchResult:
    started = time.monotonic()
    preparer = prepared.active()
    if preparer is not None:
        key = unit_key(spec, python, env, cwd)
        if not preparer.has(key) and prepared.quiet_build(spec):
            preparer.start(key, _gated_launch(spec, python, env, cwd), force=True)
        ready = preparer.take(key)
        if ready is not None:
            return _run_prepared(ready, preparer, spec, timeout_s)
        # a child whose build times on the device: nobody prepares beside it
        with preparer.paused_for():
            return _run_alone(spec, started, timeout_s=timeout_s, python=python, env=env,
                              cwd=cwd)
    return _run_alone(spec, started, timeout_s=timeout_s, python=python, env=env, cwd=cwd)


def _run_alone(spec: BenchSpec, started: float, *, timeout_s: float, python: str,
               env: dict[str, str] | None, cwd: str | None) -> BenchResult:
    with tempfile.TemporaryDirectory(prefix="speedwatch-bench-") as tmp:
        child = start_child(spec, Path(tmp), python=python, env=env, cwd=cwd,
                        pin=host.pin_cores(spec.device, spec.threads))
        if isinstance(child, BenchResult):
            return child
        proc = child.proc
        monitor = host.LoadMonitor(pids=lambda: [proc.pid], cores=host.load_cores(spec.device))
        with monitor:
            child.wait(timeout_s)
        result = child.finish(started, timeout_s)
    return _with_host_load(result, monitor)


# how often a turn looks at its child's words, its exit and the children to start
_TURN_POLL_S = 0.25


def _run_prepared(ready: prepared.Prepared, preparer: prepared.Preparer, spec: BenchSpec,
                  timeout_s: float) -> BenchResult:
    """A unit whose child was started ahead: its turn once it is at its gate, the others
    stopped while it times (benchmarks.prepared). Meanwhile children whose turns come later
    start. They are this run's own processes (`evidence.prepared_ahead` counts them), not
    another tenant's load."""
    child, proc = ready.child, ready.child.proc
    deadline = ready.launched + timeout_s
    waited = time.monotonic()
    while not ready.poll_ready(_TURN_POLL_S):
        if proc.poll() is not None:
            break  # it ended before its gate: finish() says how
        if time.monotonic() > deadline:
            child.timed_out = True
            break
        preparer.refill()
    turn_began = time.monotonic()
    if ready.ready:
        preparer.seen_ready(ready.key)  # its build is stored: the cell's next units may load it
    beside = len(preparer.pids())
    monitor = host.LoadMonitor(pids=lambda: [proc.pid, *preparer.pids()],
                               cores=host.load_cores(spec.device))
    try:
        if ready.ready:
            ready.go()
            preparer.timing_pid = proc.pid
            deadline = time.monotonic() + timeout_s
            with monitor:
                while proc.poll() is None:
                    if time.monotonic() > deadline:
                        child.timed_out = True
                        break
                    word = ready.word(_TURN_POLL_S)
                    if word == "quiet":
                        preparer.pause()
                        ready.go()
                    elif word == "timed":
                        preparer.resume()
                    elif word == "":  # its end of the pipe closed: it is ending
                        try:
                            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                        except subprocess.TimeoutExpired:
                            child.timed_out = True
                    if not preparer.paused:
                        preparer.refill()
        result = child.finish(ready.launched, timeout_s)
    finally:
        preparer.resume()
        preparer.timing_pid = None
        ready.close()
        ready.workdir.cleanup()
    if result.status == "ok" and isinstance(result.evidence, dict):
        result.evidence["prepared_ahead"] = {
            "waited_for_ready_seconds": round(turn_began - waited, 3),
            "prepared_beside": beside}
    if child.timed_out or not ready.ready:
        return result
    return _with_host_load(result, monitor)


def _with_host_load(result: BenchResult, monitor: host.LoadMonitor) -> BenchResult:
    window = (result.evidence.get("timing") or {}).get("window") \
        if isinstance(result.evidence, dict) else None
    if result.status == "ok":
        load = monitor.load(*window) if isinstance(window, list) and len(window) == 2 \
            else monitor.load()
        if load is not None:
            result.fingerprint["host_load"] = written(HostLoadRecord(**load.to_dict()))
    return result
