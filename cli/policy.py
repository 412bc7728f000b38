"""`speedwatch policy show|set`: a project's detection policy over HTTP, as an admin sets it.

`set` changes only the options given and keeps the rest (it reads the stored policy, changes
it, and PUTs the whole of it back), so `--threshold 0.05` does not undo a pinned baseline.
The server validates; a refusal is exit 2 with the server's one-line reason naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer

from cli import project_file
from cli.client import EXIT_ERROR, Api, ClientError
from cli.help_format import Command

policy_cli = typer.Typer(help="Read or change a project's detection policy.",
                         no_args_is_help=True)

URL = typer.Option(None, envvar="SPEEDWATCH_URL",
                   help="Server, e.g. http://host:8000 (or `url` in the project file).")
PROJECT = typer.Option(None, envvar="SPEEDWATCH_PROJECT",
                       help="Project name (or `project` in the project file).")
CONFIG = typer.Option(None, "--config", help="Project file (default: speedwatch.toml, or "
                      "[tool.speedwatch] in pyproject.toml, here or in a parent).")


def _from_file(config: Path | None, project: str | None,
               url: str | None) -> tuple[project_file.ProjectFile, str, str]:
    """The project file, and project and server from the flags or else from it."""
    pf = project_file.load(config)
    return (pf, project_file.required(pf.pick("project", project), "--project", "project"),
            project_file.required(pf.pick("url", url), "--url", "url", "SPEEDWATCH_URL"))


def register(cli: typer.Typer) -> None:
    cli.add_typer(policy_cli, name="policy", rich_help_panel="CI client")


def _path(project: str) -> str:
    return f"/api/v1/projects/{quote(project, safe='/')}/detection"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_ERROR)


def _series_thresholds(pairs: list[str], current: dict[str, float]) -> dict[str, float]:
    """KEY=VALUE sets a series' threshold; KEY= removes it (the project's applies again)."""
    out = dict(current)
    for pair in pairs:
        key, sep, value = pair.rpartition("=")
        if not sep or not key:
            raise ClientError(f"--series-threshold {pair!r}: expected SERIES_KEY=VALUE")
        if value == "":
            out.pop(key, None)
            continue
        try:
            out[key] = float(value)
        except ValueError:
            raise ClientError(f"--series-threshold {pair!r}: {value!r} is not a number") from None
    return out


@policy_cli.command("show", cls=Command)
def show(
    project: str | None = PROJECT,
    url: str | None = URL,
    token: str | None = typer.Option(None, envvar="SPEEDWATCH_TOKEN",
                                     help="A read token (unless the server has public reads)."),
    config: Path | None = CONFIG,
) -> None:
    """Print the project's policy as JSON (the defaults if it has none of its own)."""
    try:
        _, project, url = _from_file(config, project, url)
    except project_file.ProjectFileError as exc:
        raise _fail(str(exc)) from None
    api = Api(url, token)
    try:
        typer.echo(json.dumps(api._call("GET", _path(project)), indent=2))
    except ClientError as exc:
        raise _fail(str(exc)) from None
    finally:
        api.close()


@policy_cli.command("set", cls=Command)
def set_policy(
    project: str | None = PROJECT,
    url: str | None = URL,
    token: str = typer.Option(..., envvar="SPEEDWATCH_TOKEN", help="A token with admin scope."),
    baseline: str | None = typer.Option(None, help="previous, pinned or window."),
    pinned_run: int | None = typer.Option(None, help="The run id a pinned baseline uses."),
    window: int | None = typer.Option(None, help="Runs in the window baseline's median."),
    threshold: float | None = typer.Option(None, help="Project threshold, e.g. 0.03 for 3%."),
    series_threshold: list[str] | None = typer.Option(
        None, "--series-threshold",
        help="SERIES_KEY=VALUE (repeatable); SERIES_KEY= removes the series' own threshold."),
    config: Path | None = CONFIG,
) -> None:
    """Change the options given, keep the rest; print the stored policy. The project
    file's [thresholds] apply where no flag is given."""
    try:
        pf, project, url = _from_file(config, project, url)
    except project_file.ProjectFileError as exc:
        raise _fail(str(exc)) from None
    if threshold is None:
        threshold = pf.contents.thresholds.threshold
    if not series_threshold and pf.contents.thresholds.series:
        series_threshold = [f"{key}={value}"
                            for key, value in pf.contents.thresholds.series.items()]
    api = Api(url, token)
    try:
        try:
            policy: dict[str, Any] = api._call("GET", _path(project))["policy"]
        except ClientError as exc:
            if "HTTP 404" not in str(exc):
                raise
            policy = {}  # a new project: the server's defaults fill what is not given
        for name, value in (("baseline", baseline), ("pinned_run_id", pinned_run),
                            ("window", window), ("threshold", threshold)):
            if value is not None:
                policy[name] = value
        if series_threshold:
            policy["series_thresholds"] = _series_thresholds(
                series_threshold, policy.get("series_thresholds") or {})
        stored = api._call("PUT", _path(project), json=policy)
        typer.echo(json.dumps(stored, indent=2))
    except ClientError as exc:
        raise _fail(str(exc)) from None
    finally:
        api.close()
