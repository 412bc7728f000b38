"""`speedwatch repro RESULT_ID`: a folder that measures a stored cell again elsewhere.

The bundle holds what the cell was (its spec, whole: model reference, backend, weights,
precision, batch, shape mode, options and timing), what it ran in (the environment's pins
or interpreter and the versions the worker reported installed), where (the fingerprint) and
what it measured (the stored document), and the exact commands: a fresh virtualenv with the
same pins, then `speedwatch bench --spec spec.json`. Comparing the reproduced speedup with
the stored interval says whether the machine at hand sees what the worker saw.
"""

from __future__ import annotations

from pathlib import Path

import typer

from benchmarks.repro_bundle import bundle_files
from cli.client import EXIT_ERROR, Api, ClientError
from cli.help_format import Command


def repro(
    result_id_text: str = typer.Argument(..., metavar="RESULT_ID", help="The stored result's "
                                         "id (run pages and regressions show it)."),
    url: str = typer.Option(..., envvar="SPEEDWATCH_URL", help="Server, e.g. http://host:8000."),
    token: str | None = typer.Option(None, envvar="SPEEDWATCH_TOKEN",
                                     help="Token with the read scope (if reads are private)."),
    out: Path | None = typer.Option(None, "--out", help="Folder to write (default: "
                                    "repro-RESULT_ID); it must not exist yet."),
) -> None:
    """Write a folder that measures a stored result's cell again on this machine."""
    if not result_id_text.isdigit() or int(result_id_text) < 1:
        typer.echo(f"error: RESULT_ID: {result_id_text!r} is not a result id (a whole number "
                   "from 1, as run pages show it)", err=True)
        raise typer.Exit(EXIT_ERROR)
    result_id = int(result_id_text)
    folder = out or Path(f"repro-{result_id}")
    if folder.exists():
        typer.echo(f"error: --out: {str(folder)!r} exists already; name a new folder", err=True)
        raise typer.Exit(EXIT_ERROR)
    api = Api(url, token)
    try:
        result = api.get(f"/api/v1/results/{result_id}")
    except ClientError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    finally:
        api.close()
    folder.mkdir(parents=True)
    for name, text in bundle_files(result, api.base).items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "repro.sh").chmod(0o755)
    typer.echo(f"wrote {folder}/: bash {folder}/repro.sh measures it again "
               f"(speedwatch bench --spec {folder}/spec.json)")


def register(cli: typer.Typer) -> None:
    cli.command("repro", cls=Command, rich_help_panel="CI client")(repro)
