"""Models of the user's: the forms `--model` accepts, what makes a model's identity in its
series key, and the reasons a cell is skipped when the model cannot be measured.

The models are written by the tests into temporary directories outside the repository
(tests.own_model_files), found through SPEEDWATCH_MODEL_PATH as a worker finds them, and
measured in this process (run_spec) with few rounds: these tests are about building and
naming models, not about timing.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import model_ref
from benchmarks.merging import merge_processes
from benchmarks.result import BenchResult, ResultError
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec, SpecError, parse_series_key
from benchmarks.timing_policy import TimingPolicy
from tests.own_model_files import export_archive, write_package

FAST = TimingPolicy(warmup_iters=1, rounds=3, min_rounds=2, iters_per_round=2,
                    max_seconds=0.5, warmup_seconds=0, bootstrap_resamples=200)


def _spec(model: str, backend: str = "eager", **kwargs: object) -> BenchSpec:
    return BenchSpec(model=model, backend=backend, device="cpu", timing=FAST,
                     options={"threads": 1}, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def model_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty model path directory, outside the repository, listed as a worker lists it.
    Packages the tests write there are forgotten afterwards (sys.modules, sys.path)."""
    root = tmp_path / "models"
    root.mkdir()
    monkeypatch.setenv("SPEEDWATCH_MODEL_PATH", str(root))
    before = set(sys.modules)
    yield root
    for name in set(sys.modules) - before:
        if name.split(".")[0].startswith(("mypkg", "brokenpkg", "pkg_")):
            del sys.modules[name]
    if str(root) in sys.path:
        sys.path.remove(str(root))


# ---- the forms ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "kind"), [
    ("resnet50", "builtin"),
    ("mypkg.nets:build", "factory"),
    ("torchvision:resnet18", "torchvision"),
    ("timm:vit_tiny_patch16_224.augreg_in21k", "timm"),
    ("file:small.pt2", "pt2"),
    ("file:nets/v2/small-cnn_1.pt2", "pt2"),
])
def test_each_form_of_model_is_recognised(text: str, kind: str) -> None:
    assert model_ref.parse(text).kind == kind


@pytest.mark.parametrize(("text", "says"), [
    ("resnet5", "is not one of resnet18"),
    ("https://example.com/m.pt2", "URLs are not models here"),
    ("file:../outside.pt2", "'..' path parts are refused"),
    ("file:nets/../../etc/x.pt2", "'..' path parts are refused"),
    ("file:/etc/models/m.pt2", "relative to the worker's model path"),
    ("file:nets\\m.pt2", "use '/'"),
    ("file:model.onnx", "ending in .pt2"),
    ("file:.hidden.pt2", "may hold letters"),
    ("file:a//b.pt2", "empty"),
    ("mypkg.nets", "is not one of"),
    ("mypkg.nets:", "expected package.module:factory"),
    ("my-pkg.nets:build", "expected package.module:factory"),
    ("mypkg.nets:build;rm", "expected package.module:factory"),
    # an attribute path reaches past the module into what it imported
    ("mypkg.nets:os.system", "the factory is one name defined in the module ('os.system' is"),
    ("mypkg.nets:build.__globals__", "the factory is one name defined in the module"),
    ("mypkg.nets:_private", "an attribute path or a private name"),
    ("mypkg.nets:Builder.make", "the factory is one name defined in the module"),
    # a trailing newline would make a series key its own points route cannot reach
    ("mypkg.nets:build\n", "expected package.module:factory"),
    ("torchvision:resnet18\n", "expected torchvision:NAME"),
    ("file:small.pt2\n", "ending in .pt2"),
    ("torchvision:", "expected torchvision:NAME"),
    ("timm:a/b", "expected timm:NAME"),
    ("pkg." + "x" * 90 + ":f", "at most 87 characters"),
])
def test_garbage_and_anything_that_could_leave_its_directory_is_refused_with_the_reason(
    text: str, says: str
) -> None:
    with pytest.raises(model_ref.ModelRefError, match=None) as caught:
        model_ref.parse(text)
    assert says in str(caught.value), str(caught.value)


def test_the_local_bench_may_name_an_archive_by_absolute_path_but_its_label_is_the_file_name(
) -> None:
    ref = model_ref.parse("file:/home/me/exports/small.pt2", allow_absolute=True)
    assert ref.label("0123456789ab") == "file:small.pt2@0123456789ab"
    assert "/" not in ref.label(None)
    with pytest.raises(SpecError, match="model:"):
        _spec("file:/a/../b.pt2").validate()


def test_a_user_model_is_keyed_by_name_and_digest_a_builtin_one_by_name_and_geometry() -> None:
    own = _spec("mypkg.nets:build", image_size=64)
    assert own.series_key("cpu").startswith("mypkg.nets:build/eager/")  # as the API predicts
    key = own.series_key("cpu", model_digest="0123456789ab")
    assert parse_series_key(key)["model"] == "mypkg.nets:build@0123456789ab"
    builtin = _spec("resnet18", width=8)
    assert builtin.series_key("cpu", model_digest="0123456789ab") == builtin.series_key("cpu")
    assert parse_series_key(builtin.series_key("cpu"))["model"] == "resnet18-w8"


# ---- a factory, measured ------------------------------------------------------------------

def test_a_factory_model_is_measured_and_its_key_carries_the_fingerprint(
    model_path: Path
) -> None:
    write_package(model_path)

    result = run_spec(_spec("mypkg.nets:build", batch_size=2))

    assert result.status == "ok", result.reason
    model = result.fingerprint["model"]
    assert model["kind"] == "factory" and model["fingerprint"] == "trace-v1"
    assert model["inputs"] == [{"shape": [2, 3, 32, 32], "dtype": "float32"}]
    assert model["source"].startswith(str(model_path))
    assert parse_series_key(result.series_key)["model"] == f"mypkg.nets:build@{model['digest']}"
    assert result.accuracy is not None and result.accuracy.passed
    BenchResult.from_json(result.to_json())  # a valid document


def _digest(root: Path, name: str, **kwargs: object) -> str:
    write_package(root, name, **kwargs)  # type: ignore[arg-type]
    result = run_spec(_spec(f"{name}.nets:build"))
    assert result.status == "ok", result.reason
    return str(result.fingerprint["model"]["digest"])


def test_the_fingerprint_follows_the_architecture_and_input_not_comments_or_weights(
    model_path: Path
) -> None:
    """A changed custom block, a helper its forward calls and the input shape start a new
    series; a comment or another seed (other random weights) do not."""
    base = _digest(model_path, "pkg_base")
    assert _digest(model_path, "pkg_base_again") == base
    assert _digest(model_path, "pkg_comment", comment="# only a comment") == base
    assert _digest(model_path, "pkg_scale", scale="0.25") != base
    assert _digest(model_path, "pkg_size", size=48) != base
    unused = "\n\ndef _act(x):\n    return torch.relu(x)\n"
    assert _digest(model_path, "pkg_unused", extra=unused) == base  # never called
    helper = "\n\ndef _half(x):\n    return torch.full_like(x, {})\n"
    half = _digest(model_path, "pkg_half", scale="_half(x)", extra=helper.format("0.5"))
    quarter = _digest(model_path, "pkg_quarter", scale="_half(x)", extra=helper.format("0.25"))
    assert len({base, half, quarter}) == 3
    write_package(model_path, "pkg_seed")
    seeded = run_spec(replace(_spec("pkg_seed.nets:build"), seed=7))
    assert seeded.fingerprint["model"]["digest"] == base


def test_processes_that_built_different_models_are_not_merged(model_path: Path) -> None:
    write_package(model_path)
    one = run_spec(_spec("mypkg.nets:build"))
    other = BenchResult.from_dict({**one.to_dict(), "fingerprint": {
        **one.fingerprint, "model": {**one.fingerprint["model"], "digest": "0" * 12}}})
    spec = replace(_spec("mypkg.nets:build"), timing=replace(FAST, processes=2))
    with pytest.raises(ResultError, match="fingerprint differs between processes"):
        merge_processes(spec, [one, other], started_monotonic=0.0)


# ---- why a cell is skipped ----------------------------------------------------------------

BROKEN = {
    "raises": ("def build(batch_size):\n    raise ValueError('no weights for this batch')\n",
               "the factory raised ValueError: no weights for this batch"),
    "no_args": ("def build():\n    return None\n",
                "the factory must accept the batch size"),
    "returns_module": ("import torch\ndef build(batch_size):\n    return torch.nn.ReLU()\n",
                       "the factory returned a ReLU; expected (nn.Module, inputs)"),
    "two_inputs": ("import torch\ndef build(b):\n    return torch.nn.Bilinear(2, 2, 2), "
                   "(torch.randn(b, 2), torch.randn(b, 2))\n",
                   "takes 2 inputs; Speedwatch measures models with one input tensor"),
    "int_input": ("import torch\ndef build(b):\n    return torch.nn.Embedding(10, 4), "
                  "(torch.zeros(b, 3, dtype=torch.long),)\n",
                  "its input is torch.int64"),
    "wrong_batch": ("import torch\ndef build(b):\n    return torch.nn.ReLU(), "
                    "(torch.randn(b + 1, 3),)\n",
                    "asked for batch 1, its input has shape [2, 3]"),
    "tuple_output": ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                     "        return x, x\ndef build(b):\n    return M(), (torch.randn(b, 3),)\n",
                     "returns a tuple of 2 (Tensor, Tensor); Speedwatch compares one output"),
    "import_error": ("import not_installed_anywhere\n",
                     "importing brokenpkg.m failed: ModuleNotFoundError"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_model_that_cannot_be_built_skips_its_cell_saying_why(
    model_path: Path, case: str
) -> None:
    source, says = BROKEN[case]
    (model_path / "brokenpkg").mkdir()
    (model_path / "brokenpkg" / "__init__.py").write_text("")
    (model_path / "brokenpkg" / "m.py").write_text(source)

    result = run_spec(_spec("brokenpkg.m:build"))

    assert result.status == "skipped"
    assert result.reason is not None and result.reason.startswith("model brokenpkg.m:build: ")
    assert says in result.reason, result.reason
    assert parse_series_key(result.series_key)["model"] == "brokenpkg.m:build"


def test_a_package_that_is_not_installed_says_where_to_put_it_not_the_workers_layout(
    model_path: Path,
) -> None:
    # the reason reaches every ci token of the project: the worker's directories stay its own
    result = run_spec(_spec("nowhere_pkg.nets:build"))
    assert result.status == "skipped"
    assert result.reason == (
        "model nowhere_pkg.nets:build: module 'nowhere_pkg' is not importable where the cell "
        "runs (install it there, or put the directory that holds it on SPEEDWATCH_MODEL_PATH; "
        "the worker's SPEEDWATCH_MODEL_PATH lists 1 directory)")
    assert str(model_path) not in result.to_json()


@pytest.mark.parametrize("name", ["touch", "getcwd", "Path"])
def test_a_name_the_module_imported_from_elsewhere_is_never_called(
    model_path: Path, tmp_path: Path, name: str
) -> None:
    """Only code the allowed package defines runs: `from sidefx import touch` in mypkg.nets
    does not make `mypkg.nets:touch` a factory of mypkg (nor `os.getcwd`, nor a class)."""
    marker = tmp_path / "called"
    (model_path / "sidefx.py").write_text(
        f"def touch(batch_size):\n    open({str(marker)!r}, 'w').close()\n")
    write_package(model_path, extra="from os import getcwd\nfrom pathlib import Path\n"
                                     "from sidefx import touch\n")
    result = run_spec(_spec(f"mypkg.nets:{name}"))
    assert result.status == "skipped"
    assert result.reason is not None and result.reason.startswith(
        f"model mypkg.nets:{name}: {name} is not a function or class defined in package "
        "'mypkg' (")
    assert not marker.exists()


def test_a_factory_without_that_attribute_is_skipped(model_path: Path) -> None:
    write_package(model_path)
    result = run_spec(_spec("mypkg.nets:make_model"))
    assert (result.status, result.reason) == (
        "skipped", "model mypkg.nets:make_model: mypkg.nets has no attribute 'make_model'")


def test_a_model_no_onnx_exporter_takes_is_skipped_for_onnxruntime_with_both_reasons(
    model_path: Path
) -> None:
    """linalg.eigh has no ONNX translation in either exporter: a property of this model."""
    write_package(model_path, extra=(
        "\n\nclass Spectral(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.linalg.eigh(x @ x.transpose(-1, -2))[0]\n\n\n"
        "def spectral(batch_size):\n"
        "    return Spectral(), (torch.randn(batch_size, 4, 4),)\n"))
    result = run_spec(_spec("mypkg.nets:spectral", backend="onnxruntime"))
    assert result.status == "skipped", result.reason
    assert result.reason is not None
    assert result.reason.startswith("model mypkg.nets:spectral cannot be exported to ONNX "
                                    "(torchscript: "), result.reason
    assert "'aten::linalg_eigh' to ONNX opset version 17 is not supported" in result.reason
    assert "| dynamo: DispatchError: No ONNX function found for <OpOverload(" \
        "op='aten._linalg_eigh'" in result.reason
    assert "\x1b[" not in result.reason
    # built before the backend gave up: the skip is filed under the model's fingerprint
    assert "@" in parse_series_key(result.series_key)["model"]  # type: ignore[operator]


def test_a_custom_op_without_an_onnx_translation_is_skipped_naming_the_op(
    model_path: Path
) -> None:
    write_package(model_path, "pkg_customop", extra=(
        "\n\n@torch.library.custom_op('speedwatch_test::scale2', mutates_args=())\n"
        "def scale2(x: torch.Tensor) -> torch.Tensor:\n"
        "    return x * 2\n\n\n"
        "@scale2.register_fake\n"
        "def _(x):\n"
        "    return torch.empty_like(x)\n\n\n"
        "class WithOp(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return scale2(x) + 1\n\n\n"
        "def with_op(batch_size):\n"
        "    return WithOp(), (torch.randn(batch_size, 8),)\n"))
    result = run_spec(_spec("pkg_customop.nets:with_op", backend="onnxruntime"))
    assert (result.status, result.reason) == (
        "skipped", "custom op speedwatch_test::scale2 has no ONNX symbolic; ONNX Runtime "
        "cannot run this model")


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="inductor on CPU needs a C++ compiler")
def test_an_op_torch_compile_cannot_trace_is_skipped_for_inductor_naming_the_op(
    model_path: Path
) -> None:
    """No fake implementation: dynamo fails while tracing, before any code is generated."""
    write_package(model_path, "pkg_nofake", extra=(
        "\n\n@torch.library.custom_op('speedwatch_test::nofake', mutates_args=())\n"
        "def nofake(x: torch.Tensor) -> torch.Tensor:\n"
        "    return x.clone()\n\n\n"
        "class NoFake(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return nofake(x) + 1\n\n\n"
        "def no_fake(batch_size):\n"
        "    return NoFake(), (torch.randn(batch_size, 8),)\n"))
    result = run_spec(_spec("pkg_nofake.nets:no_fake", backend="inductor"))
    assert (result.status, result.reason) == (
        "skipped", "torch.compile cannot trace op speedwatch_test::nofake of model "
        "pkg_nofake.nets:no_fake: it has no fake (meta) implementation; register one with "
        "register_fake")


# ---- torch.export archives ----------------------------------------------------------------

@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small.pt2 (dynamic batch) and static2.pt2 (batch 2 only), exported once."""
    root = tmp_path_factory.mktemp("archives")
    src = write_package(tmp_path_factory.mktemp("src"), "pkg_export")
    export_archive(src, root / "nets" / "small.pt2", name="pkg_export")
    export_archive(src, root / "static2.pt2", name="pkg_export", dynamic=False)
    (root / "garbage.pt2").write_bytes(b"not a zip")
    return root


def test_an_archive_in_the_model_path_is_measured_and_keyed_by_its_graph(
    archives: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEEDWATCH_MODEL_PATH", f"/nonexistent:{archives}")
    result = run_spec(_spec("file:nets/small.pt2", batch_size=3))
    assert result.status == "ok", result.reason
    model = result.fingerprint["model"]
    assert (model["kind"], model["fingerprint"]) == ("pt2", "graph-v1")
    assert model["source"] == str(archives / "nets" / "small.pt2")
    assert model["inputs"] == [{"shape": [3, 3, 32, 32], "dtype": "float32"}]
    assert parse_series_key(result.series_key)["model"] == f"file:small.pt2@{model['digest']}"
    # the same archive by absolute path (the local bench) lands in the same series
    local = run_spec(_spec(f"file:{archives}/nets/small.pt2", batch_size=3))
    assert local.series_key == result.series_key


@pytest.mark.parametrize(("model", "batch", "says"), [
    ("file:static2.pt2", 1, "exported for batch 2 only (a static batch dimension); ask for "
     "batch 2, or export with a dynamic batch"),
    ("file:small.pt2", 1, "small.pt2 is in none of the model path's directories"),
    ("file:nets/small.pt2", 65, "exported for batches 1 to 64, not 65"),
    ("file:garbage.pt2", 1, "not a torch.export archive this torch"),
])
def test_an_archive_that_cannot_run_this_cell_is_skipped_saying_why(
    archives: Path, monkeypatch: pytest.MonkeyPatch, model: str, batch: int, says: str
) -> None:
    monkeypatch.setenv("SPEEDWATCH_MODEL_PATH", str(archives))
    result = run_spec(_spec(model, batch_size=batch))
    assert result.status == "skipped"
    assert says in (result.reason or ""), result.reason


def test_a_relative_archive_without_a_model_path_says_so(
    archives: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPEEDWATCH_MODEL_PATH", raising=False)
    result = run_spec(_spec("file:static2.pt2", batch_size=2))
    assert (result.status, result.reason) == (
        "skipped", "model file:static2.pt2: a relative archive is looked up in the worker's "
        "model path, and SPEEDWATCH_MODEL_PATH is not set")


# ---- torchvision and timm -----------------------------------------------------------------

@pytest.mark.parametrize("library", ["torchvision", "timm"])
def test_a_library_model_is_built_by_name_with_random_weights_or_skipped_when_absent(
    library: str
) -> None:
    """Where the library is installed, its resnet18 is measured (nothing downloaded);
    where it is not, the cell says so. Only one branch runs on a given machine."""
    result = run_spec(_spec(f"{library}:resnet18", image_size=64))
    if importlib.util.find_spec(library) is None:
        assert result.status == "skipped"
        assert (result.reason or "").startswith(
            f"model {library}:resnet18: {library} is not installed in the cell's environment")
        return
    assert result.status == "ok", result.reason
    assert result.fingerprint["model"]["inputs"][0]["shape"] == [1, 3, 64, 64]
    assert parse_series_key(result.series_key)["model"].startswith(  # type: ignore[union-attr]
        f"{library}:resnet18@")


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="torchvision is not installed here")
def test_a_model_torchvision_does_not_have_is_skipped() -> None:
    result = run_spec(_spec("torchvision:resnet19"))
    assert result.status == "skipped"
    assert "has no model 'resnet19'" in (result.reason or "")
