"""`speedwatch submit` (the CI client) and `speedwatch demo` (the embedded default, one command).

`submit` talks to a server over HTTP only (cli.client), so CI needs nothing but this
package and a token. Exit codes are the contract with CI: 0 pass, 1 regression, 2 error (a
failed cell, a refused request, a server that cannot be reached, a timeout), 3 inconclusive
(a comparison the cells could not decide within their timing budget: re-run or measure
longer), always with a one-line reason on stderr, never a traceback.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import typer

from benchmarks.timing_policy import split_refused, timing_flag, user_timing_fields
from cli import project_file
from cli.client import (
    EXIT_ERROR,
    EXIT_PASS,
    Api,
    ClientError,
    exit_code_for,
    print_run,
    wait_for_run,
)
from cli.extras import needs
from cli.help_format import Command
from cli.matrix_flags import MatrixFlags, MatrixOptions, with_matrix_flags
from cli.request_fields import WHERE_FLAGS, environment_of, split_values
from cli.timing_flags import TimingFlags, timing_flag_problem, with_timing_flags


def register(cli: typer.Typer) -> None:
    cli.command("submit", cls=Command, rich_help_panel="CI client")(submit)
    cli.command("demo", cls=Command, rich_help_panel="Measure here")(needs("all", "demo")(demo))


# ---- request building ----------------------------------------------------------------------

def run_request(
    *, project: str, revision: str, branch: str | None, pins: list[str] | None,
    interpreter: str | None, matrix: MatrixOptions, trigger: str = "cli",
) -> dict[str, Any]:
    environment = environment_of(pins, interpreter)
    body: dict[str, Any] = {
        "project": project, "revision": revision, "trigger": trigger,
        "environment": environment, "matrix": matrix.to_json(),
    }
    if branch:
        body["branch"] = branch
    return body


# Request fields -> the flags that set them, so the server's 422 names what to change.
SUBMIT_FLAGS = {
    **WHERE_FLAGS,
    "matrix.models": "--model", "matrix.backends": "--backend", "matrix.weights": "--weights",
    "matrix.precisions": "--precision", "matrix.batch_sizes": "--batch",
    "matrix.shape_modes": "--shape-mode", "matrix.device": "--device",
    "matrix.image_size": "--image-size", "matrix.width": "--width",
    "matrix.threads": "--threads", "matrix.sides": "--sides",
    **{f"matrix.timing.{name}": timing_flag(name) for name in user_timing_fields()},
    "matrix": "the matrix (--model x --backend x --weights x --precision x --batch)",
}


def _model_help() -> str:
    from benchmarks.model_ref import FORMS_HELP

    return (f"Models (repeat or comma-separate): {FORMS_HELP} (a factory's package must be "
            "one the server lists in SPEEDWATCH_MODEL_PACKAGES; a file is relative to the "
            "worker's SPEEDWATCH_MODEL_PATH).")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_ERROR)


def _check_timing_flags(timing: TimingFlags) -> None:
    """One line naming the first timing flag whose value its field refuses."""
    problem = timing_flag_problem(**timing)
    if problem is not None:
        raise _fail(problem)


# ---- speedwatch submit ---------------------------------------------------------------------

@with_timing_flags(more={"processes": "The CI covers the variance between processes, i.e. "
                                      "what a second run would see."})
@with_matrix_flags(model_help=_model_help(), panel="Matrix", threads_help=(
    "CPU threads for both sides; default 1 on the CPU (as `demo`: steadier timings on a "
    "shared host); 0: the library's default (all cores)."))
def submit(
    url: str | None = typer.Option(
        None, envvar="SPEEDWATCH_URL",
                                   help="Server, e.g. http://host:8000 (or `url` in the "
                                   "project file).", rich_help_panel="Server and project"),
    token: str = typer.Option(
        ..., envvar="SPEEDWATCH_TOKEN", help="Token with the ci scope.",
            rich_help_panel="Server and project"),
    project: str | None = typer.Option(
        None, envvar="SPEEDWATCH_PROJECT",
                                       help="Project name (created on first use; or "
                                       "`project` in the project file).",
                                       rich_help_panel="Server and project"),
    revision: str | None = typer.Option(
        None, help="Commit or version string under test (default: the CI's commit variable "
        "such as GITHUB_SHA or CI_COMMIT_SHA, else git rev-parse HEAD).",
        rich_help_panel="Server and project"),
    branch: str | None = typer.Option(
        None, help="Branch label (default: the CI's branch "
                                      "variable, else git's current branch).",
                                      rich_help_panel="Server and project"),
    config: Path | None = typer.Option(
        None, "--config", help="Project file (default: speedwatch.toml, or [tool.speedwatch] "
        "in pyproject.toml, here or in the nearest parent up to the repository's root); "
        "flags override it.", rich_help_panel="Server and project"),
    pin: list[str] | None = typer.Option(
        None, "--pin", help="name==version to test (repeatable), e.g. onnxruntime==1.22.0.",
        rich_help_panel="Environment"),
    interpreter: str | None = typer.Option(
        None, help="A named interpreter the workers know, instead of pins.",
        rich_help_panel="Environment"),
    idempotency_key: str | None = typer.Option(
        None, help="Same key = same run on retry (default: identical request = same run).",
        rich_help_panel="Waiting and reports"),
    wait: bool = typer.Option(
        False, "--wait", help="Wait for the verdict; exit 0 pass, "
                              "1 regression, 2 error, 3 inconclusive.",
                              rich_help_panel="Waiting and reports"),
    timeout: float = typer.Option(
        3600.0, help="Seconds to wait with --wait.", rich_help_panel="Waiting and reports"),
    poll: float = typer.Option(
        2.0, help="Seconds between polls with --wait.", rich_help_panel="Waiting and reports"),
    summary: Path | None = typer.Option(
        None, help="With --wait: append a Markdown table (before/after speedup, CI, verdict, "
        "links) to this file, e.g. \"$GITHUB_STEP_SUMMARY\".",
        rich_help_panel="Waiting and reports"),
    junit: Path | None = typer.Option(
        None, help="With --wait: write a JUnit XML report, one test case per cell.",
        rich_help_panel="Waiting and reports"),
    json_out: Path | None = typer.Option(
        None, "--json", help="With --wait: write the finished run as JSON.",
        rich_help_panel="Waiting and reports"),
    *,
    matrix: MatrixFlags,
    timing: TimingFlags,
) -> None:
    """Trigger a benchmark run; with --wait, exit 0 on pass, 1 on regression, 2 on error,
    3 when inconclusive (not decided within the timing budget). Options not given come
    from the project file (speedwatch.toml), if there is one."""
    try:  # the project file fills what no flag gave (cli.project_file)
        pf = project_file.load(config)
        url = project_file.required(pf.pick("url", url), "--url", "url", "SPEEDWATCH_URL")
        project = project_file.required(pf.pick("project", project), "--project", "project")
        revision, branch = (project_file.revision(revision, pf.root),
                            project_file.branch(branch, pf.root))
        pin, interpreter = pf.environment(pin, interpreter)
        matrix = matrix.with_file(pf)
        timing = TimingFlags({name: pf.pick(f"timing.{name}", given)
                              for name, given in timing.items()})
        project_file.warn_about_thresholds(pf, url, token, project)
    except project_file.ProjectFileError as exc:
        raise _fail(str(exc)) from None
    if (summary or junit or json_out) and not wait:
        raise _fail("--summary, --junit and --json need --wait (they report the verdict)")
    try:
        # threads 1 on the CPU unless asked: steadier on a shared host, and `demo`'s series
        body = run_request(project=project, revision=revision, branch=branch,
                           pins=pin, interpreter=interpreter,
                           matrix=matrix.options(timing, cpu_threads=1),
                           trigger="ci" if os.environ.get("CI") else "cli")
        api = Api(url, token, flags=SUBMIT_FLAGS)
        try:
            run = api.trigger(body, idempotency_key)
            run_url = f"{api.base}/api/v1/runs/{run['id']}"
            state = "created" if run.get("created", True) else "existing"
            typer.echo(f"run {run['id']} ({state}): {run['progress']['total']} cells, "
                       f"{run_url}", err=True)
            if run.get("warning"):
                typer.echo(f"warning: {run['warning']}", err=True)
            if not wait:
                return
            run = wait_for_run(api, run, timeout_s=timeout, poll_s=poll)
        finally:
            api.close()
    except ClientError as exc:
        raise _fail(str(exc)) from None
    print_run(run, run_url)
    if summary or junit or json_out:
        from cli.report import write_outputs

        try:
            write_outputs(run, url.rstrip("/"), summary=summary, junit_path=junit,
                          json_path=json_out)
        except OSError as exc:
            raise _fail(f"cannot write the report: {exc}") from None
    raise typer.Exit(exit_code_for(run))


# ---- speedwatch demo -----------------------------------------------------------------------

def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@with_timing_flags(panel=None)
def demo(
    data_dir: Path = typer.Option(Path("var"), help="Where the SQLite file and venvs live."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on."),
    port: int = typer.Option(8000, help="Port to serve on."),
    model: str = typer.Option("resnet50", help=_model_help().replace("(repeat or "
                                                        "comma-separate)", "(one)")),
    device: str = typer.Option("cpu", help="cpu, or cuda on a GPU host (then the default "
                               "backend is inductor at fp16, timed with CUDA graphs)."),
    backend: list[str] | None = typer.Option(
        None, help="Backends (default onnxruntime on cpu, inductor on cuda)."),
    weights: str = typer.Option("constant,tensor", help="Weight representations."),
    precision: str | None = typer.Option(None, help="fp32, fp16, bf16 (default fp32 on cpu, "
                                         "fp16 on cuda)."),
    batch: str = typer.Option("1", help="Batch sizes, e.g. 1,8."),
    image_size: int | None = typer.Option(None, help="Input size (default 224)."),
    width: int | None = typer.Option(None, help="ResNet stem width (default 64)."),
    threads: int = typer.Option(
        1, help="CPU threads for both sides; 1 keeps the two sides from fighting over cores."),
    sides: str | None = typer.Option(
        None, help="split (each side alone in its processes; CPU default) or paired (both "
        "in every process; GPU default)."),
    exit_when_done: bool = typer.Option(
        False, "--exit-when-done", help="Stop serving once the run finished (scripts, tests)."
    ),
    timeout: float = typer.Option(1800.0, help="Seconds to wait for the run."),
    *,
    timing: TimingFlags,
) -> None:
    """Benchmark ResNet50 here with the embedded default and serve the results.

    Eager vs ONNX Runtime (CPU) or torch.compile (--device cuda) with constant and tensor
    weights, measured adaptively over processes; SQLite file, in-process executor, no
    services needed. Exit code as for `submit --wait`.
    """
    if device not in ("cpu", "cuda"):
        raise _fail(f"--device: {device!r} is not cpu or cuda")
    if sides is not None and sides not in ("paired", "split"):
        raise _fail(f"--sides: {sides!r} is not paired or split")
    refused = split_refused(sides, device)
    if refused is not None:
        raise _fail(f"--sides split with --device {device}: {refused}")
    _check_timing_flags(timing)
    if not _port_free(host, port):
        raise _fail(f"port {port} on {host} is in use; pass --port")
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    database_url = f"sqlite:///{data_dir / 'speedwatch.db'}"
    os.environ["SPEEDWATCH_DATABASE_URL"] = database_url
    os.environ["SPEEDWATCH_EXECUTOR"] = "local"
    os.environ.setdefault("SPEEDWATCH_VENV_CACHE_DIR", str(data_dir / "venvs"))
    os.environ["SPEEDWATCH_ENVIRONMENT"] = "development"

    import uvicorn

    from app.config import get_settings
    from app.db import session_scope, upgrade
    from app.main import create_app
    from app.services.tokens import create_token
    from workers.dispatch import ExecutorCellQueue

    get_settings.cache_clear()
    # on a GPU host the warm server's imports start now, beside the migration and the
    # API's start, instead of in the run's first process (workers.local)
    ExecutorCellQueue().warm_up(get_settings())
    typer.echo(f"demo: database {database_url}; migrating", err=True)
    upgrade(database_url)
    with session_scope() as session:
        _, token = create_token(session, "ci", name="speedwatch-demo")

    on_gpu = device == "cuda"
    matrix = MatrixOptions(
        models=[model],
        backends=split_values(backend) or (["inductor"] if on_gpu else ["onnxruntime"]),
        weights=split_values([weights]),
        precisions=split_values([precision]) if precision else (["fp16"] if on_gpu else ["fp32"]),
        batch_sizes=[int(b) for b in split_values([batch])], device=device, image_size=image_size,
        width=width, threads=None if on_gpu else threads, sides=sides,
        timing=dict(timing))
    body = run_request(project="demo", revision=f"demo-{time.strftime('%Y%m%d-%H%M%S')}",
                       branch=None, pins=[], interpreter=None, matrix=matrix, trigger="demo")
    config = uvicorn.Config(create_app(), host=host, port=port, log_level="warning",
                            access_log=False)
    server = uvicorn.Server(config)
    outcome: dict[str, int] = {}
    base = f"http://{host}:{port}"

    def drive() -> None:
        """Trigger over HTTP like CI would, follow the run, report; stop if asked to."""
        outcome["code"] = EXIT_ERROR
        try:
            while not server.started:
                if server.should_exit:
                    return
                time.sleep(0.1)
            typer.echo(f"demo: API on {base} (OpenAPI: {base}/docs); triggering", err=True)
            api = Api(base, token, flags=SUBMIT_FLAGS)
            try:
                run = api.trigger(body, None)
                typer.echo(f"demo: dashboard at {base}/ (this run, live: "
                           f"{base}/runs/{run['id']})", err=True)
                run = wait_for_run(api, run, timeout_s=timeout, poll_s=1.0)
            finally:
                api.close()
            run_url = f"{base}/api/v1/runs/{run['id']}"
            print_run(run, run_url)
            outcome["code"] = exit_code_for(run)
            if not exit_when_done:
                typer.echo(f"demo: dashboard at {base}/runs/{run['id']} (overview: {base}/); "
                           f"results as JSON at {run_url}; Ctrl-C to stop", err=True)
        except ClientError as exc:
            typer.echo(f"error: {exc}", err=True)
        except Exception as exc:  # the thread must report, not die silently
            typer.echo(f"error: demo failed: {type(exc).__name__}: {exc}", err=True)
        if exit_when_done:
            server.should_exit = True

    driver = threading.Thread(target=drive, name="speedwatch-demo", daemon=True)
    driver.start()
    server.run()  # returns on Ctrl-C, or when the driver sets should_exit
    driver.join(timeout=5)
    if not server.started and "code" not in outcome:
        raise _fail(f"the API did not start on {base}")
    code = outcome.get("code", EXIT_ERROR if exit_when_done else EXIT_PASS)
    sys.stdout.flush()
    raise typer.Exit(code)
