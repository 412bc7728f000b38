"""The project file: `speedwatch submit` reads speedwatch.toml (or [tool.speedwatch] in
pyproject.toml) so that a CI step is `speedwatch submit --wait`, flags override it, and a
file that cannot be used is one line naming the file and the key.

`submit` runs as a process in a directory of its own (outside the repository) against a
real API on a socket that records runs without measuring them (executor "none").
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli import project_file
from cli.client import EXIT_ERROR, EXIT_PASS, EXIT_REGRESSION
from cli.project_file import ProjectFileError

FILE = """
project = "{project}"
url = "{url}"
pins = ["onnxruntime==1.22.0"]

[matrix]
models = ["resnet18"]
backends = ["eager", "onnxruntime"]
weights = "constant"
batch_sizes = [1, 2]
image_size = 32
width = 8

[timing]
processes = 2
budget_seconds = 5
compile_cache = "host"

[thresholds]
threshold = 0.05
"""


def _write(directory: Path, text: str, name: str = "speedwatch.toml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# ---- finding and reading the file ---------------------------------------------------------

def test_the_file_is_found_here_or_in_a_parent_up_to_the_repository_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    _write(repo, 'project = "a"\n')
    deep = repo / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert project_file.load().contents.project == "a"
    # a pyproject.toml below it without our table is not ours; one with it is found first
    _write(deep, '[project]\nname = "x"\n', "pyproject.toml")
    assert project_file.find() == repo / "speedwatch.toml"
    _write(deep, '[tool.speedwatch]\nproject = "b"\n', "pyproject.toml")
    assert project_file.load().contents.project == "b"
    # nothing is looked for above the repository's root
    _write(tmp_path, 'project = "outside"\n')
    (repo / "speedwatch.toml").unlink()
    (deep / "pyproject.toml").unlink()
    assert project_file.find() is None
    assert project_file.load().path is None


@pytest.mark.parametrize(("text", "says"), [
    ("[matrix]\nmodells = ['resnet18']\n",
     "speedwatch.toml: matrix.modells: unknown key (known: models, backends, weights"),
    ("colour = 'red'\n", "speedwatch.toml: colour: unknown key (known: project, url, pins"),
    ("[matrix]\nbatch_sizes = [1, 'eight']\n", "speedwatch.toml: matrix.batch_sizes[1]: "),
    ("[matrix]\nsides = 'both'\n", "speedwatch.toml: matrix.sides: Input should be 'paired' "
     "or 'split'"),
    ("[timing]\nprocesses = 1.5\n", "speedwatch.toml: timing.processes: "),
    ("token = 'sw_secret'\n", "speedwatch.toml: token: a token does not belong in a file of "
     "the repository; set SPEEDWATCH_TOKEN (a CI secret)"),
    ("project = \n", "speedwatch.toml: not valid TOML: "),
])
def test_a_file_that_cannot_be_used_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, text: str, says: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ProjectFileError) as caught:
        project_file.load(path)
    message = str(caught.value)
    assert message.startswith(str(tmp_path) + "/"), message
    assert says in message, message
    assert "\n" not in message


def test_a_pyproject_names_its_keys_under_tool_speedwatch(tmp_path: Path) -> None:
    path = _write(tmp_path, "[tool.speedwatch]\nprojet = 'a'\n", "pyproject.toml")
    with pytest.raises(ProjectFileError, match=r"pyproject.toml: tool.speedwatch.projet: "
                                               r"unknown key"):
        project_file.load(path)
    with pytest.raises(ProjectFileError, match=r"has no \[tool\.speedwatch\] table"):
        project_file.load(_write(tmp_path, "[tool.black]\n", "pyproject.toml"))


def test_flags_win_over_the_file_and_numbers_may_be_written_as_integers(tmp_path: Path) -> None:
    pf = project_file.load(_write(tmp_path, FILE.format(project="p", url="http://f")))
    assert pf.pick("url", "http://flag") == "http://flag"
    assert pf.pick("url", None) == "http://f"
    assert pf.pick("matrix.batch_sizes", None) == ["1", "2"]  # as --batch gives them
    assert pf.pick("matrix.batch_sizes", ["4"]) == ["4"]
    assert pf.pick("matrix.weights", None) == ["constant"]  # a string is a list of one
    assert pf.pick("timing.budget_seconds", None) == 5.0
    assert pf.environment(None, None) == (["onnxruntime==1.22.0"], None)
    assert pf.environment(None, "trt-10") == (None, "trt-10")  # never a mix of the two


def test_the_revision_comes_from_the_ci_variable_or_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (*project_file.CI_REVISION_VARIABLES, *project_file.CI_BRANCH_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ProjectFileError, match="--revision: not given, and neither a CI "
                                               "variable \\(GITHUB_SHA, CI_COMMIT_SHA"):
        project_file.revision(None, tmp_path)
    git = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "HOME": str(tmp_path)}
    for args in (["init", "-q", "-b", "feature"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, env={**os.environ, **git})
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    assert project_file.revision(None, tmp_path) == head
    assert project_file.branch(None, tmp_path) == "feature"
    monkeypatch.setenv("GITHUB_SHA", "c0ffee")
    monkeypatch.setenv("GITHUB_HEAD_REF", "pr-branch")
    assert project_file.revision(None, tmp_path) == "c0ffee"
    assert project_file.branch(None, tmp_path) == "pr-branch"
    assert project_file.revision("given", tmp_path) == "given"


# ---- submit with a project file, as a process ---------------------------------------------

def _submit(cwd: Path, token: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SPEEDWATCH_URL", *project_file.CI_REVISION_VARIABLES)}
    return subprocess.run([sys.executable, "-m", "cli", "submit", *args], cwd=cwd,
                          env={**clean, "SPEEDWATCH_TOKEN": token, "GITHUB_SHA": "rev-1",
                               **env},
                          capture_output=True, text=True, timeout=60, check=False)


def _run(url: str, token: str, stderr: str) -> dict[str, Any]:
    run_id = stderr.split("run ", 1)[1].split(" ", 1)[0]
    response = httpx.get(f"{url}/api/v1/runs/{run_id}",
                         headers={"Authorization": f"Bearer {token}"})
    return dict(response.json())


def test_submit_with_only_a_project_file_and_a_token_triggers_what_the_file_says(
    tmp_path: Path, api_url: str, ci_token: str
) -> None:
    project = f"pf-{secrets.token_hex(3)}"
    _write(tmp_path, FILE.format(project=project, url=api_url))

    proc = _submit(tmp_path, ci_token)

    assert proc.returncode == EXIT_PASS, proc.stderr
    run = _run(api_url, ci_token, proc.stderr)
    assert (run["project"], run["revision"]) == (project, "rev-1")
    assert run["environment"]["pins"] == ["onnxruntime==1.22.0"]
    specs = [c["spec"] for c in run["cells"]]
    assert sorted((s["backend"], s["batch_size"]) for s in specs) == [
        ("eager", 1), ("eager", 2), ("onnxruntime", 1), ("onnxruntime", 2)]
    assert {(s["image_size"], s["width"], s["processes"], s["budget_seconds"], s["threads"],
             s["compile_cache"]) for s in specs} == {(32, 8, 2, 5.0, 1, "host")}


def test_flags_override_the_project_file(tmp_path: Path, api_url: str, ci_token: str) -> None:
    _write(tmp_path, FILE.format(project="from-file", url="http://127.0.0.1:9"))
    project = f"pf-{secrets.token_hex(3)}"

    proc = _submit(tmp_path, ci_token, "--url", api_url, "--project", project,
                   "--revision", "flagged", "--backend", "onnxruntime", "--batch", "4",
                   "--processes", "3")

    assert proc.returncode == EXIT_PASS, proc.stderr
    run = _run(api_url, ci_token, proc.stderr)
    assert (run["project"], run["revision"]) == (project, "flagged")
    assert [(c["spec"]["backend"], c["spec"]["batch_size"], c["spec"]["processes"],
             c["spec"]["width"]) for c in run["cells"]] == [("onnxruntime", 4, 3, 8)]


def test_without_a_file_a_missing_project_or_url_is_one_line_naming_every_way_to_give_it(
    tmp_path: Path, ci_token: str
) -> None:
    proc = _submit(tmp_path, ci_token, "--url", "http://127.0.0.1:9")
    assert proc.returncode == EXIT_ERROR
    assert proc.stderr == ("error: --project: not given (pass --project, or put `project` in "
                           "speedwatch.toml)\n")
    proc = _submit(tmp_path, ci_token, "--project", "p")
    assert proc.stderr == ("error: --url: not given (pass --url, or set SPEEDWATCH_URL, or "
                           "put `url` in speedwatch.toml)\n")


def test_a_broken_project_file_stops_submit_with_one_line(
    tmp_path: Path, ci_token: str
) -> None:
    _write(tmp_path, "[matrix]\nbackend = ['onnxruntime']\n")
    proc = _submit(tmp_path, ci_token)
    assert proc.returncode == EXIT_ERROR
    assert proc.stderr.startswith(f"error: {tmp_path}/speedwatch.toml: matrix.backend: "
                                  "unknown key (known: models, backends,"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_thresholds_in_the_file_are_applied_by_an_admin_and_submit_warns_until_they_are(
    tmp_path: Path, api_url: str, ci_token: str, admin_token: str
) -> None:
    project = f"pf-{secrets.token_hex(3)}"
    _write(tmp_path, FILE.format(project=project, url=api_url))
    first = _submit(tmp_path, ci_token, "--revision", "r1")
    assert first.returncode == EXIT_PASS and "warning" not in first.stderr  # no project yet

    second = _submit(tmp_path, ci_token, "--revision", "r2")
    assert second.returncode == EXIT_PASS
    assert ("warning: speedwatch.toml: threshold 0.03 on the server, 0.05 in the file: an "
            "admin applies the file's with `speedwatch policy set` (a CI token cannot change "
            "the policy)") in second.stderr

    applied = subprocess.run([sys.executable, "-m", "cli", "policy", "set"], cwd=tmp_path,
                             env={**os.environ, "SPEEDWATCH_TOKEN": admin_token},
                             capture_output=True, text=True, timeout=60, check=False)
    assert applied.returncode == 0, applied.stderr
    assert '"threshold": 0.05' in applied.stdout

    third = _submit(tmp_path, ci_token, "--revision", "r3")
    assert third.returncode == EXIT_PASS and "warning" not in third.stderr, third.stderr


def test_report_reads_the_same_project_file_so_a_ci_step_needs_only_the_revisions(
    tmp_path: Path, api_url: str, ci_token: str
) -> None:
    project = f"pf-{secrets.token_hex(3)}"
    _write(tmp_path, FILE.format(project=project, url=api_url))
    clean = {k: v for k, v in os.environ.items() if k != "SPEEDWATCH_URL"}

    def report(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", "report", "--base", "old",
                               "--head", "new", *args], cwd=cwd,
                              env={**clean, "SPEEDWATCH_TOKEN": ci_token},
                              capture_output=True, text=True, timeout=60, check=False)

    # the file's server was asked about the file's project (which has no such runs)
    proc = report(tmp_path)
    assert proc.returncode == EXIT_ERROR
    assert proc.stderr == (f"error: --base/--head: no finished run of revision 'old' in "
                           f"project '{project}'\n")
    # a flag overrides the file
    proc = report(tmp_path, "--project", "flagged")
    assert "in project 'flagged'" in proc.stderr
    # no file, no flag: one line naming every way to give it
    bare = tmp_path / "bare"
    (bare / ".git").mkdir(parents=True)  # a repository of its own: nothing looked for above
    proc = report(bare, "--url", api_url)
    assert proc.returncode == EXIT_ERROR
    assert proc.stderr == ("error: --project: not given (pass --project, or put `project` in "
                           "speedwatch.toml)\n")


def test_report_judges_the_revision_submit_measured_when_head_is_not_given(
    tmp_path: Path, api_url: str, ci_token: str
) -> None:
    """In CI the step after `submit --wait` is `report --base main-sha`: the head is the
    CI's commit variable, as submit's revision is."""
    from devkit.factories import bearer, bench_result, ingest_body

    project = f"pf-{secrets.token_hex(3)}"
    _write(tmp_path, FILE.format(project=project, url=api_url))
    for revision, speedup in (("base-sha", 2.0), ("cafe0123", 1.5)):
        posted = httpx.post(f"{api_url}/api/v1/results", headers=bearer(ci_token),
                            json=ingest_body(bench_result(speedup=speedup), project=project,
                                             revision=revision))
        assert posted.status_code == 201, posted.text
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SPEEDWATCH_URL", *project_file.CI_REVISION_VARIABLES)}
    proc = subprocess.run([sys.executable, "-m", "cli", "report", "--base", "base-sha"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
                          env={**clean, "SPEEDWATCH_TOKEN": ci_token, "GITHUB_SHA": "cafe0123"})
    assert proc.returncode == EXIT_REGRESSION, proc.stderr  # 2.0x -> 1.5x: disjoint CIs
    assert "cafe0123" in proc.stdout and "base-sha" in proc.stdout


@pytest.mark.parametrize(("line", "says"), [
    ('builds = "fast"', "timing.builds: Input should be 'pinned' or 'as-shipped'"),
    ("max_host_load = -1", "timing.max_host_load: Input should be greater than 0"),
])
def test_a_bad_build_mode_or_load_threshold_in_the_file_names_the_files_key(
        tmp_path: Path, line: str, says: str) -> None:
    (tmp_path / "speedwatch.toml").write_text(f"[timing]\n{line}\n")
    done = subprocess.run([sys.executable, "-m", "cli", "submit", "--url", "http://127.0.0.1:9",
                           "--token", "x", "--project", "p", "--revision", "r"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    [message] = done.stderr.strip().splitlines()
    assert message == f"error: {tmp_path / 'speedwatch.toml'}: {says}"
