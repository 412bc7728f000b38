"""The host's build cache: a pinned build is made once and loaded by later processes, never
from a stale, damaged or different entry (benchmarks.build_cache).

Real ONNX Runtime builds of a tiny ResNet on the CPU; the cache in a directory of each
test's own."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks import build, build_cache, identity
from benchmarks.backends import get_backend
from benchmarks.isolation import run_isolated
from benchmarks.models import build_model, example_input
from tests.benchmarks.conftest import make_tiny_spec

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "builds"
    monkeypatch.setenv(build_cache.BUILD_CACHE_ENV, str(root))
    monkeypatch.delenv(build_cache.BUILD_CACHE_MAX_ENV, raising=False)
    return root


def ort_spec(**overrides: Any) -> Any:
    return make_tiny_spec(backend="onnxruntime", **overrides)


def build_once(spec: Any) -> tuple[Any, dict[str, Any]]:
    """What the runner does for the candidate: built or loaded, with the record."""
    model = build_model(spec)
    return build_cache.built_or_loaded(spec, get_backend(spec.backend), model,
                                       example_input(spec), lambda: build_model(spec),
                                       spec.model)


def entry_dir(root: Path) -> Path:
    entries = [p for p in root.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1, entries
    return entries[0]


def test_a_second_build_of_the_same_cell_is_loaded_with_the_built_fingerprint(
        cache_root: Path) -> None:
    spec = ort_spec()
    first, built = build_once(spec)
    second, loaded = build_once(spec)
    assert built["source"] == "built" and built["stored"] is True
    assert loaded["source"] == "loaded" and loaded["key"] == built["key"]
    assert loaded["built_seconds"] == pytest.approx(built["seconds"], abs=0.01)
    assert build.fingerprint(second.build_choices) == build.fingerprint(first.build_choices)
    x = example_input(spec)
    assert (second.run(x) - first.run(x)).abs().max().item() == 0.0


def test_a_changed_pipeline_misses_the_cache(cache_root: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ort_spec()
    _, built = build_once(spec)
    # the harness's own code is part of every key: another pipeline, another entry
    monkeypatch.setattr(identity, "harness_digest", lambda: "another-pipeline")
    _, again = build_once(spec)
    assert again["source"] == "built" and again["key"] != built["key"]
    # so is anything that decides the build: another opset-relevant spec field
    _, other = build_once(replace(spec, batch_size=2))
    assert other["source"] == "built" and other["key"] not in (built["key"], again["key"])


def test_a_damaged_entry_is_rebuilt_never_used(cache_root: Path) -> None:
    spec = ort_spec()
    build_once(spec)
    exported = entry_dir(cache_root) / "exported.onnx"
    data = bytearray(exported.read_bytes())
    data[len(data) // 2] ^= 0xFF
    exported.write_bytes(bytes(data))
    _, rebuilt = build_once(spec)
    assert rebuilt["source"] == "built"
    assert "damaged" in rebuilt["problem"] and "exported.onnx" in rebuilt["problem"]
    # the fresh build took the damaged one's place
    _, loaded = build_once(spec)
    assert loaded["source"] == "loaded"


def test_a_partial_entry_is_rebuilt(cache_root: Path) -> None:
    spec = ort_spec()
    build_once(spec)
    (entry_dir(cache_root) / "export.json").unlink()
    _, rebuilt = build_once(spec)
    assert rebuilt["source"] == "built" and "damaged" in rebuilt["problem"]


def test_a_loaded_build_whose_fingerprint_differs_is_refused_with_the_reason(
        cache_root: Path) -> None:
    spec = ort_spec()
    build_once(spec)
    meta_path = entry_dir(cache_root) / build_cache.ENTRY_FILE
    meta = json.loads(meta_path.read_text())
    meta["fingerprint"] = "0123456789ab"  # files intact: only the build they make differs
    meta_path.write_text(json.dumps(meta))
    compiled, refused = build_once(spec)
    assert refused["source"] == "built"
    assert "0123456789ab" in refused["refused"] and "removed" in refused["refused"]
    assert build.fingerprint(compiled.build_choices) != "0123456789ab"
    assert not any(p for p in cache_root.iterdir() if not p.name.startswith("."))


def test_the_cache_keeps_to_its_size_by_evicting_the_least_recently_used(
        tmp_path: Path) -> None:
    cache = build_cache.BuildCache(tmp_path, limit=2500)
    for key in ("a" * 32, "b" * 32, "c" * 32):
        assert cache.store(key, {"blob.bin": b"x" * 1000}, fingerprint="f", build_seconds=1.0,
                           parts={})
    kept = {key for key, _, _ in cache.entries()}
    # three 1000-byte entries (and their entry.json) do not fit 2500 bytes: the oldest went
    assert "a" * 32 not in kept and "c" * 32 in kept
    assert sum(size for _, _, size in cache.entries()) <= 2500 or len(kept) == 1


def test_as_shipped_builds_and_an_off_cache_never_touch_it(
        cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, shipped = build_once(ort_spec(timing=replace(ort_spec().timing, builds="as-shipped")))
    assert shipped["source"] == "built" and shipped["cached"] is False
    assert "as-shipped" in shipped["why_uncached"]
    monkeypatch.setenv(build_cache.BUILD_CACHE_ENV, "off")
    _, off = build_once(ort_spec())
    assert off["cached"] is False and not cache_root.exists()


def test_a_bad_size_setting_is_named_not_a_traceback(cache_root: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build_cache.BUILD_CACHE_MAX_ENV, "ten gigs")
    _, info = build_once(ort_spec())
    assert info["cached"] is False
    assert build_cache.BUILD_CACHE_MAX_ENV in info["why_uncached"]


def test_an_isolated_cell_builds_once_and_its_other_processes_load(cache_root: Path) -> None:
    spec = ort_spec(timing=replace(ort_spec().timing, processes=3))
    result = run_isolated(spec, timeout_s=300, python=sys.executable)
    assert result.status == "ok", result.reason
    sources = [p["build"]["source"] for p in result.evidence["processes"]]
    assert sources == ["built", "loaded", "loaded"]
    assert result.evidence["build"]["distinct"] == 1


@pytest.mark.slow
def test_an_inductor_cell_builds_once_and_loads_inductors_cache_artifacts_after(
        cache_root: Path) -> None:
    spec = make_tiny_spec(backend="inductor", weights="tensor")
    result = run_isolated(replace(spec, timing=replace(spec.timing, processes=2)),
                          timeout_s=600, python=sys.executable)
    assert result.status == "ok", result.reason
    builds = [p["build"] for p in result.evidence["processes"]]
    assert [b["source"] for b in builds] == ["built", "loaded"]
    assert result.evidence["build"]["distinct"] == 1  # the loaded build is the built one


@pytest.mark.slow
def test_a_frozen_inductor_build_on_a_cpu_says_why_nothing_was_kept(
        cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # inductor bypasses its caches for a frozen graph on a CPU (weights packed for oneDNN)
    monkeypatch.setenv("SPEEDWATCH_INDUCTOR_PROGRAMS", "1")
    spec = make_tiny_spec(backend="inductor", weights="constant")
    result = run_isolated(spec, timeout_s=600, python=sys.executable)
    assert result.status == "ok", result.reason
    build_record = result.evidence["build"]
    assert build_record["source"] == "built" and build_record["stored"] is False
    assert "kept no cache artifacts" in build_record["why_uncached"]
    # nor its program: a convolution's folded weights are packed for oneDNN on a CPU
    assert "its program was not kept" in build_record["why_uncached"]
    assert "packed weight" in build_record["why_uncached"]


def test_a_built_in_models_weights_are_kept_and_loaded_bit_for_bit(cache_root: Path) -> None:
    import torch

    spec = make_tiny_spec(model="resnet50")
    built, first = build_cache.built_model(spec)
    loaded, second = build_cache.built_model(spec)
    assert first["source"] == "built" and second["source"] == "loaded"
    for (name, a), (_, b) in zip(built.state_dict().items(), loaded.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    assert not loaded.training and not any(p.requires_grad for p in loaded.parameters())
    # another seed is another model
    _, other = build_cache.built_model(replace(spec, seed=1))
    assert other["source"] == "built"
