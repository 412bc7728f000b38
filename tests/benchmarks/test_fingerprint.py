"""Fingerprints: device classes from GPU names, and nothing fails without a GPU."""

from __future__ import annotations

import platform

import pytest

from benchmarks import fingerprint


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA H100 80GB HBM3", "nvidia-h100"),
    ("NVIDIA H100 PCIe", "nvidia-h100"),
    ("NVIDIA H200", "nvidia-h200"),
    ("NVIDIA A100-SXM4-80GB", "nvidia-a100"),
    ("Tesla T4", "nvidia-t4"),
    ("NVIDIA GeForce RTX 4090", "nvidia-rtx-4090"),
    ("NVIDIA L4", "nvidia-l4"),
])
def test_device_class_names_the_gpu_model(name: str, expected: str) -> None:
    assert fingerprint.device_class_from_gpu_name(name) == expected


def test_cpu_fingerprint_names_interpreter_packages_and_cpu() -> None:
    fp = fingerprint.collect("cpu")
    assert fp["device_class"] == "cpu"
    assert fp["python"] == platform.python_version()
    assert "torch" in fp["packages"] and "numpy" in fp["packages"]
    assert "tensorrt" not in fp["packages"] or fp["packages"]["tensorrt"]  # absent ones omitted
    assert fp["cpu"]


def test_without_nvml_or_gpu_readings_are_absent_not_errors() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert fingerprint.collect_nvml() is None
    assert fingerprint.device_class("cuda") == "cuda"  # a fallback class, not an exception


def test_throttled_is_derived_from_readings_at_start_and_end() -> None:
    cool = {"sm_clock_mhz": 1980, "throttled": False, "throttle_reasons": []}
    hot = {"sm_clock_mhz": 1410, "throttled": True, "throttle_reasons": ["hw_thermal_slowdown"]}
    assert fingerprint.finish({}, cool, cool)["throttled"] is False
    fp = fingerprint.finish({}, cool, hot)
    assert fp["throttled"] is True
    assert fp["nvml_start"] == cool and fp["nvml_end"] == hot
    assert "throttled" not in fingerprint.finish({}, None, None)
