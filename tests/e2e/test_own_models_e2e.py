"""A model of the user's, end to end, as issue 14 asks to show it: a small CNN with a
custom block in a package outside the repository (`mypkg.nets:build`), and a torch.export
archive of it (`small.pt2`), each benchmarked through `speedwatch bench` in the user's
directory and through `speedwatch submit --wait` with a project file against a real
`speedwatch serve` and `speedwatch worker`, whose model path holds its own copy of them.

Both paths name the model by the same fingerprint: the series a CI run lands in is the one
a local bench of the same code reports. Few rounds and one process per cell: this is
about the path, not the timing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.client import EXIT_PASS
from tests.faults.infra import Processes
from tests.own_model_files import export_archive, write_package

pytestmark = pytest.mark.slow

TIMING = ["--processes", "1", "--max-processes", "1", "--rounds", "5", "--iters-per-round",
          "2", "--warmup", "1", "--max-seconds", "0.5"]
PROJECT_FILE = """\
project = "{project}"
url = "{url}"
pins = []

[matrix]
models = ["mypkg.nets:build", "file:small.pt2"]
backends = ["onnxruntime"]
sides = "paired"

[timing]
processes = 1
max_processes = 1
rounds = 5
iters_per_round = 2
warmup_iters = 1
max_seconds = 0.5
"""


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's checkout: the package and the archive exported from it."""
    root = write_package(tmp_path_factory.mktemp("user"))
    export_archive(root, root / "small.pt2")
    return root


@pytest.fixture(scope="module")
def bench(user_dir: Path) -> Iterator[dict[str, Any]]:
    """`speedwatch bench` of both forms in the user's directory; its results by model."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPEEDWATCH_MODEL_PATH",)}
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "bench", "--model", "mypkg.nets:build,file:small.pt2",
         "--backend", "onnxruntime", "--sides", "paired", *TIMING, "--json", "out.json"],
        cwd=user_dir, env=env, capture_output=True, text=True, timeout=300, check=False)
    results = json.loads((user_dir / "out.json").read_text()) if proc.returncode == 0 else []
    yield {"proc": proc, "results": {r["spec"]["model"]: r for r in results}}


def _model_segment(series_key: str) -> str:
    return series_key.split("/", 1)[0]


def test_bench_measures_the_factory_and_the_archive_from_the_users_directory(
    bench: dict[str, Any], user_dir: Path
) -> None:
    proc = bench["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = bench["results"]
    factory = results["mypkg.nets:build"]
    archive = results[f"file:{user_dir}/small.pt2"]  # a relative file: is made absolute
    for result in (factory, archive):
        assert result["status"] == "ok", result["reason"]
        assert result["speedup"]["value"] > 0
    assert _model_segment(factory["series_key"]) == \
        f"mypkg.nets:build@{factory['fingerprint']['model']['digest']}"
    assert _model_segment(archive["series_key"]) == \
        f"file:small.pt2@{archive['fingerprint']['model']['digest']}"
    assert "mypkg.nets:build@" in proc.stdout and "file:small.pt2@" in proc.stdout


def test_submit_with_a_project_file_runs_both_on_a_real_worker_in_the_series_bench_named(
    bench: dict[str, Any], user_dir: Path, tmp_path: Path, procs: Processes,
    base_env: dict[str, str], queue: str, token: str
) -> None:
    models = tmp_path / "worker-models"  # the worker host's copy of the user's code
    shutil.copytree(user_dir / "mypkg", models / "mypkg")
    shutil.copy(user_dir / "small.pt2", models / "small.pt2")
    procs.env = {**base_env, "SPEEDWATCH_MODEL_PACKAGES": '["mypkg"]',
                 "SPEEDWATCH_MODEL_PATH": str(models)}
    url = procs.serve()
    procs.worker("worker", queue)
    project = tmp_path / "checkout"
    project.mkdir()
    (project / "speedwatch.toml").write_text(PROJECT_FILE.format(project="own-e2e", url=url))

    proc = subprocess.run(
        [sys.executable, "-m", "cli", "submit", "--wait", "--timeout", "240", "--poll", "1"],
        cwd=project, capture_output=True, text=True, timeout=300, check=False,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("SPEEDWATCH_")},
             "SPEEDWATCH_TOKEN": token, "GITHUB_SHA": "e2e-1"})

    assert proc.returncode == EXIT_PASS, proc.stderr + procs.log("worker")
    run_id = proc.stderr.split("run ", 1)[1].split(" ", 1)[0]
    run = httpx.get(f"{url}/api/v1/runs/{run_id}").json()
    cells = {c["spec"]["model"]: c for c in run["cells"]}
    assert {m: c["status"] for m, c in cells.items()} == {
        "mypkg.nets:build": "done", "file:small.pt2": "done"}
    bench_results = bench["results"]
    assert _model_segment(cells["mypkg.nets:build"]["series_key"]) == _model_segment(
        bench_results["mypkg.nets:build"]["series_key"])
    assert _model_segment(cells["file:small.pt2"]["series_key"]) == _model_segment(
        bench_results[f"file:{user_dir}/small.pt2"]["series_key"])
    model = cells["file:small.pt2"]["result"]["fingerprint"]["model"]
    assert model["source"] == str(models / "small.pt2")
