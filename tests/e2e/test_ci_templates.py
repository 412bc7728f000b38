"""The CI steps run as written: the GitHub action (action.yml) and the GitLab component
(templates/speedwatch.yml), with the inputs of the examples users copy (docs/ci), are
executed by bash against a real `speedwatch serve` and Celery worker, and leave the Markdown
summary, the JUnit report and the JSON a CI system shows.

Only the matrix is made small (`SPEEDWATCH_ARGS`, which the templates leave to the user,
is a tiny ResNet measured in one process) and the CI system's own variables are set as
GitHub and GitLab set them. A second commit shows the "before" column filled in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit import ci_steps
from tests.faults.infra import Processes

pytestmark = pytest.mark.slow

TINY_ARGS = ("--model resnet18 --width 8 --image-size 32 --weights constant,tensor "
             "--sides paired --processes 1 --max-processes 1 --rounds 3 --iters-per-round 2 "
             "--warmup 1")


def _bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = str(Path(sys.executable).parent)
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, **env, "PATH": f"{bin_dir}:{os.environ['PATH']}"})


def _check_reports(workdir: Path, summary: Path, cells: int) -> dict[str, Any]:
    text = summary.read_text()
    assert "| series | before | after [95% CI] | change [95% CI] | verdict | notes |" in text
    assert text.count("resnet18-w8-i32/onnxruntime/") >= cells
    suite = ET.parse(workdir / "speedwatch-junit.xml").getroot()
    assert suite.tag == "testsuite" and len(suite.findall("testcase")) == cells
    run: dict[str, Any] = json.loads((workdir / "speedwatch.json").read_text())
    assert run["status"] in ("done", "failed") and len(run["cells"]) == cells
    return run


def test_the_github_action_benchmarks_a_commit_and_writes_its_reports(
    procs: Processes, base_env: dict[str, str], queue: str, token: str, tmp_path: Path,
) -> None:
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": "redis://127.0.0.1:6379/0"}
    url = procs.serve()
    procs.worker("worker", queue)
    # the user's step is a few lines: uses + with
    assert len(yaml.safe_dump(ci_steps.workflow_step()).splitlines()) <= 6
    project = f"gha-{queue}"
    script, env = ci_steps.github_submit_step(
        {"SPEEDWATCH_URL": url, "SPEEDWATCH_TOKEN": token},
        {"args": TINY_ARGS, "project": project})
    env.update(GITHUB_REF_NAME="main")
    summary = tmp_path / "step-summary.md"
    outputs = tmp_path / "github-output"

    first = _bash(script, {**env, "GITHUB_SHA": "c0ffee1", "GITHUB_OUTPUT": str(outputs),
                           "GITHUB_STEP_SUMMARY": str(summary)}, tmp_path)
    assert first.returncode == 0, first.stderr  # a series' first result passes
    run = _check_reports(tmp_path, summary, cells=2)
    assert run["verdict"] == "pass" and "(first)" in summary.read_text()
    assert outputs.read_text().splitlines() == ["verdict=pass"]

    second_summary = tmp_path / "second.md"
    second = _bash(script, {**env, "GITHUB_SHA": "c0ffee2", "GITHUB_OUTPUT": str(outputs),
                            "GITHUB_STEP_SUMMARY": str(second_summary)}, tmp_path)
    # two tiny noisy runs may well disagree: whatever the verdict, the exit code says it
    assert second.returncode in (0, 1, 3), second.stderr
    run = _check_reports(tmp_path, second_summary, cells=2)
    expected = {0: "pass", 1: "regression", 3: "inconclusive"}[second.returncode]
    assert outputs.read_text().splitlines()[-1] == f"verdict={expected}"
    text = second_summary.read_text()
    assert "(first)" not in text  # every cell now has a "before"
    assert text.count("x [") >= 2
    print("\n" + text)
    env["SPEEDWATCH_PROJECT"] = project

    # the same two commits compared after the fact, as a reviewer would; the project from
    # SPEEDWATCH_PROJECT, as the step's environment gives it
    report = _bash("speedwatch report --base c0ffee1 --head c0ffee2", env, tmp_path)
    assert report.returncode in (0, 1), report.stderr
    assert "| series | base [95% CI] | head [95% CI] | change | CIs overlap |" in report.stdout
    assert report.stdout.count("resnet18-w8-i32/onnxruntime/") >= 2
    missing = _bash(f"speedwatch report --project {env['SPEEDWATCH_PROJECT']} --base nope "
                    "--head c0ffee2", env, tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("error: --base/--head: no finished run of revision "
                                      f"'nope' in project '{env['SPEEDWATCH_PROJECT']}'")


def test_the_gitlab_component_runs_as_written(
    procs: Processes, base_env: dict[str, str], queue: str, token: str, tmp_path: Path,
) -> None:
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": "redis://127.0.0.1:6379/0"}
    url = procs.serve()
    procs.worker("worker", queue)
    include = yaml.safe_load(ci_steps.GITLAB_INCLUDE.read_text())["include"]
    assert len(yaml.safe_dump(include).splitlines()) <= 6
    job = ci_steps.gitlab_job({"args": TINY_ARGS, "project": f"gitlab-{queue}"})
    assert job["script"][0].startswith("pip install")  # the light client; already here
    env = {**{k: str(v) for k, v in job["variables"].items()},
           "SPEEDWATCH_URL": url, "SPEEDWATCH_TOKEN": token, "CI_COMMIT_SHA": "d00d",
           "CI_COMMIT_REF_NAME": "main"}
    done = _bash("\n".join(job["script"][1:]), env, tmp_path)
    assert done.returncode == 0, done.stderr
    _check_reports(tmp_path, tmp_path / "speedwatch.md", cells=2)
    assert set(job["artifacts"]["paths"]) <= {p.name for p in tmp_path.iterdir()}
    assert (tmp_path / job["artifacts"]["reports"]["junit"]).exists()
