"""The one `speedwatch` command: every command group registers itself on this Typer app.

| module        | commands                                  |
| ------------- | ----------------------------------------- |
| cli.service   | serve, migrate, token create/revoke/list  |
| cli.submit    | submit (the CI client), demo              |
| cli.policy    | policy show/set                           |
| cli.detect    | detect                                    |
| cli.worker    | worker, beat                              |
| cli.bench     | bench                                     |
| cli.sweep     | sweep, bisect, cancel                     |
"""

from __future__ import annotations

import typer

from cli import bench, detect, policy, service, submit, sweep, worker

cli = typer.Typer(
    name="speedwatch",
    help="Continuous performance-regression service for GPU inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module exposes `register(cli: typer.Typer) -> None`; the order is the help's order.
for _group in (bench, service, submit, sweep, worker, detect, policy):
    _group.register(cli)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
