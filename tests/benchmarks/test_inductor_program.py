"""A frozen inductor build is kept as the program inductor generated, and later processes
load it without tracing (benchmarks.backends.inductor_program); a program that cannot stand
for its build is not kept, and one that cannot be used here is refused with the reason.

Real inductor on the CPU (C++ kernels), on a model whose weights only meet elementwise ops:
its folded constants are plain tensors here, as on a GPU."""

from __future__ import annotations

import io
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks import build, build_cache
from benchmarks.backends.inductor import BACKEND
from benchmarks.backends.inductor_program import PROGRAM_FILE, SETTING_ENV, enabled, why_not_kept
from benchmarks.isolation import run_isolated
from tests.benchmarks.conftest import make_tiny_spec
from tests.own_model_files import POINTWISE, load_nets, write_package

pytestmark = [pytest.mark.usefixtures("single_thread"), pytest.mark.skipif(
    BACKEND.unavailable_reason(make_tiny_spec(backend="inductor")) is not None,
    reason="inductor on CPU needs a C++ compiler")]


@pytest.fixture
def model_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's package with the elementwise factory, on the model path, a build cache of
    the test's own, and programs kept (they are not by default)."""
    root = write_package(tmp_path / "models", "pkg_program", extra=POINTWISE)
    monkeypatch.setenv("SPEEDWATCH_MODEL_PATH", str(root))
    monkeypatch.setenv(build_cache.BUILD_CACHE_ENV, str(tmp_path / "builds"))
    monkeypatch.setenv(SETTING_ENV, "1")
    return root


def frozen_spec(**timing: Any) -> Any:
    spec = make_tiny_spec(model="pkg_program.nets:pointwise", backend="inductor",
                          weights="constant")
    return replace(spec, timing=replace(spec.timing, **timing)) if timing else spec


@pytest.mark.slow
def test_a_frozen_build_is_kept_as_its_program_and_later_processes_load_it(
        model_root: Path) -> None:
    # one inductor cache for both processes: the loading one finds the C++ kernel compiled
    result = run_isolated(frozen_spec(processes=2, compile_cache="host"), timeout_s=600,
                          python=sys.executable)
    assert result.status == "ok", result.reason
    builds = [p["build"] for p in result.evidence["processes"]]
    assert [b["source"] for b in builds] == ["built", "loaded"]
    assert builds[1]["via"] == "program" and "note" not in builds[1]
    assert result.evidence["inductor_program"] == "kept"  # the first process's record
    assert result.evidence["build"]["distinct"] == 1  # the loaded program is the build
    assert result.accuracy is not None and result.accuracy.passed


def _built(root: Path) -> tuple[Any, Any, Any, dict[str, bytes]]:
    import torch
    from torch._inductor.codecache import PyCodeCache

    PyCodeCache.cache_clear()  # one compile's modules, as in a process of its own

    model, (x,) = load_nets(root, "pkg_program").pointwise(2)
    model = model.eval().requires_grad_(False)
    compiled = BACKEND.compile_cached(model, x, frozen_spec(), None)
    assert compiled.evidence["inductor_program"] == "kept"
    assert compiled.artifacts is not None and PROGRAM_FILE in compiled.artifacts
    with torch.inference_mode():
        assert torch.equal(compiled.run(x), model(x))
    return model, x, compiled, compiled.artifacts


def _edited(program: bytes, **changes: Any) -> bytes:
    import torch

    kept = torch.load(io.BytesIO(program), weights_only=True)
    buffer = io.BytesIO()
    torch.save({**kept, **changes}, buffer)
    return buffer.getvalue()


def test_a_program_that_cannot_be_used_here_is_refused_and_the_build_loads_another_way(
        model_root: Path) -> None:
    import torch

    model, x, built, artifacts = _built(model_root)
    elsewhere = {PROGRAM_FILE: _edited(artifacts[PROGRAM_FILE], device="cuda:1")}
    loaded = BACKEND.compile_cached(model, x, frozen_spec(), elsewhere)
    assert loaded.loaded_via == "caches"
    assert loaded.load_note is not None and "built for cuda:1" in loaded.load_note
    assert build.fingerprint(loaded.build_choices) == build.fingerprint(built.build_choices)
    damaged = {PROGRAM_FILE: artifacts[PROGRAM_FILE][: len(artifacts[PROGRAM_FILE]) // 2]}
    again = BACKEND.compile_cached(model, x, frozen_spec(), damaged)
    assert again.loaded_via == "caches" and "does not load" in str(again.load_note)
    # a program that imports but fails when called is refused too, never timed
    kept = torch.load(io.BytesIO(artifacts[PROGRAM_FILE]), weights_only=True)
    failing = {PROGRAM_FILE: _edited(artifacts[PROGRAM_FILE], source=kept["source"] +
                                     "\n\ndef call(args):\n    raise RuntimeError('no')\n")}
    third = BACKEND.compile_cached(model, x, frozen_spec(), failing)
    assert third.loaded_via == "caches"
    assert "its first call failed: RuntimeError: no" in str(third.load_note)


def test_by_default_no_program_is_kept_and_a_kept_one_is_not_loaded(
        model_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.backends import inductor

    # this process loads a build below: later tests' builds must not think it did
    monkeypatch.setattr(inductor, "_LOADED_ARTIFACTS", False)
    model, x, _, artifacts = _built(model_root)  # kept while the setting says so
    monkeypatch.delenv(SETTING_ENV)
    assert enabled() is False
    plain = BACKEND.compile_cached(model, x, frozen_spec(), None)
    assert plain.artifacts is not None and PROGRAM_FILE not in plain.artifacts
    assert "inductor_program" not in plain.evidence
    loaded = BACKEND.compile_cached(model, x, frozen_spec(), artifacts)
    assert loaded.loaded_via is None and loaded.load_note is None  # one way: nothing to say
    monkeypatch.setenv(SETTING_ENV, "yes")
    with pytest.raises(ValueError, match=f"{SETTING_ENV}='yes': expected 0 or 1"):
        enabled()


@pytest.mark.parametrize(("build_facts", "says"), [
    ({"freezing": False}, "tensor weights"),
    ({"dynamic": True}, "dynamic shapes"),
    ({"uses_cudagraphs": True}, "CUDA graphs"),
    ({"graph_breaks": 1, "graphs": 2}, "2 graphs and 1 graph breaks"),
])
def test_a_build_its_program_alone_cannot_stand_for_keeps_none_and_says_why(
        build_facts: dict[str, Any], says: str) -> None:
    facts = {"freezing": True, "dynamic": False, "uses_cudagraphs": False,
             "graph_breaks": 0, "graphs": 1, **build_facts}
    assert says in str(why_not_kept(**facts))
    assert why_not_kept(freezing=True, dynamic=False, uses_cudagraphs=False, graph_breaks=0,
                        graphs=1) is None
