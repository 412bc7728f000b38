"""The one `speedwatch` command; each part of the product registers its own subcommands.

Subcommand modules import their heavy dependencies (torch, SQLAlchemy, Celery) inside the
command functions, so `speedwatch --help` stays fast and `bench` works without the service.
"""

from __future__ import annotations

import importlib

import typer

cli = typer.Typer(
    name="speedwatch",
    help="Continuous performance-regression service for GPU inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module exposes `register(cli: typer.Typer) -> None`.
_COMMAND_MODULES = (
    "benchmarks.cli",  # bench
    "app.cli_service",  # serve, migrate, token
    "app.cli_client",  # submit (CI client), demo (embedded default)
    "workers.cli",  # worker, beat
    "app.detection.cli",  # detect
    "app.cli_policy",  # policy show|set
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(cli)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
