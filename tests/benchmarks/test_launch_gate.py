"""A GPU process that ends while another has captured its CUDA graphs and times them moves
that one into the faster launch state. So ending waits for the host's timings, and a
capture waits for a process that is ending; timings on different GPUs still overlap.

Real processes and a real lock file here; the GPU part (what ends a CUDA context) cannot
run on this machine, so the processes stand in with sleeps."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import launch_gate

TIMING = """
import json, sys, time
from benchmarks import launch_gate
with launch_gate.timing() as waited:
    got = time.monotonic()
    print("in", flush=True)
    time.sleep(float(sys.argv[1]))
    left = time.monotonic()
print(json.dumps({"waited": waited, "got": got, "left": left}), flush=True)
"""
ENDING = """
import json, sys, time
from benchmarks import launch_gate
print("ready", flush=True)
sys.stdin.readline()
waited = launch_gate.hold_until_exit()
print(json.dumps({"waited": waited, "got": time.monotonic()}), flush=True)
time.sleep(float(sys.argv[1]))  # what is left of its life: the lock is held until it ends
"""


@pytest.fixture
def lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpu-timing.lock"
    monkeypatch.setenv(launch_gate.LOCK_ENV, str(path))
    return path


def _start(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def test_a_process_ends_only_once_the_timing_beside_it_is_over(lock: Path) -> None:
    timing = _start(TIMING, "4")  # long enough for the other to start on a saturated host
    ending = _start(ENDING, "0")
    assert _line(timing) == "in" and _line(ending) == "ready"
    assert ending.stdin is not None
    ending.stdin.write("go\n")
    ending.stdin.flush()
    ended = json.loads(_line(ending))
    timed = json.loads(_line(timing))
    assert ended["got"] >= timed["left"]  # the exclusive lock came after the timing let go
    assert ended["waited"] > 0.3
    assert timing.wait() == 0 and ending.wait() == 0


def test_a_capture_waits_for_a_process_that_is_ending_until_it_is_gone(lock: Path) -> None:
    ending = _start(ENDING, "4")
    assert _line(ending) == "ready"
    assert ending.stdin is not None
    ending.stdin.write("go\n")
    ending.stdin.flush()
    assert json.loads(_line(ending))["waited"] == pytest.approx(0.0, abs=0.5)
    began = time.monotonic()
    timing = _start(TIMING, "0")
    assert _line(timing) == "in"
    timed = json.loads(_line(timing))
    assert ending.wait() == 0
    assert timed["waited"] > 0.3 and timed["got"] - began > 0.3


def test_timings_on_several_gpus_hold_the_lock_together(lock: Path) -> None:
    first = _start(TIMING, "4")
    assert _line(first) == "in"
    second = _start(TIMING, "0")
    assert _line(second) == "in"
    assert json.loads(_line(second))["waited"] < 2  # not after the first's 4 s
    assert first.wait() == 0 and second.wait() == 0


def test_a_lock_held_too_long_is_waited_for_only_so_long(lock: Path) -> None:
    ending = _start(ENDING, "5")
    assert _line(ending) == "ready"
    assert ending.stdin is not None
    ending.stdin.write("go\n")
    ending.stdin.flush()
    _line(ending)
    began = time.monotonic()
    with launch_gate.timing(limit_s=0.3) as waited:
        assert waited is None  # not had: the block runs anyway
    assert time.monotonic() - began < 3
    ending.kill()
    ending.wait()


def test_off_turns_the_gate_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(launch_gate.LOCK_ENV, "off")
    assert launch_gate.lock_path() is None
    with launch_gate.timing() as waited:
        assert waited is None
    assert launch_gate.hold_until_exit() is None


ENDING_CHILD = """
import sys
from pathlib import Path
from benchmarks import child
from benchmarks.result import BenchResult
out = Path(sys.argv[1])
result = BenchResult.from_json(Path(sys.argv[2]).read_text())
out.write_text(result.to_json())  # as the child writes it before it ends
print("ready", flush=True)
sys.stdin.readline()
child.end_between_timings(result, out)
"""
DOCUMENT = Path(__file__).parent / "documents" / "cuda-single.json"


def test_a_gpu_child_that_waited_to_end_says_so_in_its_record(
        lock: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    timing = _start(TIMING, "1.5")
    assert _line(timing) == "in"
    ending = _start(ENDING_CHILD, str(out), str(DOCUMENT))
    assert _line(ending) == "ready" and ending.stdin is not None
    ending.stdin.write("go\n")
    ending.stdin.flush()
    assert ending.wait(timeout=30) == 0 and timing.wait(timeout=30) == 0
    phases = json.loads(out.read_text())["evidence"]["phases"]
    assert phases["exit_gate"] > 0.3


def test_a_gpu_child_that_ended_at_once_keeps_its_record_as_written(
        lock: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    ending = _start(ENDING_CHILD, str(out), str(DOCUMENT))
    assert _line(ending) == "ready" and ending.stdin is not None
    written = out.read_text()
    ending.stdin.write("go\n")
    ending.stdin.flush()
    assert ending.wait(timeout=30) == 0
    assert out.read_text() == written
    assert "exit_gate" not in json.loads(written)["evidence"].get("phases", {})
