"""Children prepared ahead (benchmarks.prepared): a GPU run's next processes build or load
while one times, and each waits at its gate until its turn.

The children are real processes: a gate script, and real benchmark children of tiny CPU
cells. A CPU cell never prepares ahead in the product (`quiet_build`); the end-to-end test
applies the GPU policy to CPU cells so that the mechanism runs on this machine.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks import prepared
from benchmarks.adaptive import AdaptiveMeasurement
from benchmarks.isolation import run_adaptive_interleaved
from benchmarks.spec import BenchSpec

SpecFactory = Callable[..., BenchSpec]
REPO = Path(__file__).resolve().parents[2]

GATE_SCRIPT = """
import sys
from benchmarks.prepared import wait_for_turn
waited = wait_for_turn()
print(f"went after {waited:.2f}s", flush=True)
"""


class ScriptChild:
    """What `Preparer.start` needs of a launched child: its process and a way to kill it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def gate_launch(out: list[ScriptChild]) -> prepared.Launch:
    def launch(workdir: Path, extra_env: dict[str, str], fds: tuple[int, ...]) -> ScriptChild:
        env = {"PYTHONPATH": str(REPO), **extra_env}
        proc = subprocess.Popen([sys.executable, "-c", GATE_SCRIPT], env=env, pass_fds=fds,
                                stdout=subprocess.PIPE, cwd=workdir)
        out.append(ScriptChild(proc))
        return out[-1]
    return launch


def test_a_prepared_child_waits_at_its_gate_until_told_go() -> None:
    preparer = prepared.Preparer(ahead=4)
    children: list[ScriptChild] = []
    assert preparer.start(("unit", 1), gate_launch(children))
    ready = preparer.take(("unit", 1))
    assert ready is not None
    assert ready.poll_ready(60), "the child never reached its gate"
    time.sleep(0.5)
    assert children[0].proc.poll() is None, "it went on without its turn"
    ready.go()
    out, _ = children[0].proc.communicate(timeout=60)
    assert children[0].proc.returncode == 0
    assert out.decode().startswith("went after ")
    ready.close()
    ready.workdir.cleanup()


def test_a_child_no_longer_wanted_ends_at_its_gate_without_running_on() -> None:
    preparer = prepared.Preparer(ahead=4)
    children: list[ScriptChild] = []
    preparer.start(("unit", 1), gate_launch(children))
    preparer.start(("unit", 2), gate_launch(children))
    preparer.keep_only({("unit", 2)})  # unit 1's cell decided meanwhile
    assert not preparer.has(("unit", 1)) and preparer.has(("unit", 2))
    assert children[0].proc.poll() is not None  # killed, its files gone
    preparer.close()
    out, _ = children[1].proc.communicate(timeout=60)
    assert b"went" not in out  # closed at its gate: it never ran on


def test_no_more_children_alive_than_the_setting_allows() -> None:
    preparer = prepared.Preparer(ahead=2)
    children: list[ScriptChild] = []
    started = [preparer.start(("unit", j), gate_launch(children)) for j in range(3)]
    assert started == [True, True, False]
    assert not preparer.start(("unit", 0), gate_launch(children))  # already there
    preparer.close()
    assert all(c.proc.wait(timeout=30) is not None for c in children)


@pytest.mark.parametrize("raw", ["-1", "many", "65", "2.5"])
def test_a_bad_ahead_setting_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=prepared.AHEAD_ENV):
        prepared.ahead_setting({prepared.AHEAD_ENV: raw})


def test_preparing_ahead_is_off_unless_asked_for() -> None:
    # off by default: on an H200 it moved some processes' times (benchmarks.prepared)
    assert prepared.ahead_setting({}) == prepared.DEFAULT_AHEAD == 0
    assert prepared.ahead_setting({prepared.AHEAD_ENV: "8"}) == 8


def test_only_gpu_builds_that_time_nothing_on_the_device_prepare_ahead(
    tiny_spec: SpecFactory,
) -> None:
    gpu = tiny_spec(device="cuda", backend="inductor", precision="fp16")
    assert prepared.quiet_build(gpu)
    assert prepared.quiet_build(replace(gpu, backend="eager"))
    assert not prepared.quiet_build(tiny_spec())  # a CPU cell: a second process moves timing
    assert not prepared.quiet_build(replace(gpu, timing=replace(gpu.timing,
                                                                 builds="as-shipped")))
    assert not prepared.quiet_build(replace(gpu, opt_level="max-autotune"))
    assert not prepared.quiet_build(replace(gpu, backend="tensorrt"))
    assert not prepared.quiet_build(replace(gpu, options={**gpu.options, "sides": "split"}))


def _cells(tiny_spec: SpecFactory) -> list[AdaptiveMeasurement]:
    specs = [tiny_spec(timing=replace(tiny_spec().timing, processes=3, max_processes=3)),
             tiny_spec(batch_size=2,
                       timing=replace(tiny_spec().timing, processes=3, max_processes=3))]
    return [AdaptiveMeasurement(s, reference_for=lambda _r: None, timeout_s=300)
            for s in specs]


def _gates(result: Any) -> list[bool]:
    return ["gate" in (p.get("phases") or {}) for p in result.evidence["processes"]]


def test_cells_measured_with_children_prepared_ahead_time_one_process_at_a_time(
    tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prepared, "quiet_build", lambda spec: True)  # the GPU policy, here
    monkeypatch.setenv(prepared.AHEAD_ENV, "4")
    results = run_adaptive_interleaved(_cells(tiny_spec))
    for result in results:
        assert result.status == "ok", (result.reason, result.stderr_tail)
        assert len(result.evidence["processes"]) == 3
        assert all(_gates(result)), "every unit was started ahead and waited for its turn"
    windows = sorted(tuple(w) for r in results for w in _windows(r))
    assert len(windows) == 6
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert start >= end, "two children timed at once"


def _windows(result: Any) -> list[list[float]]:
    return [p["timing_window"] for p in result.evidence["processes"]]


def test_without_preparing_ahead_no_child_waits_at_a_gate(
    tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prepared, "quiet_build", lambda spec: True)
    monkeypatch.setenv(prepared.AHEAD_ENV, "0")
    results = run_adaptive_interleaved(_cells(tiny_spec)[:1])
    assert results[0].status == "ok", results[0].reason
    assert not any(_gates(results[0]))
