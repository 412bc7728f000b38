"""Where a host's tuning caches live and what their names are keyed by (benchmarks.build)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks import build


def test_the_tuning_directory_comes_from_the_environment_else_the_users_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setenv(build.TUNING_CACHE_ENV, str(tmp_path / "tuning"))
    assert build.tuning_cache_dir() == tmp_path / "tuning"
    monkeypatch.setenv("HOME", str(tmp_path))
    for unset in ("", "  "):
        monkeypatch.setenv(build.TUNING_CACHE_ENV, unset)
        assert build.tuning_cache_dir() == tmp_path / ".cache" / "speedwatch" / "tuning"
    monkeypatch.delenv(build.TUNING_CACHE_ENV)
    assert build.tuning_cache_dir() == tmp_path / ".cache" / "speedwatch" / "tuning"


@pytest.mark.parametrize(("name", "capability", "key"), [
    ("NVIDIA H100 80GB HBM3", (9, 0), "nvidia-h100-sm90"),
    ("NVIDIA H100 PCIe", (9, 0), "nvidia-h100-sm90"),
    ("NVIDIA GeForce RTX 4090", (8, 9), "nvidia-rtx-4090-sm89"),
])
def test_a_cache_is_keyed_by_the_gpu_model_and_compute_capability(
    monkeypatch: pytest.MonkeyPatch, name: str, capability: tuple[int, int], key: str,
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert build.cuda_device_key() == key


def test_a_cache_file_is_named_for_the_compiler_version_and_the_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setenv(build.TUNING_CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(build, "cuda_device_key", lambda: "nvidia-h100-sm90")
    assert build.tuning_cache_file("tensorrt", "10.13.0.35", "timing-cache") == (
        tmp_path / "tensorrt" / "10.13.0.35-nvidia-h100-sm90.timing-cache")
    # a version string is never a path
    assert build.tuning_cache_file("tensorrt", "10.0/../x y", "timing-cache").parent == (
        tmp_path / "tensorrt")
