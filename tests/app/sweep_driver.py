"""Drive a bisect (or sweep) without measuring: each step's cells get a result document
with the speedup a function of its pins decides, stored through the workers' own calls
(`record_result`, `finish_run_if_complete`), so the bisect chooses its next step exactly as
it does after a real measurement. The releases come from a wheel directory pip reads
(tests.workers.wheels), as in production they come from the index.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import session_scope
from app.models import Cell, Run, Sweep
from app.services.runs import claim_cell, fail_cell, finish_run_if_complete, record_result
from benchmarks.spec import BenchSpec
from tests.app.detection_docs import measured
from tests.workers.wheels import use_only, write_releases
from workers import dispatch

# pins -> the speedup measured in that environment; None: the step could not be measured
Speedups = Callable[[dict[str, str]], float | None]


def releases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             packages: dict[str, list[str]]) -> None:
    """Wheels of each package's releases in one directory pip alone reads."""
    wheels = tmp_path / "wheels"
    for name, versions in packages.items():
        write_releases(wheels, name, versions, {})
    use_only(monkeypatch, wheels)


def allowing(settings: Settings, *names: str) -> Settings:
    """`settings` with `names` allowlisted, and pip's index wired in (as an API process
    wires it at start-up)."""
    dispatch.install()
    return settings.model_copy(update={"env_allowlist": [*settings.env_allowlist, *names]})


def measure_step(session: Session, run: Run, speedup: float | None,
                 settings: Settings) -> None:
    """Store the run's cells as measured at `speedup` (or failed), then finish the run."""
    pins = dict(p.split("==") for p in run.environment.pins)
    for cell in session.scalars(select(Cell).where(Cell.run_id == run.id)):
        if claim_cell(session, cell.id) is None:
            continue
        if speedup is None:
            fail_cell(session, cell.id, "EnvironmentBuildError: no wheel for this platform")
        else:
            record_result(session, cell.id, measured(
                speedup, spec=BenchSpec.from_dict(cell.spec), packages=pins))
    finish_run_if_complete(session, run.id, settings=settings)


def drive(settings: Settings, sweep_id: int, speedup_of: Speedups, *,
          limit: int = 50) -> Sweep:
    """Measure the sweep's unfinished runs, one commit each, until it ends; its final row."""
    for _ in range(limit):
        with session_scope(settings) as session:
            sweep = session.get(Sweep, sweep_id)
            assert sweep is not None
            if sweep.status != "running":
                session.expunge(sweep)
                return sweep
            run = session.scalars(select(Run).where(
                Run.sweep_id == sweep_id, Run.status.in_(("queued", "running")))
                .order_by(Run.id)).unique().first()
            assert run is not None, "a running sweep with nothing left to measure"
            measure_step(session, run, speedup_of(
                dict(p.split("==") for p in run.environment.pins)), settings)
    raise AssertionError(f"sweep {sweep_id} did not end within {limit} runs")
