"""`speedwatch submit` (the CI client) and `speedwatch demo` (the embedded default, one command).

`submit` talks to a server over HTTP only, so CI needs nothing but this package and a token.
Exit codes are the contract with CI: 0 pass, 1 regression, 2 error (a failed cell, a
refused request, a server that cannot be reached, a timeout), 3 inconclusive (a comparison
the cells could not decide within their timing budget: re-run or measure longer), always
with a one-line reason on stderr, never a traceback.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

EXIT_PASS = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
EXIT_INCONCLUSIVE = 3
FINISHED = ("done", "failed")


class ClientError(Exception):
    """Something the user must fix or retry; the message is the one line CI shows."""


def register(cli: typer.Typer) -> None:
    cli.command("submit")(submit)
    cli.command("demo")(demo)


# ---- request building ----------------------------------------------------------------------

def _split(values: list[str] | None) -> list[str]:
    """Accept `--batch 1,8` and `--batch 1 --batch 8` alike."""
    out: list[str] = []
    for value in values or []:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def _ints(values: list[str] | None, option: str) -> list[int]:
    try:
        return [int(v) for v in _split(values)]
    except ValueError:
        raise ClientError(f"{option}: expected integers such as 1,8") from None


@dataclass
class MatrixOptions:
    models: list[str] = field(default_factory=lambda: ["resnet50"])
    backends: list[str] = field(default_factory=lambda: ["onnxruntime"])
    weights: list[str] = field(default_factory=lambda: ["constant"])
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    batch_sizes: list[int] = field(default_factory=lambda: [1])
    shape_modes: list[str] = field(default_factory=lambda: ["static"])
    device: str = "cpu"
    image_size: int | None = None
    width: int | None = None
    threads: int | None = None
    timing: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "models": self.models, "backends": self.backends, "weights": self.weights,
            "precisions": self.precisions, "batch_sizes": self.batch_sizes,
            "shape_modes": self.shape_modes, "device": self.device,
        }
        if self.image_size is not None:
            body["image_size"] = self.image_size
        if self.width is not None:
            body["width"] = self.width
        if self.threads is not None:
            body["threads"] = self.threads
        timing = {k: v for k, v in self.timing.items() if v is not None}
        if timing:
            body["timing"] = timing
        return body


def run_request(
    *, project: str, revision: str, branch: str | None, pins: list[str],
    interpreter: str | None, matrix: MatrixOptions, trigger: str = "cli",
) -> dict[str, Any]:
    environment: dict[str, Any] = (
        {"interpreter": interpreter} if interpreter else {"pins": pins}
    )
    body: dict[str, Any] = {
        "project": project, "revision": revision, "trigger": trigger,
        "environment": environment, "matrix": matrix.to_json(),
    }
    if branch:
        body["branch"] = branch
    return body


# ---- HTTP ----------------------------------------------------------------------------------

class Api:
    """The few calls the client makes; every failure becomes a ClientError with one line."""

    def __init__(self, url: str, token: str | None, timeout_s: float = 30.0) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base = url.rstrip("/")
        self._client = httpx.Client(base_url=self.base, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        import httpx

        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(
                f"cannot reach {self.base}: {type(exc).__name__}: {exc}".strip()
            ) from None
        if response.status_code >= 400:
            raise ClientError(f"HTTP {response.status_code} from {method} {path}: "
                              f"{_error_text(response)}")
        try:
            data = response.json()
        except ValueError:
            raise ClientError(f"{method} {path}: the server did not answer JSON") from None
        if not isinstance(data, dict):
            raise ClientError(f"{method} {path}: unexpected answer {str(data)[:100]}")
        return data

    def trigger(self, body: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._call("POST", "/api/v1/runs", json=body, headers=headers)

    def run(self, run_id: int) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/runs/{run_id}")


def _error_text(response: Any) -> str:
    try:
        data = response.json()
    except ValueError:
        return (response.text or response.reason_phrase or "").strip().splitlines()[0][:300] \
            if (response.text or response.reason_phrase) else "no message"
    if isinstance(data, dict):
        detail = str(data.get("detail", "")) if not isinstance(data.get("detail"), list) \
            else "; ".join(str(d.get("msg", d)) for d in data["detail"])
        errors = data.get("errors") or []
        parts = [f"{e.get('field')}: {e.get('message')}" for e in errors if isinstance(e, dict)]
        return "; ".join(p for p in [detail, *parts] if p)[:500] or "no message"
    return str(data)[:300]


# ---- waiting and reporting -----------------------------------------------------------------

def exit_code_for(run: dict[str, Any]) -> int:
    verdict = run.get("verdict")
    if verdict == "pass":
        return EXIT_PASS
    if verdict == "regression":
        return EXIT_REGRESSION
    if verdict == "inconclusive":
        return EXIT_INCONCLUSIVE
    return EXIT_ERROR


def _finished_count(progress: dict[str, Any]) -> int:
    return int(progress.get("done", 0)) + int(progress.get("failed", 0)) + \
        int(progress.get("skipped", 0))


def wait_for_run(
    api: Api, run: dict[str, Any], *, timeout_s: float, poll_s: float, quiet: bool = False,
) -> dict[str, Any]:
    """Poll until the run finishes, showing cells finished out of total; ClientError on timeout.

    A few failed polls in a row are tolerated (a server restarting under CI); more are not.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    deadline = time.monotonic() + timeout_s
    failures = 0
    last_line = ""
    progress_bar = Progress(
        TextColumn("run {task.fields[run_id]} [bold]{task.fields[status]}[/]"),
        BarColumn(), MofNCompleteColumn(), TextColumn("cells"), TimeElapsedColumn(),
        console=console, disable=quiet,
    )
    with progress_bar:
        p = run.get("progress", {})
        task = progress_bar.add_task("run", total=p.get("total") or None,
                                     completed=_finished_count(p), run_id=run["id"],
                                     status=run["status"])
        while run["status"] not in FINISHED:
            if time.monotonic() >= deadline:
                p = run.get("progress", {})
                raise ClientError(
                    f"timed out after {timeout_s:g} s waiting for run {run['id']} "
                    f"(status {run['status']}, {_finished_count(p)}/{p.get('total', '?')} "
                    "cells finished)"
                )
            time.sleep(poll_s)
            try:
                run = api.run(int(run["id"]))
                failures = 0
            except ClientError:
                failures += 1
                if failures >= 5:
                    raise
                continue
            p = run.get("progress", {})
            progress_bar.update(task, total=p.get("total") or None,
                                completed=_finished_count(p), status=run["status"])
            line = f"run {run['id']} {run['status']}: {_finished_count(p)}/{p.get('total')} cells"
            if not console.is_terminal and not quiet and line != last_line:
                console.print(line)  # a CI log gets a line per change instead of a bar
                last_line = line
    return run


def print_run(run: dict[str, Any], url: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log file has no width; keep series keys whole
    table = Table(title=f"run {run['id']}: {run.get('project')} @ {run.get('revision')}")
    for column in ("series", "status", "speedup [95% CI]", "eager ms", "candidate ms",
                   "accuracy", "verdict", "timing"):
        table.add_column(column, justify="right" if "ms" in column or "speedup" in column
                         else "left")
    for cell in run.get("cells", []):
        r = cell.get("result") or {}
        if r.get("speedup") is not None:
            speedup = f"{r['speedup']:.2f}x [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        else:
            speedup = "-"
        accuracy = {True: "ok", False: "FAILED", None: "-"}[r.get("accuracy_passed")]
        status = cell["status"]
        if cell.get("error") and status != "done":
            status += f": {cell['error'][:80]}"
        judgement = cell.get("judgement") or {}
        cell_verdict = judgement.get("verdict") or "-"
        if judgement.get("suspect") and cell_verdict != "regression":
            cell_verdict += " (suspect)"
        table.add_row(
            cell["series_key"], status, speedup,
            _ms(r.get("baseline_median_ms")), _ms(r.get("candidate_median_ms")), accuracy,
            cell_verdict, _timing_text(r),
        )
    console.print(table)
    verdict = run.get("verdict") or "none"
    console.print(f"status: {run['status']}   verdict: [bold]{verdict}[/]")
    for reason in run.get("reasons") or []:
        console.print(f"  - {reason}")
    if url:
        console.print(f"results: {url}")


def _timing_text(result: dict[str, Any]) -> str:
    """'graphs, 3 proc, 6.1 s' : how the cell was timed and how long deciding took."""
    evidence = result.get("evidence") or {}
    timing = evidence.get("timing") or {}
    adaptive = evidence.get("adaptive") or {}
    parts = []
    if timing.get("mode"):
        parts.append(str(timing["mode"]))
    if adaptive.get("processes"):
        parts.append(f"{adaptive['processes']} proc")
    seconds = adaptive.get("timing_seconds", timing.get("timing_seconds"))
    if isinstance(seconds, (int, float)):
        parts.append(f"{seconds:.1f} s")
    return ", ".join(parts) or "-"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_ERROR)


# ---- speedwatch submit ---------------------------------------------------------------------

def submit(
    url: str = typer.Option(..., envvar="SPEEDWATCH_URL", help="Server, e.g. http://host:8000"),
    token: str = typer.Option(..., envvar="SPEEDWATCH_TOKEN", help="Token with the ci scope."),
    project: str = typer.Option(..., help="Project name (created on first use)."),
    revision: str = typer.Option(..., help="Commit or version string under test."),
    branch: str | None = typer.Option(None, help="Branch label."),
    pin: list[str] | None = typer.Option(
        None, "--pin", help="name==version to test (repeatable), e.g. onnxruntime==1.22.0."
    ),
    interpreter: str | None = typer.Option(
        None, help="A named interpreter the workers know, instead of pins."
    ),
    model: list[str] | None = typer.Option(None, help="Models (repeat or comma-separate)."),
    backend: list[str] | None = typer.Option(None, help="Backends, e.g. onnxruntime,inductor."),
    weights: list[str] | None = typer.Option(None, help="constant, tensor, refit."),
    precision: list[str] | None = typer.Option(None, help="fp32, fp16, bf16."),
    batch: list[str] | None = typer.Option(None, help="Batch sizes, e.g. 1,8."),
    shape_mode: list[str] | None = typer.Option(None, help="static, dynamic."),
    device: str = typer.Option("cpu", help='"cpu", "cuda" or a GPU class the server routes.'),
    image_size: int | None = typer.Option(None, help="Input image size (default 224)."),
    width: int | None = typer.Option(None, help="ResNet stem width (default 64)."),
    threads: int | None = typer.Option(
        None, help="CPU threads for both sides (1 = steadier timings on a shared host)."),
    rounds: int | None = typer.Option(None, help="Timing rounds per process (at most)."),
    iters_per_round: int | None = typer.Option(None, help="Inferences per round."),
    warmup: int | None = typer.Option(None, help="Warm-up inferences."),
    cuda_graphs: bool | None = typer.Option(
        None, "--cuda-graphs/--no-cuda-graphs",
        help="GPU cells: time CUDA-graph replays (server default: on; a failed capture "
        "falls back and says so). A change of timing mode starts a new series."),
    max_seconds: float | None = typer.Option(None, help="Timing seconds per process."),
    processes: int | None = typer.Option(
        None, help="Processes per cell at least (default 3): the CI covers the variance "
        "between processes, i.e. what a second run would see."),
    max_processes: int | None = typer.Option(
        None, help="Adaptive: processes are added until the comparison with the baseline "
        "is decided, up to this many."),
    budget: float | None = typer.Option(
        None, help="Adaptive: timing seconds per cell at most (0: no budget)."),
    idempotency_key: str | None = typer.Option(
        None, help="Same key = same run on retry (default: identical request = same run)."
    ),
    wait: bool = typer.Option(False, "--wait", help="Wait for the verdict; exit 0 pass, "
                              "1 regression, 2 error, 3 inconclusive."),
    timeout: float = typer.Option(3600.0, help="Seconds to wait with --wait."),
    poll: float = typer.Option(2.0, help="Seconds between polls with --wait."),
) -> None:
    """Trigger a benchmark run; with --wait, exit 0 on pass, 1 on regression, 2 on error,
    3 when inconclusive (not decided within the timing budget)."""
    try:
        matrix = MatrixOptions(device=device, image_size=image_size, width=width,
                               threads=threads)
        for attr, values in (("models", model), ("backends", backend), ("weights", weights),
                             ("precisions", precision), ("shape_modes", shape_mode)):
            if values:
                setattr(matrix, attr, _split(values))
        if batch:
            matrix.batch_sizes = _ints(batch, "--batch")
        matrix.timing = {"rounds": rounds, "iters_per_round": iters_per_round,
                         "warmup_iters": warmup, "cuda_graphs": cuda_graphs,
                         "max_seconds": max_seconds, "processes": processes,
                         "max_processes": max_processes, "budget_seconds": budget}
        if rounds is not None:
            matrix.timing["min_rounds"] = min(rounds, 5)
        body = run_request(project=project, revision=revision, branch=branch,
                           pins=_split(pin), interpreter=interpreter, matrix=matrix,
                           trigger="ci" if os.environ.get("CI") else "cli")
        api = Api(url, token)
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


def demo(
    data_dir: Path = typer.Option(Path("var"), help="Where the SQLite file and venvs live."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on."),
    port: int = typer.Option(8000, help="Port to serve on."),
    model: str = typer.Option("resnet50", help="Model to benchmark."),
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
    rounds: int | None = typer.Option(None, help="Timing rounds per process (at most)."),
    iters_per_round: int | None = typer.Option(None, help="Inferences per round."),
    warmup: int | None = typer.Option(None, help="Warm-up inferences."),
    cuda_graphs: bool | None = typer.Option(
        None, "--cuda-graphs/--no-cuda-graphs", help="GPU: time CUDA-graph replays "
        "(default on)."),
    max_seconds: float | None = typer.Option(None, help="Timing seconds per process."),
    processes: int | None = typer.Option(None, help="Processes per cell at least (default 3)."),
    max_processes: int | None = typer.Option(None, help="Adaptive: processes at most."),
    budget: float | None = typer.Option(None, help="Adaptive: timing seconds per cell at most."),
    exit_when_done: bool = typer.Option(
        False, "--exit-when-done", help="Stop serving once the run finished (scripts, tests)."
    ),
    timeout: float = typer.Option(1800.0, help="Seconds to wait for the run."),
) -> None:
    """Benchmark ResNet50 here with the embedded default and serve the results.

    Eager vs ONNX Runtime (CPU) or torch.compile (--device cuda) with constant and tensor
    weights, measured adaptively over processes; SQLite file, in-process executor, no
    services needed. Exit code as for `submit --wait`.
    """
    if device not in ("cpu", "cuda"):
        raise _fail(f"--device: {device!r} is not cpu or cuda")
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

    get_settings.cache_clear()
    typer.echo(f"demo: database {database_url}; migrating", err=True)
    upgrade(database_url)
    with session_scope() as session:
        _, token = create_token(session, "ci", name="speedwatch-demo")

    on_gpu = device == "cuda"
    matrix = MatrixOptions(
        models=[model],
        backends=_split(backend) or (["inductor"] if on_gpu else ["onnxruntime"]),
        weights=_split([weights]),
        precisions=_split([precision]) if precision else (["fp16"] if on_gpu else ["fp32"]),
        batch_sizes=[int(b) for b in _split([batch])], device=device, image_size=image_size,
        width=width, threads=None if on_gpu else threads,
        timing={"rounds": rounds, "iters_per_round": iters_per_round, "warmup_iters": warmup,
                "min_rounds": min(rounds, 5) if rounds is not None else None,
                "cuda_graphs": cuda_graphs, "max_seconds": max_seconds,
                "processes": processes, "max_processes": max_processes,
                "budget_seconds": budget},
    )
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
            api = Api(base, token)
            try:
                run = api.trigger(body, None)
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
