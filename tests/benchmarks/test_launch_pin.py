"""A GPU process can move its captured graphs into the faster launch state itself: a helper
process makes a CUDA context on its GPU through the driver and ends (benchmarks.launch_pin).

No GPU here: the helper runs for real and meets no driver (or a driver without a device),
which is the failure a process must survive and name; the GPU part is measured on a lent
GPU (results/nvidia-h200-2026-11-29-launch-calibration/)."""

from __future__ import annotations

import pytest

from benchmarks import launch_pin, process_settings


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
