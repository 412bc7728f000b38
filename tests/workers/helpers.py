"""Small runs for the worker tests: tiny ResNets and few rounds, so a cell takes seconds."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Cell, Run
from app.schemas import RunCreate
from app.services.common import spec_hash
from app.services.triggering import create_run
from benchmarks.spec import BenchSpec

# One process per cell, both sides in it (sides "paired", not the CPU default "split",
# which takes two) and no time-based warm-up: these tests are about the life cycle of
# cells, not about timing (adaptive measurement and split sides have their own tests, and
# the end-to-end tests keep the defaults).
TINY_TIMING = {"warmup_iters": 1, "rounds": 3, "min_rounds": 2, "iters_per_round": 2,
               "bootstrap_resamples": 200, "processes": 1, "max_processes": 1,
               "warmup_seconds": 0}


def tiny_request(
    *, backends: list[str] | None = None, weights: list[str] | None = None,
    revision: str = "r1", pins: list[str] | None = None, interpreter: str | None = None,
    project: str = "workers",
) -> dict[str, Any]:
    environment: dict[str, Any] = (
        {"interpreter": interpreter} if interpreter else {"pins": pins or []}
    )
    return {
        "project": project, "revision": revision, "environment": environment,
        "matrix": {"models": ["resnet18"], "backends": backends or ["onnxruntime"],
                   "weights": weights or ["constant"], "width": 8, "image_size": 32,
                   "sides": "paired", "timing": TINY_TIMING},
    }


def new_run(session: Session, settings: Settings, **kwargs: Any) -> tuple[int, list[int]]:
    """Create and commit a run (nothing is enqueued); returns (run id, cell ids)."""
    run, created = create_run(session, RunCreate.model_validate(tiny_request(**kwargs)),
                              settings=settings)
    assert created
    session.commit()
    return run.id, [c.id for c in run.cells]


def inject_fault(session: Session, cell_id: int, fault: str) -> None:
    """Make the cell's child fail on purpose (honoured only with SPEEDWATCH_ALLOW_FAULTS=1)."""
    cell = session.get(Cell, cell_id)
    assert cell is not None
    spec = BenchSpec.from_dict(cell.spec)
    spec = BenchSpec.from_dict({**spec.to_dict(), "options": {"_fault": fault}})
    cell.spec = spec.to_dict()
    cell.spec_hash = spec_hash(spec)
    session.commit()


def reload_run(session: Session, run_id: int) -> Run:
    session.expire_all()
    run = session.get(Run, run_id)
    assert run is not None
    return run
