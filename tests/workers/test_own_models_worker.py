"""A model of the user's through the task body, with real child processes: the worker's
settings say where the model's package is (SPEEDWATCH_MODEL_PATH, handed to the
children) and which packages it imports models from (SPEEDWATCH_MODEL_PACKAGES, checked
again before anything runs)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Result
from app.schemas import RunCreate
from app.services.triggering import create_run
from tests.own_model_files import write_package
from tests.workers.helpers import TINY_TIMING, reload_run
from workers.execution import execute_cell


def _run(session: Session, settings: Settings, model: str) -> tuple[int, int]:
    body: dict[str, Any] = {
        "project": "own-models", "revision": f"r-{secrets.token_hex(4)}",
        "environment": {"pins": []},
        "matrix": {"models": [model], "backends": ["onnxruntime"], "weights": ["constant"],
                   "sides": "paired", "threads": 1, "timing": TINY_TIMING},
    }
    run, created = create_run(session, RunCreate.model_validate(body), settings=settings)
    assert created
    session.commit()
    return run.id, run.cells[0].id


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package lives outside the repository; this process's environment does not name
    it, so only the settings can tell the children where it is."""
    monkeypatch.delenv("SPEEDWATCH_MODEL_PATH", raising=False)
    return write_package(tmp_path / "models")


def test_the_worker_hands_its_model_path_to_the_children_and_stores_the_fingerprinted_key(
    session: Session, settings: Settings, models_dir: Path
) -> None:
    worker = settings.model_copy(update={"model_packages": ["mypkg"],
                                         "model_path": str(models_dir)})
    run_id, cell_id = _run(session, worker, "mypkg.nets:build")
    predicted = reload_run(session, run_id).cells[0].series_key

    assert execute_cell(cell_id, worker) == "done"

    run = reload_run(session, run_id)
    cell = run.cells[0]
    result = session.scalars(select(Result).where(Result.cell_id == cell_id)).one()
    digest = result.fingerprint["model"]["digest"]
    assert predicted.startswith("mypkg.nets:build/onnxruntime/")
    assert cell.series_key == predicted.replace("mypkg.nets:build/",
                                                f"mypkg.nets:build@{digest}/", 1)
    assert result.fingerprint["model"]["source"] == str(models_dir / "mypkg" / "nets.py")
    assert (run.status, run.verdict) == ("done", "pass")


def test_a_package_the_worker_does_not_list_fails_the_cell_without_running_it(
    session: Session, settings: Settings, models_dir: Path
) -> None:
    """The API that took the trigger listed the package; this worker does not: its own
    list is the one that decides what it imports."""
    api = settings.model_copy(update={"model_packages": ["mypkg"]})
    run_id, cell_id = _run(session, api, "mypkg.nets:build")

    assert execute_cell(cell_id, settings.model_copy(update={
        "model_path": str(models_dir)})) == "failed"

    cell = reload_run(session, run_id).cells[0]
    assert (cell.status, cell.attempts) == ("failed", 1)
    assert cell.error == ("model mypkg.nets:build: package 'mypkg' is not one this server "
                          "imports models from (listed in SPEEDWATCH_MODEL_PACKAGES: none)")
    assert session.scalars(select(Result).where(Result.cell_id == cell_id)).first() is None


def test_a_model_the_workers_environment_cannot_import_skips_the_cell_with_the_reason(
    session: Session, settings: Settings, models_dir: Path
) -> None:
    worker = settings.model_copy(update={"model_packages": ["mypkg"]})  # no model path
    run_id, cell_id = _run(session, worker, "mypkg.nets:build")

    assert execute_cell(cell_id, worker) == "skipped"

    run = reload_run(session, run_id)
    reason = ("model mypkg.nets:build: module 'mypkg' is not importable where the cell runs "
              "(install it there, or put the directory that holds it on "
              "SPEEDWATCH_MODEL_PATH; SPEEDWATCH_MODEL_PATH is not set)")
    assert run.cells[0].status == "skipped" and run.cells[0].error == reason
    assert any(r.endswith(f"skipped: {reason}") for r in run.reasons), run.reasons
