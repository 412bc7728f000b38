"""The CI steps a user's pipeline runs, read from the files users copy, rendered as GitHub and
GitLab would render them: the GitHub action's `run:` block with its inputs filled in from the
example workflow's `with:`, and the GitLab component's script with `$[[ inputs.x ]]` filled
in from the example `include:`. The tests and scripts/ci_template_demo.sh run what this
returns with bash, so the files themselves are what is tested.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
ACTION = ROOT / "action.yml"
COMPONENT = ROOT / "templates" / "speedwatch.yml"
WORKFLOW = ROOT / "docs" / "ci" / "github-actions.yml"
GITLAB_INCLUDE = ROOT / "docs" / "ci" / "gitlab-ci.yml"


def workflow_step() -> dict[str, Any]:
    """The example workflow's Speedwatch step (the lines a user writes)."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["speedwatch"]
    [step] = [s for s in job["steps"] if str(s.get("uses", "")).endswith("/speedwatch@main")]
    return dict(step)


def _github_expr(text: str, inputs: dict[str, str], secrets: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        scope, name = match.group(1), match.group(2)
        table = inputs if scope == "inputs" else secrets
        return table[name]

    return re.sub(r"\$\{\{\s*(inputs|secrets)\.([\w-]+)\s*\}\}", value, text)


def github_submit_step(secrets: dict[str, str],
                       overrides: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """The action's benchmark step: its bash script and the environment GitHub gives it."""
    action = yaml.safe_load(ACTION.read_text())
    given = {k: _github_expr(str(v), {}, secrets) for k, v in workflow_step()["with"].items()}
    given.update(overrides or {})
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    missing = [n for n, s in action["inputs"].items() if s.get("required") and n not in given]
    assert not missing, f"the example workflow leaves required inputs out: {missing}"
    inputs.update(given)
    [step] = [s for s in action["runs"]["steps"] if s.get("id") == "submit"]
    env = {k: _github_expr(str(v), inputs, secrets) for k, v in step["env"].items()}
    return step["run"], env


def gitlab_spec() -> dict[str, dict[str, Any]]:
    """The component's `spec:inputs`: each input's type, default and regex."""
    spec_doc = COMPONENT.read_text().split("\n---\n", 1)[0]
    inputs: dict[str, dict[str, Any]] = yaml.safe_load(spec_doc)["spec"]["inputs"]
    return inputs


def gitlab_refusal(name: str, value: Any) -> str | None:
    """Why GitLab refuses `value` for input `name` when it creates the pipeline (the input's
    `type`, then its `regex`), or None. GitLab matches with RE2, where `$` is the end of the
    text; Python's `$` also matches before a final newline, so it is read as `\\Z`."""
    spec = gitlab_spec()[name]
    kind = spec.get("type", "string")
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{name}: not a boolean"
    if kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"{name}: not a number"
    if not isinstance(value, str):
        return f"{name}: not a string"
    pattern = spec.get("regex")
    if pattern is not None:
        python = pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
        if re.search(python, value) is None:
            return f"{name}: does not match {pattern}"
    return None


def gitlab_render(inputs: dict[str, Any]) -> str:
    """The job document with `$[[ inputs.x ]]` replaced by each value's text, as GitLab
    interpolates: textually, before the YAML is read (no quoting of its own)."""
    job_doc = COMPONENT.read_text().split("\n---\n", 1)[1]

    def value(match: re.Match[str]) -> str:
        v = inputs[match.group(1)]
        return str(v).lower() if isinstance(v, bool) else str(v)

    return re.sub(r"\$\[\[\s*inputs\.([\w-]+)\s*\]\]", value, job_doc)


def gitlab_inputs(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The example include's inputs, with the defaults for the rest and `overrides`."""
    [include] = yaml.safe_load(GITLAB_INCLUDE.read_text())["include"]
    inputs = {name: s.get("default") for name, s in gitlab_spec().items()}
    inputs.update(include.get("inputs", {}))
    inputs.update(overrides or {})
    missing = [name for name, value in inputs.items() if value is None]
    assert not missing, f"the example include leaves inputs without defaults out: {missing}"
    return inputs


def gitlab_job(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The component's job with the example include's inputs (and the defaults) filled in;
    the inputs must pass the spec's checks, as GitLab requires."""
    inputs = gitlab_inputs(overrides)
    refused = [why for name, v in inputs.items() if (why := gitlab_refusal(name, v))]
    assert not refused, refused
    job: dict[str, Any] = yaml.safe_load(gitlab_render(inputs))["speedwatch"]
    return job
