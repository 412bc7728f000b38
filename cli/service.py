"""Service commands: `serve` (API), `migrate` (Alembic upgrade head), `token` (create/revoke/list).

Heavy imports stay inside the commands so `speedwatch --help` stays fast. Errors end with
exit code 1 and a one-line reason, never a traceback.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

import typer

from cli.extras import needs, require
from cli.help_format import Command

if TYPE_CHECKING:
    from app.config import Settings

token_cli = typer.Typer(help="API tokens (stored hashed; the plaintext is shown once).",
                        no_args_is_help=True)


@token_cli.callback()
def _token_needs_the_server() -> None:
    require("server", "token")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=1)


def _database_error_reason(exc: Exception) -> str | None:
    from app.errors import DATABASE_ERRORS, database_reason, schema_missing

    if schema_missing(exc):
        return database_reason(exc)
    if isinstance(exc, DATABASE_ERRORS):
        return f"database unavailable: {database_reason(exc)}"
    return None


def _schema_ready_or_exit(settings: Settings) -> None:
    """Refuse to serve a database this code cannot use (one line naming the fix); one that
    cannot be reached yet is only warned about, since it may come up after the API."""
    from app.db import make_engine, schema_problem

    # the service's own engine, so SPEEDWATCH_DB_CONNECT_TIMEOUT_SECONDS bounds this check too
    # (a database that accepts connections and never answers held startup for minutes)
    engine = make_engine(settings)
    try:
        with engine.connect() as connection:
            problem = schema_problem(connection)
    except Exception as exc:
        typer.echo(f"warning: {_database_error_reason(exc) or exc}; serving anyway", err=True)
        return
    finally:
        engine.dispose()
    if problem is not None:
        raise _fail(f"{problem} (or start with `speedwatch serve --migrate`)")


def serve(
    host: Annotated[str | None, typer.Option(help="bind address (default: settings.host)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default: settings.port)")] = None,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes")] = 1,
    migrate_first: Annotated[
        bool | None,
        typer.Option("--migrate/--no-migrate",
                     help="upgrade the schema first (default: only for the SQLite embedded "
                          "default; production migrates as its own step)"),
    ] = None,
) -> None:
    """Run the API (OpenAPI docs at /docs)."""
    import uvicorn

    settings = settings_or_exit()
    if migrate_first is None:
        migrate_first = settings.database_url.startswith("sqlite")
    if migrate_first:
        _migrate(settings.database_url)
    else:
        _schema_ready_or_exit(settings)
    bind_host = host or settings.host
    bind_port = port or settings.port
    typer.echo(f"speedwatch on http://{bind_host}:{bind_port}: dashboard at /, API docs at /docs")
    uvicorn.run("app.main:create_served_app", factory=True, host=bind_host, port=bind_port,
                workers=workers, log_level="info")


def migrate() -> None:
    """Upgrade the database schema to the newest revision (idempotent)."""
    settings = settings_or_exit()
    _migrate(settings.database_url)
    typer.echo("database schema is at head")


def _migrate(database_url: str) -> None:
    from app.db import upgrade

    try:
        upgrade(database_url)
    except Exception as exc:
        reason = _database_error_reason(exc)
        raise _fail(reason or f"migration failed: {exc}") from None


def settings_or_exit() -> Settings:
    """The settings, or exit 1 with the first problem in one line (no traceback)."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from app.config import get_settings

    try:
        return get_settings()
    except (ValidationError, SettingsError) as exc:
        raise _fail(settings_error_line(exc)) from None


def _is_secret(field: str) -> bool:
    """A secret setting's value is never echoed (the line may land in a CI log)."""
    from pydantic import SecretStr

    from app.config import Settings

    info = Settings.model_fields.get(field)
    return info is not None and SecretStr in getattr(info.annotation, "__args__", (
        info.annotation,))


def settings_error_line(exc: Exception) -> str:
    """A settings validation error as one line naming the variable and the value read."""
    parsed = re.search(r'error parsing value for field "(\w+)"', str(exc))
    if parsed:  # pydantic-settings' SettingsError: a JSON value that does not parse
        cause = exc.__cause__
        why = f": {str(cause).splitlines()[0]}" if cause else ""
        return f"settings: SPEEDWATCH_{parsed.group(1).upper()} is not valid JSON{why}"
    errors = exc.errors() if hasattr(exc, "errors") else []
    if not errors:
        return f"settings: {exc}"
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "__root__"]
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if not loc:
        return f"settings: {message}{more}"
    variable = "SPEEDWATCH_" + loc[0].upper()
    value = first.get("input")
    secret = _is_secret(loc[0])
    shown = f"={value!r}" if isinstance(value, (str, int, float)) and not secret else ""
    path = "." + ".".join(loc[1:]) if len(loc) > 1 else ""
    return f"settings: {variable}{shown}{path}: {message}{more}"


@token_cli.command("create", cls=Command)
def token_create(
    scope: Annotated[str, typer.Option(help="read | ci | admin (admin implies all)")],
    name: Annotated[str | None, typer.Option(help="a label to recognise it by")] = None,
    project: Annotated[list[str] | None, typer.Option(
        "--project", help="limit the token to this project (repeat for several; it need not "
                          "exist yet); left out: every project")] = None,
) -> None:
    """Create a token and print it once; only its hash is stored."""
    settings_or_exit()
    from app.db import session_scope
    from app.errors import SpeedwatchError
    from app.services.tokens import create_token

    try:
        with session_scope() as session:
            token, plaintext = create_token(session, scope, name, project or None)
            token_id, token_name, limited = token.id, token.name, token.projects
    except SpeedwatchError as exc:
        raise _fail(exc.message) from None
    except Exception as exc:
        raise _fail(_database_error_reason(exc) or str(exc)) from None
    reach = f"project(s) {', '.join(limited)}" if limited else "every project"
    typer.echo(f"token {token_id} ({token_name}, scope {scope}, {reach}); store it now, it "
               "is not shown again:", err=True)
    typer.echo(plaintext)


@token_cli.command("revoke", cls=Command)
def token_revoke(token_id: Annotated[int, typer.Argument(help="id shown by `token list`")]) -> None:
    """Revoke a token; requests with it get 401 from now on."""
    settings_or_exit()
    from app.db import session_scope
    from app.errors import SpeedwatchError
    from app.services.tokens import revoke_token

    try:
        with session_scope() as session:
            revoke_token(session, token_id)
    except SpeedwatchError as exc:
        raise _fail(exc.message) from None
    except Exception as exc:
        raise _fail(_database_error_reason(exc) or str(exc)) from None
    typer.echo(f"token {token_id} revoked")


@token_cli.command("list", cls=Command)
def token_list() -> None:
    """List tokens (never their values)."""
    settings_or_exit()
    from app.db import session_scope
    from app.services.tokens import list_tokens

    try:
        with session_scope() as session:
            rows = [(t.id, t.name, ",".join(t.scopes), t.created_at, t.revoked_at,
                     t.last_used_at, t.projects) for t in list_tokens(session)]
    except Exception as exc:
        raise _fail(_database_error_reason(exc) or str(exc)) from None
    for token_id, name, scopes, created, revoked, used, projects in rows:
        state = f"revoked {revoked:%Y-%m-%d %H:%M}" if revoked else "active"
        last = f"{used:%Y-%m-%d %H:%M}" if used else "never"
        reach = f"projects {','.join(projects)}" if projects else "all projects"
        typer.echo(f"{token_id}\t{name}\t{scopes}\t{state}\tcreated {created:%Y-%m-%d %H:%M}"
                   f"\tlast used {last}\t{reach}")


def register(cli: typer.Typer) -> None:
    panel = "Service"
    cli.command("serve", cls=Command, rich_help_panel=panel)(needs("server", "serve")(serve))
    cli.command("migrate", cls=Command, rich_help_panel=panel)(needs("server", "migrate")(
        migrate))
    cli.add_typer(token_cli, name="token", rich_help_panel="Service")
