"""Which commands need which extra, so a client-only install says what to install.

`pip install speedwatch` is the CI client (submit, report, policy, sweep, bisect, cancel,
detect); the service and the measurement core are extras. A command that needs one fails
in one line naming the install that brings it, never with an ImportError traceback.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Literal, TypeVar

import typer

Extra = Literal["server", "bench", "all"]

# The modules whose absence tells that an extra is missing (one of each is enough).
_MODULES: dict[Extra, tuple[str, ...]] = {
    "server": ("fastapi", "sqlalchemy", "alembic", "celery", "uvicorn"),
    "bench": ("torch", "onnx", "onnxruntime"),
    "all": ("fastapi", "sqlalchemy", "alembic", "celery", "uvicorn", "torch", "onnx",
            "onnxruntime"),
}

F = TypeVar("F", bound=Callable[..., object])


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken or half-removed install counts as absent
        return False


def missing(extra: Extra) -> list[str]:
    return [name for name in _MODULES[extra] if not _installed(name)]


def require(extra: Extra, command: str) -> None:
    """Exit 2 with one line when this install lacks what `command` needs."""
    absent = missing(extra)
    if absent:
        typer.echo(f"error: `speedwatch {command}` needs {', '.join(absent)}, which this "
                   f"install lacks: pip install 'speedwatch[{extra}]'", err=True)
        raise typer.Exit(2)


def needs(extra: Extra, command: str) -> Callable[[F], F]:
    """Decorate a command's function; Typer reads the wrapped signature (functools.wraps)."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: object, **kwargs: object) -> object:
            require(extra, command)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
