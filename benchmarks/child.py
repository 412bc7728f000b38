"""Child-process entry point: `python -m benchmarks.child SPEC.json OUT.json`.

Reads one spec, measures it with `run_spec`, writes one result document (atomically: a
half-written file must never look like a result). Imports only `benchmarks`, so it runs in
any environment that has torch and the backend under test, without the service.

Fault injection (tests only): with the environment variable SPEEDWATCH_ALLOW_FAULTS=1,
`spec.options["_fault"]` may be "segfault", "hang", "oom" or "raise", and the child then
crashes that way before measuring, so the parent's failure handling can be tested for
real. Without the variable the option is ignored (and stays in the spec), so a stray
option in production data cannot crash a worker.

Also test-only, and also only with SPEEDWATCH_ALLOW_FAULTS=1: SPEEDWATCH_FAULT_SLOW_CANDIDATE
(a fraction, e.g. "0.3") makes every timed candidate call take that much longer
(`run_spec(slow_candidate=)`), a real drop of the speedup. It comes from the environment,
not the spec, so a test can give one named interpreter (a wrapper script that sets it) a
slower "environment" than another, as an upgraded backend would be.

Likewise test-only: SPEEDWATCH_FAULT_SLOW_MODULE names a module whose `SLOW_CANDIDATE`
(a fraction) is added to that slowdown, so an installed package's version decides how slow
the candidate is: a bisect can be tested against real pip installs of a package whose
release 1.x "regressed". A module that is not installed adds nothing.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.bytecode import keep_bytecode

if TYPE_CHECKING:  # imported late at run time: bytecode is kept before the imports
    from benchmarks.result import BenchResult

FAULT_ENV = "SPEEDWATCH_ALLOW_FAULTS"
FAULTS = ("segfault", "hang", "oom", "raise")
SLOW_CANDIDATE_ENV = "SPEEDWATCH_FAULT_SLOW_CANDIDATE"
SLOW_MODULE_ENV = "SPEEDWATCH_FAULT_SLOW_MODULE"
# Set by benchmarks.isolation to its own pid: the process this child must not outlive.
SUPERVISOR_ENV = "SPEEDWATCH_SUPERVISOR_PID"


def inject_fault(kind: str) -> None:
    """Crash the way real benchmarks crash; each branch does not return."""
    if kind == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)  # the signal is delivered asynchronously; never carry on
    elif kind == "hang":
        while True:
            time.sleep(1)
    elif kind == "oom":
        import resource

        # Cap the address space just above what is mapped now, then ask for more: a real
        # MemoryError without pushing the shared machine into its OOM killer.
        with open("/proc/self/statm", encoding="ascii") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (64 << 20), resource.RLIM_INFINITY))
        hog = bytearray(1 << 30)
        del hog
    elif kind == "raise":
        raise RuntimeError("injected fault: raise")
    raise ValueError(f"_fault: {kind!r} is not one of {', '.join(FAULTS)}")


def kill_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent ends (the parent's thread that
    started it, as PR_SET_PDEATHSIG counts it); False where that cannot be asked."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0)


def die_with_supervisor() -> None:
    """Ask Linux to SIGKILL this process when the worker that started it dies.

    The child runs in its own session so that a timeout can kill its whole group, which
    also means a SIGKILLed worker does not take it along: it would go on measuring beside
    the cell's next attempt on another worker of this machine, and disturb it. Then the
    supervisor is checked to be alive, in case it died before the request was made (its
    pid, not our parent's: a named interpreter may be a wrapper script that forks).
    """
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if not supervisor or not kill_with_parent():
        return
    try:
        os.kill(int(supervisor), 0)
    except ProcessLookupError:
        os._exit(1)
    except (PermissionError, ValueError):
        pass


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def slow_candidate_fault() -> float:
    """The test-only candidate slowdown asked for by the environment (module docstring)."""
    asked = [name for name in (SLOW_CANDIDATE_ENV, SLOW_MODULE_ENV) if os.environ.get(name)]
    if not asked:
        return 0.0
    if os.environ.get(FAULT_ENV) != "1":
        print(f"ignoring {', '.join(asked)}: {FAULT_ENV} is not set", file=sys.stderr)
        return 0.0
    slow = float(os.environ.get(SLOW_CANDIDATE_ENV) or 0.0)
    module_name = os.environ.get(SLOW_MODULE_ENV)
    if module_name:
        import importlib

        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return slow
        slow += float(getattr(module, "SLOW_CANDIDATE", 0.0))
    return slow


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m benchmarks.child SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    die_with_supervisor()
    # A native crash (segfault in a backend) then leaves a Python traceback in the stderr
    # tail the parent reports; the process still dies by the signal.
    faulthandler.enable()
    keep_bytecode()  # before the imports it speeds up (benchmarks.bytecode)
    from benchmarks.spec import BenchSpec

    spec = BenchSpec.from_dict(json.loads(spec_path.read_text(encoding="utf-8")))
    fault = spec.options.get("_fault")
    if fault is not None:
        if os.environ.get(FAULT_ENV) == "1":
            inject_fault(str(fault))
        else:
            print(f"ignoring options._fault={fault!r}: {FAULT_ENV} is not set", file=sys.stderr)

    from benchmarks.runner import run_spec

    result = run_spec(spec, slow_candidate=slow_candidate_fault())
    _write_atomic(out_path, result.to_json())
    if spec.device == "cuda":
        end_between_timings(result, out_path)
    return 0


def end_between_timings(result: BenchResult, out_path: Path) -> None:
    """Take the launch gate's lock to end between other GPU processes' timings, never
    inside one (benchmarks.launch_gate). Its result is written already, so a process that
    never gets the lock loses nothing; a wait shows in the record as the `exit_gate` phase
    (the result written again, whole)."""
    from benchmarks import launch_gate

    waited = launch_gate.hold_until_exit()
    if waited is not None and waited >= 0.001:
        result.evidence.setdefault("phases", {})["exit_gate"] = round(waited, 3)
        _write_atomic(out_path, result.to_json())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
