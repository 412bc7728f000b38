"""`speedwatch bench`: matrix from comma lists, JSON out, exit codes 0/1/2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from benchmarks.child import FAULT_ENV
from benchmarks.result import BenchResult
from cli.bench import register

TINY = ["--model", "resnet18", "--backend", "eager", "--width", "8", "--image-size", "32",
        "--rounds", "3", "--min-rounds", "2", "--iters-per-round", "2", "--warmup", "1",
        "--max-seconds", "2", "--option", "threads=1"]


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """A group, as in the real `speedwatch` command."""

    register(app)
    return app


def test_bench_runs_the_cross_product_and_writes_json(app: typer.Typer, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = CliRunner().invoke(app, ["bench", *TINY, "--batch", "1,2", "--no-isolate",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    docs = json.loads(out.read_text())
    assert isinstance(docs, list)
    results = [BenchResult.from_dict(d) for d in docs]
    assert [r.series_key for r in results] == [
        "resnet18-w8-i32/eager/constant/fp32/bs1/static/cpu/t1/nographs",
        "resnet18-w8-i32/eager/constant/fp32/bs2/static/cpu/t1/nographs",
    ]
    assert all(r.status == "ok" for r in results)
    assert results[0].spec["options"] == {"threads": 1}  # JSON-typed option value
    # the summary table names the series
    assert "resnet18-w8-i32/eager/constant/fp32/bs2/static/cpu/t1/nographs" in res.output


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "resnet7"], "error: --model: 'resnet7' is not one of"),
    (["--batch", "1,x"], "error: --batch: 'x' is not an integer"),
    (["--batch", "0"], "error: --batch: 0 must be an integer in [1, 1024]"),
    (["--weights", "refit"], "error: --weights: 'refit' exists only for the tensorrt backends"),
    # a misspelt backend is named as such, not blamed on the --opt-level the user never gave
    (["--backend", "onnxrt"], "error: --backend: 'onnxrt' is not one of eager, inductor, "
                              "onnxruntime, tensorrt, torch_tensorrt (did you mean "
                              "'onnxruntime'?)"),
    (["--shape-mode", "dynamc"], "error: --shape-mode: 'dynamc' is not one of"),
    (["--option", "threads"], "error: --option: 'threads' is not key=value"),
    (["--json", "/nonexistent/dir/out.json"], "error: --json: directory '/nonexistent/dir'"),
    (["--device", "cuda", "--isolate", "--sides", "split"],
     "error: --sides split with --device cuda: split is for CPU cells"),
])
def test_bad_input_exits_2_with_one_line(app: typer.Typer, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["bench", *TINY, *args])
    assert res.exit_code == 2
    assert res.output.startswith(message)
    assert len(res.output.strip().splitlines()) == 1
    assert "Traceback" not in res.output


def test_a_failed_spec_exits_1_and_is_still_reported(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULT_ENV, "1")
    out = tmp_path / "out.json"
    res = CliRunner().invoke(app, ["bench", *TINY, "--option", '_fault="raise"', "--isolate",
                                   "--timeout", "120", "--json", str(out)])
    assert res.exit_code == 1, res.output
    [doc] = json.loads(out.read_text())
    assert doc["status"] == "failed"
    assert "injected fault" in doc["reason"]
    assert "failed" in res.output


def test_a_model_that_cannot_be_built_is_the_users_mistake_exit_2_naming_the_flag(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `submit` does not pass a run whose model was never built, `bench` does not exit 0."""
    package = tmp_path / "tinynet"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cnn.py").write_text("def build(batch_size):\n    raise AssertionError\n")
    monkeypatch.chdir(tmp_path)
    args = [a for a in TINY if a not in ("resnet18",)]
    args[args.index("--model") + 1:args.index("--model") + 1] = ["tinynet.cnn:buld"]
    res = CliRunner().invoke(app, ["bench", *args, "--no-isolate"])
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last == ("error: --model: model tinynet.cnn:buld: tinynet.cnn has no attribute "
                    "'buld' (did you mean 'build'?)")


def test_importing_the_command_does_not_import_torch() -> None:
    code = "import sys, cli.bench; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_bench_is_registered_in_the_speedwatch_command() -> None:
    exe = Path(sys.executable).with_name("speedwatch")
    if not exe.exists():
        pytest.skip("speedwatch entry point is not installed in this environment")
    res = subprocess.run([str(exe), "bench", "--help"], capture_output=True, text=True,
                         check=False, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "--cuda-graphs" in res.stdout and "--isolate" in res.stdout
