"""Database engines, sessions and schema migration.

One engine per database URL per process. PostgreSQL connections get a connect timeout and a
statement timeout so an outage or a runaway query surfaces as an error (the API turns it into
a 503) instead of a hang; `pool_pre_ping` drops connections the server closed while idle.
SQLite (the embedded default) gets foreign keys and a busy timeout, because the local executor
writes from worker threads while the API reads.

The schema belongs to Alembic (migrations/); nothing here calls `create_all`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.config import Settings, get_settings

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def normalize_database_url(url: str) -> str:
    """Use the psycopg 3 driver for plain postgresql:// URLs (psycopg2 is not installed)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(settings: Settings) -> Engine:
    """A new engine for `settings.database_url`; prefer `get_engine` outside tests."""
    url = make_url(normalize_database_url(settings.database_url))
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {
            "connect_timeout": settings.db_connect_timeout_seconds,
            "options": f"-c statement_timeout={settings.db_statement_timeout_ms}",
        }
        kwargs["pool_size"] = settings.db_pool_size
        kwargs["max_overflow"] = settings.db_pool_size * 2
        kwargs["pool_timeout"] = settings.db_connect_timeout_seconds
    elif url.get_backend_name() == "sqlite":
        _ensure_sqlite_directory(str(url))
        kwargs["connect_args"] = {
            "check_same_thread": False,
            "timeout": settings.db_connect_timeout_seconds,
        }
    engine = create_engine(url, **kwargs)
    if url.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
    return engine


def _ensure_sqlite_directory(database_url: str) -> None:
    """The embedded default lives in ./var/, which a fresh clone does not have yet."""
    url = make_url(database_url)
    database = url.database
    if url.get_backend_name() == "sqlite" and database and database != ":memory:" \
            and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # pysqlite opens transactions lazily and not for SAVEPOINT, which breaks the savepoints
    # the services use for get-or-create; take over transaction control (SQLAlchemy's
    # documented recipe) and emit BEGIN ourselves in _sqlite_begin.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    # IMMEDIATE: a transaction takes the write lock when it begins, waiting out the busy
    # timeout for it. A deferred one that read first and wrote later failed at once with
    # "database is locked" whenever another process had written in between (SQLite cannot
    # wait there without risking a deadlock): with four fleet workers and the API on one
    # file, a cell's task failed so. Reads take the lock too (a session always begins a
    # transaction); every transaction here is short.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def get_engine(settings: Settings | None = None) -> Engine:
    """The shared engine for the settings' database URL (created on first use)."""
    settings = settings or get_settings()
    with _engines_lock:
        engine = _engines.get(settings.database_url)
        if engine is None:
            engine = make_engine(settings)
            _engines[settings.database_url] = engine
        return engine


def dispose_engines() -> None:
    """Close every pooled connection (tests, and before forking worker processes)."""
    with _engines_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def SessionLocal(settings: Settings | None = None) -> Session:
    """A new session on the shared engine (CamelCase name kept from the contract).

    `expire_on_commit=False`: objects stay readable after commit, so a task can commit and
    then log or enqueue what it wrote without another round trip.
    """
    return Session(bind=get_engine(settings), expire_on_commit=False)


@contextmanager
def session_scope(settings: Settings | None = None) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any exception, always close."""
    session = SessionLocal(settings)
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# ---- migrations -------------------------------------------------------------------------

def migrations_dir() -> Path:
    """The installed `migrations` package; found by import, so no reliance on the CWD."""
    import migrations

    return Path(migrations.__file__).resolve().parent


def alembic_config(database_url: str) -> Any:
    """An Alembic Config built in code (no alembic.ini) for `database_url`."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Passed as an attribute, not a main option: configparser would mangle '%' in passwords.
    config.attributes["database_url"] = normalize_database_url(database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    from alembic import command

    _ensure_sqlite_directory(database_url)
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(database_url), revision)


@functools.lru_cache(maxsize=1)
def head_revision() -> str | None:
    """The newest migration this code ships (what `speedwatch migrate` upgrades to)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def schema_revision(connection: Any) -> str | None:
    """The revision the database is at; None when it was never migrated."""
    from alembic.runtime.migration import MigrationContext

    revision: str | None = MigrationContext.configure(connection).get_current_revision()
    return revision


def schema_problem(connection: Any) -> str | None:
    """One line saying the schema is not what this code needs, or None when it is."""
    current, head = schema_revision(connection), head_revision()
    if current == head:
        return None
    at = f"is at schema revision {current}" if current else "was never migrated"
    return f"the database {at}, this server needs revision {head}: run `speedwatch migrate`"
