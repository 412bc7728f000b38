"""`speedwatch sweep`, `speedwatch bisect` and `speedwatch cancel`: runs across released
versions of a package, over HTTP like `submit` (cli.client).

`sweep` triggers one run per release in a range (the server reads the releases from the
package index its workers' pip is configured with); `bisect` searches the releases between
a good and a bad environment (or a regression's) for the first slower one; `cancel` stops
either. With --wait they show progress (runs finished, the current step), then the table
or the answer. Exit codes: 0 done, 2 failed, cancelled, refused, unreachable or timed out,
always with a one-line reason on stderr, never a traceback.
"""

from __future__ import annotations

from typing import Any

import typer

from cli.client import EXIT_ERROR, EXIT_PASS, Api, ClientError, Watched, follow
from cli.help_format import Command
from cli.matrix_flags import MatrixFlags, with_matrix_flags
from cli.request_fields import split_values
from cli.timing_flags import TimingFlags, with_timing_flags

URL = typer.Option(..., envvar="SPEEDWATCH_URL", help="Server, e.g. http://host:8000")
TOKEN = typer.Option(..., envvar="SPEEDWATCH_TOKEN", help="Token with the ci scope.")
FINISHED = ("done", "failed", "cancelled")
THREADS_HELP = ("CPU threads for both sides (1 = steadier on a shared host); default: the "
                "library's (all cores).")

# Request fields -> the flags that set them, so a refusal names what to change.
SWEEP_FLAGS = {"package": "--package", "from_version": "--from", "to_version": "--to",
               "hold": "--hold", "max_versions": "--max-versions", "project": "--project"}


def register(cli: typer.Typer) -> None:
    cli.command("sweep", cls=Command, rich_help_panel="CI client")(sweep)
    cli.command("bisect", cls=Command, rich_help_panel="CI client")(bisect)
    cli.command("cancel", cls=Command, rich_help_panel="CI client")(cancel)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_ERROR)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def _speedup(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "-"
    if cell.get("speedup") is None:
        return f"{cell.get('status')}: {(cell.get('error') or '')[:60]}".rstrip(": ")
    return f"{cell['speedup']:.3f}x [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]"


def print_sweep(sweep: dict[str, Any], base: str) -> None:
    """The sweep's table (version x weights) and changes, or a bisect's steps and answer."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=180)
    if sweep["kind"] == "sweep":
        weights = list(dict.fromkeys(c["weights"] for r in sweep["runs"] for c in r["cells"]))
        table = Table(title=f"sweep {sweep['id']}: {sweep['package']} {sweep['from_version']}"
                      f" .. {sweep['to_version']}, speedup over eager [95% CI]")
        table.add_column("version")
        for w in weights:
            table.add_column(f"weights {w}", justify="right")
        table.add_column("run")
        for run in sweep["runs"]:
            by = {c["weights"]: c for c in run["cells"]}
            table.add_row(run["version"], *(_speedup(by.get(w)) for w in weights),
                          f"{run['run_id']} {run['status']}")
        console.print(table)
        for change in sweep.get("changes") or []:
            console.print(f"  {change['direction']}: weights {change['weights']} "
                          f"{change['before']} -> {change['after']}: "
                          f"{_pct(change['change'])} [{_pct(change['change_low'])}, "
                          f"{_pct(change['change_high'])}]")
        if sweep["status"] == "done" and not sweep.get("changes"):
            console.print("  no change between consecutive releases beyond the CIs and "
                          "the threshold")
    else:
        table = Table(title=f"bisect {sweep['id']}: {sweep['package']} "
                      f"{sweep['from_version']} (good) .. {sweep['to_version']} (bad)")
        for column in ("step", "role", "environment", "speedup [95% CI]",
                       "vs good [95% CI]", "outcome"):
            table.add_column(column)
        for step in sweep.get("steps") or []:
            speedup = "-" if step.get("speedup") is None else (
                f"{step['speedup']:.3f}x [{step['ci_low']:.3f}, {step['ci_high']:.3f}]")
            change = "-" if step.get("change") is None else (
                f"{_pct(step['change'])} [{_pct(step['change_low'])}, "
                f"{_pct(step['change_high'])}]")
            table.add_row(str(step["n"]), step["role"], ", ".join(step["pins"]), speedup,
                          change, step.get("outcome") or step.get("status") or "-")
        console.print(table)
    console.print(f"status: {sweep['status']}   {sweep.get('outcome') or ''}")
    console.print(f"page: {base}/sweeps/{sweep['id']}")


def wait_for_sweep(api: Api, sweep: dict[str, Any], *, timeout_s: float,
                   poll_s: float) -> dict[str, Any]:
    """Poll until the sweep ends, showing runs finished (and the step a bisect is on)."""
    sweep_id, kind = int(sweep["id"]), str(sweep["kind"])

    def finished(s: dict[str, Any]) -> int:
        p = s.get("progress") or {}
        return int(p.get("done", 0)) + int(p.get("failed", 0))

    def total(s: dict[str, Any]) -> int | None:
        return int(s["progress"]["total"]) if s["kind"] == "sweep" else int(s["max_runs"])

    def now_doing(s: dict[str, Any]) -> str:
        if s["kind"] == "sweep":
            running = [r["version"] for r in s.get("runs") or [] if r["status"] == "running"]
            return f"measuring {s['package']} {running[0]}" if running else s["status"]
        steps = s.get("steps") or []
        live = [st for st in steps if st.get("outcome") is None]
        if live:
            return f"step {live[-1]['n']}: {', '.join(live[-1]['pins'])}"
        return str(s["status"])

    def timed_out(s: dict[str, Any], after: float) -> str:
        return (f"timed out after {after:g} s waiting for {kind} {sweep_id} ({finished(s)} "
                f"runs finished); it goes on: speedwatch cancel {sweep_id} stops it")

    return follow(Watched(label=f"{kind} {sweep_id}", unit="runs",
                          fetch=lambda: api.get_sweep(sweep_id), done=finished, total=total,
                          doing=now_doing, timed_out=timed_out),
                  sweep, timeout_s=timeout_s, poll_s=poll_s)


def _follow(api: Api, sweep: dict[str, Any], wait: bool, timeout: float,
            poll: float) -> None:
    kind, sweep_id = sweep["kind"], sweep["id"]
    if sweep.get("warning"):
        typer.echo(f"warning: {sweep['warning']}", err=True)
    if not wait:
        return
    try:
        sweep = wait_for_sweep(api, sweep, timeout_s=timeout, poll_s=poll)
    except KeyboardInterrupt:
        raise _fail(f"stopped waiting; {kind} {sweep_id} goes on (speedwatch cancel "
                    f"{sweep_id} stops it)") from None
    print_sweep(sweep, api.base)
    raise typer.Exit(EXIT_PASS if sweep["status"] == "done" else EXIT_ERROR)


WAIT = typer.Option(False, "--wait", help="Follow it to the end; exit 0 done, 2 otherwise.")
TIMEOUT = typer.Option(6 * 3600.0, help="Seconds to wait with --wait.")
POLL = typer.Option(5.0, help="Seconds between polls with --wait.")


@with_timing_flags(panel=None)
@with_matrix_flags(model_help="Models (default resnet50).", threads_help=THREADS_HELP)
def sweep(
    package: str = typer.Option(..., help="An allowlisted package, e.g. onnxruntime."),
    from_version: str = typer.Option(..., "--from", help="Oldest release, e.g. 1.16.0."),
    to_version: str = typer.Option(..., "--to", help="Newest release, e.g. 1.24.4."),
    project: str = typer.Option(..., envvar="SPEEDWATCH_PROJECT",
                                help="Project name (created on first use)."),
    url: str = URL,
    token: str = TOKEN,
    pre: bool = typer.Option(False, "--pre", help="Include pre-releases."),
    hold: list[str] | None = typer.Option(
        None, "--hold", help="A pin held fixed in every run (repeatable), e.g. numpy==1.26.4."),
    max_versions: int | None = typer.Option(
        None, help="Refuse a range with more releases than this (server limit otherwise)."),
    wait: bool = WAIT, timeout: float = TIMEOUT, poll: float = POLL,
    *,
    matrix: MatrixFlags,
    timing: TimingFlags,
) -> None:
    """Measure every release of a package in a range: one run per version, read from the
    package index the workers' pip is configured with, oldest first."""
    try:
        body = {
            "project": project, "package": package, "from_version": from_version,
            "to_version": to_version, "pre": pre, "holds": split_values(hold),
            "matrix": matrix.options(timing, cpu_threads=None).to_json(),
        }
        if max_versions is not None:
            body["max_versions"] = max_versions
        api = Api(url, token, timeout_s=180.0,  # the server reads the package index
                  flags=SWEEP_FLAGS)
        try:
            created = api.sweep(body)
            versions = created["versions"]
            typer.echo(f"sweep {created['id']}: {len(versions)} releases of "
                       f"{created['package']} ({versions[0]} ... {versions[-1]}), one run "
                       f"each; {api.base}/sweeps/{created['id']}", err=True)
            _follow(api, created, wait, timeout, poll)
        finally:
            api.close()
    except ClientError as exc:
        raise _fail(str(exc)) from None


@with_timing_flags(panel=None)
@with_matrix_flags(model_help="Models (default resnet50).", threads_help=THREADS_HELP)
def bisect(
    project: str = typer.Option(..., envvar="SPEEDWATCH_PROJECT", help="Project name."),
    url: str = URL,
    token: str = TOKEN,
    regression: int | None = typer.Option(
        None, help="A regression's id: its baseline's environment is good, its own bad."),
    good: list[str] | None = typer.Option(
        None, "--good", help="The good environment's pins (repeatable), e.g. "
        "onnxruntime==1.16.0."),
    bad: list[str] | None = typer.Option(None, "--bad", help="The bad environment's pins."),
    package: list[str] | None = typer.Option(
        None, "--package", help="Bisect only these of the packages that differ."),
    pre: bool = typer.Option(False, "--pre", help="Include pre-releases in the search."),
    max_steps: int | None = typer.Option(
        None, help="Runs at most, the two environments included (server limit otherwise)."),
    wait: bool = WAIT, timeout: float = TIMEOUT, poll: float = POLL,
    *,
    matrix: MatrixFlags,
    timing: TimingFlags,
) -> None:
    """Find the first release that made a series slower: binary search between a good and
    a bad environment, each step a run decided against the good one."""
    try:
        if (regression is None) == (not good and not bad):
            raise ClientError("give --regression ID, or --good and --bad pins")
        body: dict[str, Any] = {"project": project, "pre": pre}
        if regression is not None:
            body["regression_id"] = regression
        else:
            if not good or not bad:
                raise ClientError("give both --good and --bad")
            body.update(good=split_values(good), bad=split_values(bad),
                        matrix=matrix.options(timing, cpu_threads=None).to_json())
        if package:
            body["packages"] = split_values(package)
        if max_steps is not None:
            body["max_steps"] = max_steps
        api = Api(url, token, timeout_s=180.0)
        try:
            created = api.bisect(body)
            state = created.get("steps") or []
            typer.echo(f"bisect {created['id']}: {created['package']} "
                       f"{created['from_version']} (good) .. {created['to_version']} (bad), "
                       f"at most {created['max_runs']} runs; step 1: "
                       f"{', '.join(state[0]['pins']) if state else '-'}; "
                       f"{api.base}/sweeps/{created['id']}", err=True)
            _follow(api, created, wait, timeout, poll)
        finally:
            api.close()
    except ClientError as exc:
        raise _fail(str(exc)) from None


def cancel(
    sweep_id: int = typer.Argument(..., help="The sweep's or bisect's id."),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Cancel a sweep or bisect: nothing more starts, and a cell measuring stops after its
    current child process."""
    try:
        api = Api(url, token)
        try:
            sweep_ = api.cancel_sweep(sweep_id)
        finally:
            api.close()
    except ClientError as exc:
        raise _fail(str(exc)) from None
    p = sweep_.get("progress") or {}
    typer.echo(f"{sweep_['kind']} {sweep_id} cancelled: {p.get('done', 0)} runs done, "
               f"{p.get('failed', 0)} failed (those not started among them), "
               f"{p.get('running', 0)} stopping after their current process; "
               f"{sweep_.get('outcome') or ''}")
