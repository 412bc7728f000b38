"""The one `speedwatch` command: every command group registers itself on this Typer app.

| module        | commands                                  |
| ------------- | ----------------------------------------- |
| cli.service   | serve, migrate, token create/revoke/list  |
| cli.submit    | submit (the CI client), demo              |
| cli.report    | report (compare two revisions)            |
| cli.upload    | upload (results measured elsewhere)       |
| cli.repro     | repro (a folder that measures a result again) |
| cli.policy    | policy show/set                           |
| cli.detect    | detect                                    |
| cli.worker    | worker, beat                              |
| cli.bench     | bench                                     |
| cli.sweep     | sweep, bisect, cancel                     |
"""

from __future__ import annotations

import typer

from cli import bench, detect, policy, report, repro, service, submit, sweep, upload, worker


def _settings_epilog() -> str:
    """Every setting's environment variable, from the settings class itself (so the list
    cannot go stale); docs/configuration.md says what each one does."""
    from app.config import Settings

    names = ", ".join(f"SPEEDWATCH_{name.upper()}" for name in Settings.model_fields)
    return (f"Settings are environment variables: {names}. "
            "What each does: docs/configuration.md.")


cli = typer.Typer(
    name="speedwatch",
    help="Continuous performance-regression service for GPU inference.",
    epilog=_settings_epilog(),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module exposes `register(cli: typer.Typer) -> None`; the order is the help's order.
for _group in (bench, service, submit, report, upload, repro, sweep, worker, detect, policy):
    _group.register(cli)


def main() -> None:
    """Run the CLI; a bad setting met anywhere (a command reads the settings late, or a
    module reads them on import) ends in one line naming the variable, not a traceback."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from cli.client import EXIT_ERROR, ClientError

    try:
        cli()
    except ClientError as exc:  # one a command did not catch itself (a bad token's)
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_ERROR) from None
    except (ValidationError, SettingsError) as exc:
        if isinstance(exc, ValidationError) and exc.title != "Settings":
            raise
        typer.echo(f"error: {service.settings_error_line(exc)}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
