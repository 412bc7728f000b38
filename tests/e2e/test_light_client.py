"""`pip install speedwatch` is the CI client: submit, report, policy, sweep, bisect, cancel and
detect work without torch, ONNX Runtime, Celery, SQLAlchemy or FastAPI; the service and the
measurement core come with extras, and a command that needs one says which.

Two proofs: the client commands run (against a real server) in a process where the heavy
packages cannot be imported at all, and a real `pip install` of this checkout into a fresh
virtual environment installs none of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "onnx", "onnxruntime", "celery", "sqlalchemy", "fastapi", "uvicorn",
         "alembic", "psycopg")
CLIENT_COMMANDS = ("submit", "report", "upload", "policy", "sweep", "bisect", "cancel",
                   "detect")

# Imported before anything else (sitecustomize): every heavy package is unimportable, as in
# an environment where it was never installed.
BLOCKER = f"""
import importlib.abc, sys
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
"""


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower() for r in requirements}


def _client(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=tmp_path, input=stdin, capture_output=True,
        text=True, timeout=120,
        env={**os.environ, **(env or {}), "PYTHONPATH": f"{site}{os.pathsep}{ROOT}",
             "COLUMNS": "100"})


def test_the_package_itself_depends_on_no_heavy_package_and_the_extras_bring_them() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = _names(project["dependencies"])
    assert not base & set(HEAVY), base & set(HEAVY)
    extras = project["optional-dependencies"]
    assert {"fastapi", "sqlalchemy", "celery", "alembic", "uvicorn"} <= _names(extras["server"])
    assert {"torch", "onnx", "onnxruntime"} <= _names(extras["bench"])
    assert _names(extras["worker"]) == _names(extras["all"]) == {"speedwatch"}


def test_every_client_command_answers_help_with_the_heavy_packages_absent(
    tmp_path: Path,
) -> None:
    for command in CLIENT_COMMANDS:
        done = _client(tmp_path, command, "--help")
        assert done.returncode == 0, (command, done.stderr)
        assert "Usage:" in done.stdout


def test_a_command_that_needs_an_extra_names_the_install_in_one_line(tmp_path: Path) -> None:
    cases = {"serve": "server", "migrate": "server", "worker": "all", "beat": "server",
             "demo": "all", "bench": "bench"}
    for command, extra in cases.items():
        done = _client(tmp_path, command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"error: `speedwatch {command}` needs ")
        assert line.endswith(f"which this install lacks: pip install 'speedwatch[{extra}]'")
    done = _client(tmp_path, "token", "list")
    assert done.returncode == 2
    assert done.stderr.strip().endswith("pip install 'speedwatch[server]'")


def test_the_client_submits_and_reports_against_a_real_server_reading_its_environment(
    tmp_path: Path, api_url: str, ci_token: str,
) -> None:
    env = {"SPEEDWATCH_URL": api_url, "SPEEDWATCH_TOKEN": ci_token,
           "SPEEDWATCH_PROJECT": "light-client"}
    done = _client(tmp_path, "submit", "--revision", "abc1234", "--model", "resnet18",
                   "--backend", "onnxruntime", env=env)
    assert done.returncode == 0, done.stderr
    assert "(created)" in done.stderr
    run_id = int(done.stderr.split("run ")[1].split(" ")[0])
    run = httpx.get(f"{api_url}/api/v1/runs/{run_id}",
                    headers={"Authorization": f"Bearer {ci_token}"}).json()
    assert run["project"] == "light-client" and run["revision"] == "abc1234"
    # the project from SPEEDWATCH_PROJECT: no --project anywhere
    report = _client(tmp_path, "report", "--base", "nope", "--head", "abc1234", env=env)
    assert report.returncode == 2
    assert report.stderr.strip() == ("error: --base/--head: no finished run of revision "
                                     "'nope' in project 'light-client'")
    series = {"series": [{"id": "s", "values": [1.0] * 12 + [0.8] * 12,
                          "higher_is_better": True}]}
    detect = _client(tmp_path, "detect", "--input", "-", stdin=json.dumps(series))
    assert detect.returncode == 0, detect.stderr
    [found] = json.loads(detect.stdout)["series"][0]["change_points"]
    assert found["index"] == 12 and found["direction"] == "regression"


@pytest.mark.slow
def test_pip_resolves_the_package_without_extras_to_the_client_alone(tmp_path: Path) -> None:
    """What a real `pip install .` of this checkout would install into a fresh virtual
    environment, from pip's own resolution (`--dry-run --report`: the same resolver,
    without unpacking the wheels; a full install took 43 s here, this 6 s)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    report = tmp_path / "report.json"
    resolved = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--dry-run",
         "--ignore-installed", "--report", str(report), str(ROOT)],
        capture_output=True, text=True, timeout=600)
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    names = {item["metadata"]["name"].lower().replace("_", "-")
             for item in json.loads(report.read_text())["install"]}
    print("\n" + ", ".join(sorted(names)))
    assert "speedwatch" in names and {"typer", "httpx", "pydantic"} <= names
    assert not names & set(HEAVY), names & set(HEAVY)
