"""`speedwatch repro RESULT_ID`: a folder that measures a stored cell again elsewhere.

The bundle holds what the cell was (its spec, whole: model reference, backend, weights,
precision, batch, shape mode, options and timing), what it ran in (the environment's pins
or interpreter and the versions the worker reported installed), where (the fingerprint) and
what it measured (the stored document), and the exact commands: a fresh virtualenv with the
same pins, then `speedwatch bench --spec spec.json`. Comparing the reproduced speedup with
the stored interval says whether the machine at hand sees what the worker saw.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import typer

from cli.client import EXIT_ERROR, Api, ClientError
from cli.help_format import Command


def bundle_files(result: dict[str, Any], url: str) -> dict[str, str]:
    """The bundle's files by name (text), from `GET /api/v1/results/{id}`."""
    document = result["document"]
    spec = document["spec"]
    pins = list(result.get("pins") or [])
    interpreter = result.get("interpreter")
    speedup = document.get("speedup") or {}
    fingerprint = document.get("fingerprint") or {}
    extra = "bench" if spec.get("backend") in ("eager", "inductor", "onnxruntime") else "all"
    package = f'"${{SPEEDWATCH_PACKAGE:-speedwatch[{extra}]}}"'
    install = "pip install " + " ".join([package, *(shlex.quote(p) for p in pins)])
    lines = [
        "#!/usr/bin/env bash",
        f"# Measures result {result['result_id']} of {result['project']} @ "
        f"{result['revision']} again, here.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        "# SPEEDWATCH_PACKAGE: where speedwatch comes from when not from your index (a",
        f"# checkout: SPEEDWATCH_PACKAGE='/path/to/speedwatch[{extra}]')",
        install,
        "speedwatch bench --spec spec.json --json reproduced.json",
    ]
    if interpreter:
        lines.insert(4, f"# the cell ran in the worker's interpreter {interpreter!r}: "
                        "use one with the same packages (environment.json) instead of pins")
    stored = (f"{speedup['value']:.3f}x [{speedup['ci_low']:.3f}, {speedup['ci_high']:.3f}]"
              if speedup else f"no speedup ({document.get('status')}: "
                              f"{document.get('reason')})")
    where = ", ".join(str(fingerprint[k]) for k in ("device_class", "gpu", "cpu", "hostname")
                      if fingerprint.get(k))
    readme = "\n".join([
        f"# Reproduce result {result['result_id']}",
        "",
        f"Series `{result['series_key']}`, project {result['project']}, revision "
        f"{result['revision']}, run {result['run_id']} on {url}.",
        "",
        f"Stored: {stored} on {where or 'an unrecorded machine'}.",
        "",
        "```bash",
        "bash repro.sh   # a virtualenv with the same pins, then the exact spec",
        "```",
        "",
        "`reproduced.json` then holds the speedup measured here; inside the stored "
        "interval means this machine sees what the worker saw. `spec.json` is the cell "
        "(model, backend, weights, precision, batch, options, timing), `environment.json` "
        "what it ran in, `fingerprint.json` where, `result.json` the stored result.",
        "",
    ])
    environment = {"pins": pins, "interpreter": interpreter,
                   "installed": result.get("installed") or {}}
    return {
        "spec.json": json.dumps(spec, indent=1, sort_keys=True) + "\n",
        "environment.json": json.dumps(environment, indent=1, sort_keys=True) + "\n",
        "fingerprint.json": json.dumps(fingerprint, indent=1, sort_keys=True) + "\n",
        "result.json": json.dumps(document, indent=1) + "\n",
        "repro.sh": "\n".join(lines) + "\n",
        "README.md": readme,
    }


def repro(
    result_id: int = typer.Argument(..., min=1, help="The stored result's id (run pages and "
                                    "regressions show it)."),
    url: str = typer.Option(..., envvar="SPEEDWATCH_URL", help="Server, e.g. http://host:8000."),
    token: str | None = typer.Option(None, envvar="SPEEDWATCH_TOKEN",
                                     help="Token with the read scope (if reads are private)."),
    out: Path | None = typer.Option(None, "--out", help="Folder to write (default: "
                                    "repro-RESULT_ID); it must not exist yet."),
) -> None:
    """Write a folder that measures a stored result's cell again on this machine."""
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
