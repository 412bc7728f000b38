"""What a newcomer meets first: an unmigrated database, a mistyped setting, a refused
request, the API docs without internet. Each answer is one line in the user's words that
says what to do, never a traceback, a 500 or a blank page.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from playwright.sync_api import sync_playwright

from app.config import Settings
from app.main import create_app
from cli.client import flag_for
from cli.submit import SUBMIT_FLAGS
from devkit.browser import launch
from devkit.ports import free_port


def speedwatch(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout)


@pytest.fixture
def unmigrated(tmp_path: Path) -> dict[str, str]:
    """A SQLite file nobody ran `speedwatch migrate` on."""
    return {"SPEEDWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.db'}",
            "SPEEDWATCH_ENVIRONMENT": "development", "SPEEDWATCH_EXECUTOR": "none"}


# ---- an unmigrated database ---------------------------------------------------------------

def test_token_create_on_an_unmigrated_database_says_run_migrate(
        unmigrated: dict[str, str]) -> None:
    done = speedwatch("token", "create", "--scope", "ci", env=unmigrated)
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: the database schema is missing or older than this server: "
                           "run `speedwatch migrate`")


def test_serve_refuses_an_unmigrated_database_in_one_line(unmigrated: dict[str, str]) -> None:
    done = speedwatch("serve", "--no-migrate", "--port", str(free_port()), env=unmigrated)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: the database was never migrated, this server needs revision "
        f"{_head()}: run `speedwatch migrate` (or start with `speedwatch serve --migrate`)")


def _head() -> str:
    from app.db import head_revision

    head = head_revision()
    assert head is not None
    return head


def test_healthz_pages_and_api_on_an_unmigrated_database_are_503_naming_migrate(
        tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'fresh.db'}", executor="none",
                        public_reads=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        health = client.get("/healthz")
        api = client.get("/api/v1/runs")
        page = client.get("/runs")
    assert health.status_code == 503
    assert health.json()["database"] == (
        f"the database was never migrated, this server needs revision {_head()}: "
        "run `speedwatch migrate`")
    assert api.status_code == 503 and "run `speedwatch migrate`" in api.json()["detail"]
    assert page.status_code == 503 and "run `speedwatch migrate`" in page.text


# ---- settings ------------------------------------------------------------------------------

BAD_SETTINGS = [
    ("SPEEDWATCH_PORT", "abc", "error: settings: SPEEDWATCH_PORT='abc': Input should be a "
                               "valid integer"),
    ("SPEEDWATCH_GPU_QUEUES", "{bad", "error: settings: SPEEDWATCH_GPU_QUEUES is not valid "
                                      "JSON"),
    ("SPEEDWATCH_EXECUTOR", "celeri", "error: settings: SPEEDWATCH_EXECUTOR='celeri': Input "
                                      "should be 'local', 'celery' or 'none'"),
]
COMMANDS = [["token", "list"], ["worker"], ["migrate"], ["demo", "--exit-when-done"]]


@pytest.mark.parametrize(("variable", "value", "says", "command"), [
    (*bad, command) for bad in BAD_SETTINGS for command in COMMANDS
    # demo sets its own executor (the embedded one), so a bad one is not read there
    if not (command[0] == "demo" and bad[0] == "SPEEDWATCH_EXECUTOR")])
def test_a_bad_setting_is_one_line_naming_the_variable_whatever_the_command(
        tmp_path: Path, variable: str, value: str, says: str, command: list[str]) -> None:
    done = speedwatch(*command, env={variable: value}, cwd=tmp_path)
    assert done.returncode in (1, 2)
    [line] = [ln for ln in done.stderr.strip().splitlines() if not ln.startswith("demo:")]
    assert line.startswith(says), done.stderr


def test_a_bad_secret_setting_is_named_without_echoing_its_value(tmp_path: Path) -> None:
    done = speedwatch("token", "list", env={"SPEEDWATCH_METRICS_TOKEN": "hunter2"},
                      cwd=tmp_path)
    assert done.returncode in (1, 2)
    assert done.stderr.strip() == (
        "error: settings: SPEEDWATCH_METRICS_TOKEN: must be at least 16 characters (a "
        "guessable scrape token would open the run counts to anyone)"), done.stderr
    assert "hunter2" not in done.stderr + done.stdout


def test_help_lists_every_setting_and_the_readme_documents_each() -> None:
    done = speedwatch("--help", env={"COLUMNS": "400"})
    # The user docs: the README and the page with the full settings table it links to.
    root = Path(__file__).resolve().parents[2]
    docs = "\n".join((root / page).read_text()
                     for page in ("README.md", "docs/configuration.md"))
    for name in Settings.model_fields:
        variable = f"SPEEDWATCH_{name.upper()}"
        assert variable in done.stdout, variable
        assert f"`{variable}`" in docs, (
            f"{variable} is not in README.md or docs/configuration.md")


def test_model_help_lists_the_models_and_the_forms_of_your_own() -> None:
    from benchmarks.spec import MODELS

    done = speedwatch("submit", "--help", env={"COLUMNS": "400"})
    text = " ".join(done.stdout.split())
    assert all(model in text for model in MODELS), text
    assert "package.module:factory" in text


# ---- refused requests, in flags ------------------------------------------------------------

def test_request_fields_are_named_by_the_flags_that_set_them() -> None:
    assert flag_for("matrix.batch_sizes[1]", SUBMIT_FLAGS) == "--batch (value 2)"
    assert flag_for("matrix.timing.rounds", SUBMIT_FLAGS) == "--rounds"
    assert flag_for("environment.pins[0]", SUBMIT_FLAGS) == "--pin (value 1)"
    assert flag_for("result.spec", SUBMIT_FLAGS) == "result.spec"  # no flag: the field


@pytest.fixture
def server(settings: Settings) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                            log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.mark.usefixtures("clean_db")
@pytest.mark.parametrize(("flags", "says"), [
    (["--batch", "1,0"], "error: --batch (value 2): Input should be greater than or equal to 1"),
    (["--model", "resnet999"], "error: --model (value 1): 'resnet999' is not one of resnet18"),
    (["--pin", "onnxruntime>=1"], "error: --pin: pin 'onnxruntime>=1': only exact"),
])
def test_submit_says_a_refusal_once_in_flags(server: str, ci_token: str, flags: list[str],
                                             says: str) -> None:
    done = speedwatch("submit", "--url", server, "--token", ci_token, "--project", "p",
                      "--revision", "r", *flags)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(says), line
    message = line.split(": ", 2)[-1]
    assert line.count(message) == 1  # not "X; X"


def test_a_zero_count_is_refused_by_the_flag_before_any_request() -> None:
    done = speedwatch("submit", "--url", "http://127.0.0.1:9", "--token", "x", "--project",
                      "p", "--revision", "r", "--rounds", "0")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line == "error: --rounds: 0 must be >= 1", line


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--warmup", "-1", "--warmup: -1 must be >= 0"),
    ("--budget", "-5", "--budget: -5.0 must be >= 0"),
    ("--max-seconds", "0", "--max-seconds: 0.0 must be > 0"),
    ("--processes", "17", "--processes: 17 must be <= 16"),
    ("--target-half-width", "0.5", "--target-half-width: 0.5 must be < 0.5"),
])
@pytest.mark.parametrize("command", [["submit", "--url", "http://127.0.0.1:9", "--token", "x",
                                      "--project", "p", "--revision", "r"], ["bench"]])
def test_every_timing_flag_is_held_to_its_fields_bounds_in_one_line(
        command: list[str], flag: str, value: str, says: str) -> None:
    """The bounds are the API's (benchmarks.timing_policy.TimingPolicy declares them once)."""
    done = speedwatch(*command, flag, value)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == f"error: {says}", line


@pytest.mark.parametrize("command", [["submit", "--url", "http://127.0.0.1:9", "--token", "x",
                                      "--project", "p", "--revision", "r"],
                                     ["demo", "--exit-when-done"], ["bench"]])
def test_an_unknown_compile_cache_is_one_line_before_anything_runs(command: list[str]) -> None:
    done = speedwatch(*command, "--compile-cache", "warm")
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: --compile-cache: "), line
    assert "'warm'" in line and "process" in line and "host" in line, line


@pytest.mark.parametrize("command", [["submit", "--url", "http://127.0.0.1:9", "--token", "x",
                                      "--project", "p", "--revision", "r"],
                                     ["demo", "--exit-when-done"], ["bench"]])
@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--builds", "fast", "'fast' is not one of pinned, as-shipped"),
    ("--max-host-load", "0", "0.0 must be > 0"),
])
def test_a_bad_build_mode_or_load_threshold_is_one_line_naming_the_flag(
        command: list[str], flag: str, value: str, says: str) -> None:
    done = speedwatch(*command, flag, value)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == f"error: {flag}: {says}", line


def test_submit_measures_the_cpu_with_one_thread_by_default_as_demo_does() -> None:
    from typer.testing import CliRunner

    from cli import submit as submit_module
    from cli.main import cli

    sent: dict[str, object] = {}

    def trigger(self: object, body: dict[str, object], key: str | None) -> dict[str, object]:
        sent.update(body)
        return {"id": 1, "progress": {"total": 1}}

    original = submit_module.Api.trigger
    submit_module.Api.trigger = trigger  # type: ignore[assignment,method-assign]
    try:
        CliRunner().invoke(cli, ["submit", "--url", "http://x", "--token", "t", "--project",
                                 "p", "--revision", "r"])
    finally:
        submit_module.Api.trigger = original  # type: ignore[method-assign]
    assert sent["matrix"]["threads"] == 1  # type: ignore[index]


# ---- /docs offline --------------------------------------------------------------------------

@pytest.mark.slow
def test_api_docs_render_in_a_browser_with_no_network_beyond_the_server(
        tmp_path: Path) -> None:
    """Chromium with every request outside the server aborted: Swagger UI still draws the
    operations (FastAPI's default page loads its script from a CDN and stays blank)."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'docs.db'}", executor="none")
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    outside: list[str] = []
    try:
        deadline = time.monotonic() + 20
        while not srv.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{base}/redoc", follow_redirects=False).headers["location"] == "/docs"
        with sync_playwright() as playwright:
            context = launch(playwright, tmp_path / "profile")
            try:
                def route(r: object) -> None:
                    request = r.request  # type: ignore[attr-defined]
                    if request.url.startswith(base):
                        r.continue_()  # type: ignore[attr-defined]
                    else:
                        outside.append(request.url)
                        r.abort()  # type: ignore[attr-defined]

                context.route("**/*", route)
                page = context.new_page()
                page.goto(f"{base}/docs")
                page.wait_for_selector(".opblock-summary-path", timeout=20_000)
                paths = page.eval_on_selector_all(
                    ".opblock-summary-path", "nodes => nodes.map(n => n.textContent)")
            finally:
                context.close()
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
    assert "/api/v1/runs" in " ".join(paths)
    assert outside == []
