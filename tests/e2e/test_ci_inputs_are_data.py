"""Every input of both CI templates reaches the shell as data, never as code.

The GitLab component (templates/speedwatch.yml) is rendered as GitLab renders it, the
input's text pasted where `$[[ inputs.x ]]` stands before the YAML is read; a value the
spec's `type` or `regex` refuses, or that leaves YAML GitLab cannot read, stops the
pipeline there (nothing runs). Whatever passes, the job's whole script runs in a real bash.
The GitHub action's benchmark step (action.yml) runs in bash with its inputs in the
environment, as the runner gives them. `speedwatch` and `pip` are stand-ins on PATH that
record the words they were given: a hostile value must create nothing and arrive as the
very text it was, and `*` must stay `*` beside files it could match.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit import ci_steps

# Shell syntax of every kind, quotes to break out of the quoting, a line break to start a
# new command or YAML key, and a glob; {canary} is a directory that must stay empty.
HOSTILE = [
    "$(touch {canary}/dollar-paren)",
    "`touch {canary}/backtick`",
    "x; touch {canary}/semicolon",
    "x && touch {canary}/and",
    "x | tee {canary}/pipe",
    "x > {canary}/redirect",
    'x"; touch {canary}/double-quote; echo "',
    "x'; touch {canary}/single-quote; echo '",
    "x\\'; touch {canary}/escaped-quote; echo \\'",
    "x\ntouch {canary}/newline",
    "x\r\ntouch {canary}/crlf",
    "x\n  script: [touch {canary}/yaml-key]",
    "x'\n  script: [touch {canary}/yaml-quote-key]\n  y: '",
    "* {canary}/*",
    "$HOME ${{PATH}} $((6*7)) ~ {{a,b}}",
    "$[[ inputs.project ]]",
]

RECORDER = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["RECORD_TO"], "a") as out:
    out.write(json.dumps({"tool": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                          "env": {k: v for k, v in os.environ.items()
                                  if k.startswith("SPEEDWATCH_")}}) + "\\n")
"""


@pytest.fixture
def stage(tmp_path: Path) -> dict[str, Path]:
    """A working directory with files a glob would match, a canary directory, and
    stand-ins for `speedwatch` and `pip` that record their arguments."""
    bin_dir, work, canary = tmp_path / "bin", tmp_path / "work", tmp_path / "canary"
    for folder in (bin_dir, work, canary):
        folder.mkdir()
    for name in ("speedwatch", "pip"):
        tool = bin_dir / name
        tool.write_text(RECORDER)
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (work / "checked-out-file").write_text("")
    return {"bin": bin_dir, "work": work, "canary": canary,
            "record": tmp_path / "calls.jsonl"}


def _bash(script: str, env: dict[str, str], stage: dict[str, Path]) -> list[dict[str, Any]]:
    stage["record"].unlink(missing_ok=True)
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=stage["work"], capture_output=True, text=True,
        timeout=60, env={"PATH": f"{stage['bin']}:{os.environ['PATH']}", "HOME": "/nonexistent",
                         "RECORD_TO": str(stage["record"]), **env})
    assert done.returncode == 0, done.stderr
    text = stage["record"].read_text() if stage["record"].exists() else ""
    return [json.loads(line) for line in text.splitlines()]


def _words(value: str) -> list[str]:
    """The words bash makes of an unquoted variable (split on IFS: space, tab, newline)."""
    return [w for w in re.split(r"[ \t\n]+", value) if w]


def _made(stage: dict[str, Path]) -> list[str]:
    return sorted(p.name for p in stage["canary"].iterdir())


def _hostile(stage: dict[str, Path]) -> list[str]:
    return [v.format(canary=stage["canary"]) for v in HOSTILE]


# ---- GitLab -------------------------------------------------------------------------------

GITLAB_ENV = {"CI_COMMIT_SHA": "d00d", "CI_COMMIT_REF_NAME": "main",
              "SPEEDWATCH_URL": "http://127.0.0.1:9", "SPEEDWATCH_TOKEN": "sw_x"}


def test_no_input_is_pasted_into_the_components_script() -> None:
    """The class, read off the file: inputs are pasted into variables only (quoted YAML,
    under a regex that keeps quotes and line breaks out) or typed; the script reads
    variables, always quoted except the words of `args`."""
    job = yaml.safe_load(ci_steps.COMPONENT.read_text().split("\n---\n", 1)[1])["speedwatch"]
    assert not any("$[[" in line for line in job["script"])
    for name, spec in ci_steps.gitlab_spec().items():
        assert spec.get("type") == "boolean" or "regex" in spec, name
        if spec.get("type") != "boolean":
            assert ci_steps.gitlab_refusal(name, "a\nb") is not None, name
            assert ci_steps.gitlab_refusal(name, "a'b") is not None, name


def _gitlab_outcome(name: str, value: str, stage: dict[str, Path]) -> tuple[str, Any]:
    """("refused", why) when GitLab stops the pipeline, else ("ran", (job, calls))."""
    why = ci_steps.gitlab_refusal(name, value)
    if why is not None:
        return "refused", why
    try:
        job = yaml.safe_load(ci_steps.gitlab_render(ci_steps.gitlab_inputs({name: value})))
    except yaml.YAMLError as exc:
        return "refused", f"YAML: {exc}"
    job = job["speedwatch"]
    env = {**GITLAB_ENV, **{k: str(v) for k, v in job["variables"].items()}}
    return "ran", (job, _bash("\n".join(job["script"]), env, stage))


@pytest.mark.parametrize("name", sorted(ci_steps.gitlab_spec()))
def test_hostile_values_of_every_gitlab_input_create_nothing(
    name: str, stage: dict[str, Path],
) -> None:
    ran = 0
    for value in _hostile(stage):
        outcome, detail = _gitlab_outcome(name, value, stage)
        assert _made(stage) == [], (name, value, outcome)
        if outcome == "refused":
            continue
        ran += 1
        job, calls = detail
        [pip, submit] = calls
        assert pip["argv"][:3] == ["install", "--quiet", "--"]
        if name == "install":
            assert pip["argv"][3:] == [value]
        if name == "args":  # words, never a command, never expanded
            assert submit["argv"][8:-6] == _words(value), submit["argv"]
        if name == "timeout":
            assert submit["argv"][submit["argv"].index("--timeout") + 1] == value
        if name == "project":
            assert submit["env"]["SPEEDWATCH_PROJECT"] == value
        if name in ("stage", "image"):
            assert job[name] == value  # GitLab's own fields, no shell
    if name == "args":
        assert ran >= 8  # shell syntax is accepted in args: it is only ever words
    if name == "allow-inconclusive":
        assert ran == 0  # a boolean: GitLab refuses any text


def test_the_gitlab_job_runs_with_the_examples_inputs_and_globs_nothing(
    stage: dict[str, Path],
) -> None:
    job = ci_steps.gitlab_job({"args": "--model resnet50 --option x=* --pin onnxruntime==1.22"})
    env = {**GITLAB_ENV, **{k: str(v) for k, v in job["variables"].items()}}
    [pip, submit] = _bash("\n".join(job["script"]), env, stage)
    assert pip["argv"] == ["install", "--quiet", "--",
                           "speedwatch @ git+https://gitlab.com/your-org/speedwatch"]
    assert submit["argv"] == [
        "submit", "--wait", "--timeout", "5400", "--revision", "d00d", "--branch", "main",
        "--model", "resnet50", "--option", "x=*", "--pin", "onnxruntime==1.22",
        "--summary", "speedwatch.md", "--junit", "speedwatch-junit.xml",
        "--json", "speedwatch.json"]
    assert submit["env"]["SPEEDWATCH_PROJECT"] == "my-project"


# ---- GitHub -------------------------------------------------------------------------------

def test_no_input_is_pasted_into_the_actions_scripts() -> None:
    action = yaml.safe_load(ci_steps.ACTION.read_text())
    for step in action["runs"]["steps"]:
        assert "${{" not in str(step.get("run", "")), step.get("name")


GITHUB_INPUTS = ["url", "token", "project", "args", "timeout", "allow-inconclusive"]


@pytest.mark.parametrize("name", GITHUB_INPUTS)
def test_hostile_values_of_every_github_input_create_nothing(
    name: str, stage: dict[str, Path], tmp_path: Path,
) -> None:
    action_inputs = set(yaml.safe_load(ci_steps.ACTION.read_text())["inputs"])
    assert action_inputs == {*GITHUB_INPUTS, "python-version"}  # python-version: setup-python's
    for value in _hostile(stage):
        script, env = ci_steps.github_submit_step(
            {"SPEEDWATCH_URL": "http://127.0.0.1:9", "SPEEDWATCH_TOKEN": "sw_x"}, {name: value})
        env.update(GITHUB_SHA="c0ffee", GITHUB_REF_NAME="main",
                   GITHUB_OUTPUT=str(tmp_path / "out"), GITHUB_STEP_SUMMARY=str(tmp_path / "s"))
        [submit] = _bash(script, env, stage)
        assert _made(stage) == [], (name, value)
        argv, seen = submit["argv"], submit["env"]
        if name == "args":
            assert argv[8:-6] == _words(value), argv
        if name == "timeout":
            assert argv[argv.index("--timeout") + 1] == value
        if name in ("url", "token", "project"):
            assert seen[f"SPEEDWATCH_{name.upper()}"] == value


def test_the_action_passes_args_as_words_without_globbing(
    stage: dict[str, Path], tmp_path: Path,
) -> None:
    script, env = ci_steps.github_submit_step(
        {"SPEEDWATCH_URL": "http://127.0.0.1:9", "SPEEDWATCH_TOKEN": "sw_x"},
        {"args": "--model resnet50 --option x=* *"})
    env.update(GITHUB_SHA="c0ffee", GITHUB_REF_NAME="main",
               GITHUB_OUTPUT=str(tmp_path / "out"), GITHUB_STEP_SUMMARY=str(tmp_path / "s"))
    [submit] = _bash(script, env, stage)
    assert submit["argv"][8:-6] == ["--model", "resnet50", "--option", "x=*", "*"]
    assert "checked-out-file" not in submit["argv"]
