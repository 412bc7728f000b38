"""Shared helpers: tiny specs that measure in about a second on a shared 2-core machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import build
from benchmarks.spec import BenchSpec
from benchmarks.timing_policy import TimingPolicy

# One intra-op thread: on a loaded machine a 2-thread pool stalls on its barriers and turns
# latency into noise; tests check the harness, not the machine.
TINY_OPTIONS = {"threads": 1}


def tiny_timing(**overrides: Any) -> TimingPolicy:
    # max_host_load: tests run beside another xdist worker (tests/conftest.py); the load
    # guard's own tests ask for a threshold
    values: dict[str, Any] = {"warmup_iters": 2, "rounds": 6, "iters_per_round": 3,
                              "max_seconds": 5.0, "min_rounds": 3, "bootstrap_resamples": 500,
                              "warmup_seconds": 0.0, "max_host_load": 4096.0}
    values.update(overrides)
    return TimingPolicy(**values)


def make_tiny_spec(**overrides: Any) -> BenchSpec:
    values: dict[str, Any] = {
        "model": "resnet18", "backend": "eager", "width": 8, "image_size": 32,
        "batch_size": 1, "device": "cpu", "options": dict(TINY_OPTIONS), "timing": tiny_timing(),
    }
    values.update(overrides)
    return BenchSpec(**values)


@pytest.fixture
def tiny_spec() -> Callable[..., BenchSpec]:
    return make_tiny_spec


@pytest.fixture(scope="module")
def single_thread() -> Any:
    """Pin torch to one intra-op thread for a test module (see TINY_OPTIONS), then restore."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


HOST_GPU_KEY = "nvidia-h100-sm90"


@pytest.fixture
def host_tuning_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host's tuning-cache directory (benchmarks.build.tuning_cache_dir) for one test: a
    fresh one, on an H100 as far as cache names go. Pinned TensorRT builds load and save
    the host's timing cache by default, so without this a test would need a GPU to name
    it, write into the user's ~/.cache, and replay tactics another test timed."""
    directory = tmp_path / "tuning"
    monkeypatch.setenv(build.TUNING_CACHE_ENV, str(directory))
    monkeypatch.setattr(build, "cuda_device_key", lambda: HOST_GPU_KEY)
    return directory
