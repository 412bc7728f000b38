"""A GPU process can move its captured graphs into the faster launch state itself: a helper
process makes a CUDA context on its GPU through the driver and ends (benchmarks.launch_pin).

No GPU here: the helper runs for real and meets no driver (or a driver without a device),
which is the failure a process must survive and name; the GPU part is measured on a lent
GPU (results/nvidia-h200-2026-11-29-launch-calibration/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.detection.notes import launch_pin_note
from benchmarks import launch_pin, process_settings
from benchmarks.result import BenchResult


def test_the_pin_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(launch_pin.PIN_ENV, raising=False)
    assert not launch_pin.enabled()
    monkeypatch.setenv(launch_pin.PIN_ENV, "on")
    assert launch_pin.enabled()
    monkeypatch.setenv(launch_pin.PIN_ENV, "Off")
    assert not launch_pin.enabled()


def test_a_worker_refuses_a_pin_setting_that_is_neither_on_nor_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(launch_pin.PIN_ENV, "sometimes")
    assert any(p.startswith("SPEEDWATCH_LAUNCH_PIN='sometimes'")
               for p in process_settings.problems())
    monkeypatch.setenv(launch_pin.PIN_ENV, "on")
    assert not any("SPEEDWATCH_LAUNCH_PIN" in p for p in process_settings.problems())


def test_a_helper_that_cannot_make_a_context_says_why_in_one_line() -> None:
    why = launch_pin.make_newer_context(0)
    assert why is not None
    assert why.startswith("the context helper failed (exit 2): ")
    # no driver library, or a driver that finds no device: either named, never a traceback
    assert "no CUDA driver library" in why or "CUDA error" in why
    assert "\n" not in why and "Traceback" not in why


def test_a_helper_that_does_not_finish_in_time_is_given_up() -> None:
    why = launch_pin.make_newer_context(0, timeout_s=0.001)
    assert why is not None and why.startswith("the context helper did not run: TimeoutExpired")


DOCUMENT = Path(__file__).parent / "documents" / "cuda-adaptive-paired.json"
MOVED = {"before_us": 1.0433, "after_us": 0.8653, "moved": True, "seconds": 0.87}


def _with_pins(*pins: dict[str, Any] | None) -> BenchResult:
    result = BenchResult.from_json(DOCUMENT.read_text())
    processes = result.evidence["processes"][:len(pins)]
    for process, pin in zip(processes, pins, strict=True):
        if pin is not None:
            process["launch_pin"] = pin
    result.evidence["processes"] = processes
    return result


def test_a_verdict_says_its_processes_timed_in_the_pinned_state() -> None:
    note = launch_pin_note(_with_pins(MOVED, MOVED, {**MOVED, "moved": False,
                                                     "before_us": 0.8652}))
    assert note == ("launch pin: 3 of 3 processes timed their graphs in the faster launch "
                    "state (2 moved into it, 1 was in it already; a 500-kernel graph went "
                    "from 1.043 to 0.865 us a kernel)")


def test_a_verdict_names_a_failed_pin_and_what_it_means() -> None:
    failed = {"error": "the context helper failed (exit 2): cuInit failed: CUDA error 100"}
    note = launch_pin_note(_with_pins(MOVED, failed)) or ""
    assert note.startswith("launch pin: 1 of 2 processes timed their graphs in the faster")
    assert note.endswith("the pin failed in 1 of 2 (the context helper failed (exit 2): "
                         "cuInit failed: CUDA error 100): those timed in whichever state "
                         "they were in")


def test_an_unpinned_result_says_nothing_of_a_pin() -> None:
    assert launch_pin_note(_with_pins(None, None)) is None
