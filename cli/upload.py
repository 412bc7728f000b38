"""`speedwatch upload`: results measured elsewhere (what `speedwatch bench --json` writes,
on a machine the service does not drive) stored under a project and revision, a CI job's
documents in as few requests as the server takes (`POST /api/v1/results/batch`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from cli import project_file
from cli.client import EXIT_ERROR, Api, ClientError
from cli.help_format import Command
from cli.request_fields import WHERE_FLAGS, environment_of

# what one request may carry: the server's document bound, and a body well inside its
# default limit (SPEEDWATCH_MAX_BODY_BYTES, 2 MiB), so a batch of large GPU documents splits
BATCH_DOCUMENTS = 100
BATCH_BYTES = 1024 * 1024


class BadFile(Exception):
    """A file that holds no result documents; the message names it."""


@dataclass(frozen=True)
class Document:
    source: str  # FILE, or FILE[i] for a list's i-th document
    body: dict[str, Any]
    size: int


def read_documents(paths: list[Path]) -> list[Document]:
    """Every document of every file, in order: a file holds one document (an object) or a
    list of them (what `bench --json` writes)."""
    out: list[Document] = []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise BadFile(f"{path}: cannot read it ({exc.strerror or exc})") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadFile(f"{path}: not JSON ({exc})") from None
        items = data if isinstance(data, list) else [data]
        if not items:
            raise BadFile(f"{path}: an empty list, no result documents")
        for i, item in enumerate(items):
            where = f"{path}[{i}]" if isinstance(data, list) else str(path)
            if not isinstance(item, dict):
                raise BadFile(f"{where}: not a result document (a JSON object)")
            out.append(Document(where, item, len(json.dumps(item, allow_nan=False))))
    return out


def batches(documents: list[Document]) -> list[list[Document]]:
    """Consecutive runs of at most BATCH_DOCUMENTS documents and about BATCH_BYTES."""
    out: list[list[Document]] = []
    current: list[Document] = []
    size = 0
    for doc in documents:
        if current and (len(current) == BATCH_DOCUMENTS or size + doc.size > BATCH_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(doc)
        size += doc.size
    if current:
        out.append(current)
    return out


def _named(message: str, batch: list[Document]) -> str:
    """The server names a document by its place in the batch (`results[3]`); say which
    file it came from instead."""
    for i, doc in reversed(list(enumerate(batch))):
        for form in (f"results[{i}]", f"results.{i}"):
            message = message.replace(form, doc.source)
    return message


def upload(
    files: list[Path] = typer.Argument(
        ..., help="JSON files, each one result document or a list of them (what "
        "`speedwatch bench --json` writes)."),
    url: str | None = typer.Option(None, envvar="SPEEDWATCH_URL",
                                   help="Server, e.g. http://host:8000 (or `url` in the "
                                   "project file)."),
    token: str | None = typer.Option(None, envvar="SPEEDWATCH_TOKEN",
                                     help="Token with the ci scope."),
    project: str | None = typer.Option(None, envvar="SPEEDWATCH_PROJECT",
                                       help="Project name (or `project` in the project file)."),
    revision: str | None = typer.Option(
        None, help="Revision label (default: the CI's commit variable, else git's HEAD)."),
    branch: str | None = typer.Option(
        None, help="Branch label (default: the CI's branch variable, else git's branch)."),
    pin: list[str] | None = typer.Option(
        None, "--pin", help="name==version the documents were measured with (repeatable); "
        "none: their fingerprints say what they ran with."),
    interpreter: str | None = typer.Option(
        None, help="A named interpreter the workers know, instead of pins."),
    config: Path | None = typer.Option(
        None, "--config", help="Project file (default: speedwatch.toml, or [tool.speedwatch] "
        "in pyproject.toml, as `submit` finds it); flags override it."),
) -> None:
    """Store results measured elsewhere under a project and revision; each document goes
    to its series as if the service had measured it, and the run is judged as a CI job's.
    Uploading the same files again stores nothing twice. Exit 0 when every document is
    stored, 2 on an error (nothing of a refused request is stored)."""
    try:
        pf = project_file.load(config)
        url = project_file.required(pf.pick("url", url), "--url", "url", "SPEEDWATCH_URL")
        project = project_file.required(pf.pick("project", project), "--project", "project")
        revision, branch = (project_file.revision(revision, pf.root),
                            project_file.branch(branch, pf.root))
        pins, interpreter = pf.environment(pin, interpreter)
        documents = read_documents(files)
    except (project_file.ProjectFileError, BadFile) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    assert url is not None and project is not None
    environment = environment_of(pins, interpreter)
    where: dict[str, Any] = {"project": project, "revision": revision,
                             "environment": environment}
    if branch:
        where["branch"] = branch
    api = Api(url, token, flags=WHERE_FLAGS)
    groups = batches(documents)
    created = existing = 0
    run_ids: set[int] = set()
    try:
        for n, group in enumerate(groups, 1):
            try:
                answer = api.upload_batch({**where, "results": [d.body for d in group]})
            except ClientError as exc:
                raise ClientError(_named(str(exc), group)) from None
            created += int(answer["created"])
            existing += int(answer["existing"])
            run_ids.update(int(r["run_id"]) for r in answer["results"])
            typer.echo(f"request {n} of {len(groups)}: {len(group)} document(s), "
                       f"{answer['created']} stored, {answer['existing']} stored already",
                       err=True)
    except ClientError as exc:
        typer.echo(f"error: {exc}", err=True)
        if created:
            typer.echo(f"({created} document(s) of earlier requests were stored; uploading "
                       "the same files again stores nothing twice)", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    finally:
        api.close()
    runs = ", ".join(f"{api.base}/runs/{r}" for r in sorted(run_ids))
    typer.echo(f"{created + existing} document(s) of {project} @ {revision}: {created} stored, "
               f"{existing} stored already; run {runs}")


def register(cli: typer.Typer) -> None:
    cli.command("upload", cls=Command, rich_help_panel="CI client")(upload)
