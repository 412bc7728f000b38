"""mypy checks the TensorRT code against TensorRT's real API (tensorrt-stubs, written to
typings/ by scripts/trt_stubs.py): a call real TensorRT refuses is a type error in CI.

The snippets use the converter's own annotations (ConversionReport.network is a
tensorrt.INetworkDefinition), so what is checked here is what `mypy benchmarks` checks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RIGHT = """
from benchmarks.trt_options import ConversionReport


def build(report: ConversionReport, x, w) -> None:
    layer = report.network.add_convolution_nd(x, 8, (3, 3), w, w)
    layer.stride_nd = (2, 2)
    report.config.builder_optimization_level = 5
"""

# TensorRT 10's add_convolution_nd takes no stride (strides are set on the layer); the
# workspace attribute of TensorRT 8 is gone (set_memory_pool_limit replaced it);
# add_fully_connected was removed in TensorRT 10
WRONG = RIGHT + """
    report.network.add_convolution_nd(x, 8, (3, 3), w, w, stride=(2, 2))
    report.config.max_workspace_size = 1 << 30
    report.network.add_fully_connected(x, 10, w, w)
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One mypy run (the stubs are large) over both snippets, with the project's config."""
    api = pytest.importorskip("mypy.api")
    if not (ROOT / "typings" / "tensorrt_bindings" / "tensorrt.pyi").is_file():
        pytest.fail("typings/ is missing: run `bash scripts/setup`")
    folder = tmp_path_factory.mktemp("trt_typing")
    (folder / "right.py").write_text(RIGHT)
    (folder / "wrong.py").write_text(WRONG)
    here = os.getcwd()
    os.chdir(ROOT)  # mypy_path = "typings" is relative to the project
    try:
        out, err, _ = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                               "--cache-dir", str(folder / "cache"),
                               str(folder / "right.py"), str(folder / "wrong.py")])
    finally:
        os.chdir(here)
    return out + err


def test_a_call_real_tensorrt_takes_type_checks(report: str) -> None:
    assert "right.py" not in report, report


def test_calls_real_tensorrt_refuses_are_type_errors(report: str) -> None:
    wrong = [line for line in report.splitlines() if "wrong.py" in line]
    assert any('Unexpected keyword argument "stride" for "add_convolution_nd"' in line
               for line in wrong), report
    assert any('"IBuilderConfig" has no attribute "max_workspace_size"' in line
               for line in wrong), report
    assert any('"INetworkDefinition" has no attribute "add_fully_connected"' in line
               for line in wrong), report
