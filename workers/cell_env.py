"""What a claimed cell runs in and how its failures read: its run's environment (pins or
a named interpreter) resolved to a Python, the worker's model path, what the child found
installed written beside what the cell asked for, and a reason a person can act on.
Shared by the cell body (workers.execution) and the confirmation body (workers.confirm)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.config import Settings

MAX_REASON = 2000
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CellEnvironment:
    """What the claimed cell runs in, read from its run's environment."""

    run_id: int
    pins: list[str]
    interpreter: str | None


def model_refusal(model: str, settings: Settings) -> str | None:
    """Why this worker does not build the cell's model, as the cell's reason, or None
    (app.environment_policy.model_refusal, against this worker's own settings)."""
    from app.environment_policy import model_refusal as refusal_of

    why = refusal_of(model, settings.model_packages)
    return None if why is None else f"model {model}: {why}"


def model_env(settings: Settings) -> dict[str, str]:
    """The environment a cell's children get beyond the worker's own: the model path the
    settings hold (benchmarks.own_models reads it), even when it differs from this
    process's variable (settings built in code, the local executor's)."""
    return {"SPEEDWATCH_MODEL_PATH": settings.model_path}


def start_fork_server_ahead(settings: Settings, devices: Iterable[str]) -> bool:
    """Start (without waiting) the warm server this thread's cells on `devices` will fork
    their processes from, where any of them forks (benchmarks.forkserver.setting: GPU
    cells by default, on a host with a GPU); whether one was started. One server serves
    them all (the default environment's). Never raises: the first child starts a server,
    or starts fresh, as before."""
    try:
        from benchmarks.children import start_fork_server
        from benchmarks.fingerprint import visible_gpus

        kinds = sorted({"cpu" if device == "cpu" else "cuda" for device in devices})
        for kind in kinds:
            if kind == "cuda" and not visible_gpus():
                continue
            if start_fork_server(kind, python=resolve_python([], None, settings),
                                 env=model_env(settings), cwd=None):
                return True
        return False
    except Exception as exc:
        log.warning("no warm server started ahead of the first cell: %s", exc)
        return False


def resolve_python(
    pins: list[str], interpreter: str | None, settings: Settings | None = None
) -> str:
    """The interpreter for an environment: a named one from settings (as the policy allows),
    or a cached venv."""
    from app.config import get_settings
    from app.environment_policy import InterpreterError, named_interpreter
    from workers.environments import EnvironmentBuildError, materialize

    settings = settings or get_settings()
    if interpreter:
        try:
            return named_interpreter(interpreter, pins, settings.interpreters)
        except InterpreterError as exc:  # a cell's reason names the build step that refused
            raise EnvironmentBuildError(str(exc)) from None
    return materialize(pins, allowlist=settings.env_allowlist,
                       cache_dir=settings.venv_cache_dir,
                       max_bytes=settings.venv_cache_max_bytes)


def run_of(session: Any, cell_id: int) -> int | None:
    from app.models import Cell

    cell = session.get(Cell, cell_id)
    return None if cell is None else int(cell.run_id)


def cell_environment(session: Any, cell_id: int) -> CellEnvironment:
    from app.models import Cell

    cell = session.get(Cell, cell_id)
    environment = cell.run.environment
    return CellEnvironment(
        run_id=cell.run_id,
        pins=list(environment.pins or []),
        interpreter=environment.interpreter,
    )


def annotate(result: Any, env: CellEnvironment, python: str) -> None:
    """Store what the cell asked for beside what the child found installed."""
    from app.environment_policy import normalize_name
    from workers.environments import build_record, installed_versions

    fingerprint = result.fingerprint
    fingerprint["environment"] = {
        "requested": env.pins, "interpreter": env.interpreter, "python": python,
    }
    build = build_record(python)
    if build is not None:
        fingerprint["environment"]["build"] = build
    if env.pins:
        installed = installed_versions(python)
        packages = dict(fingerprint.get("packages") or {})
        for pin in env.pins:
            name = normalize_name(pin.split("==")[0])
            if name in installed:
                packages[name] = installed[name]
        fingerprint["packages"] = packages


def failure_reason(exc: BaseException) -> str:
    text = str(exc).strip() or "".join(traceback.format_exception_only(type(exc), exc)).strip()
    reason = f"{type(exc).__name__}: {text}"
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."
