"""Cancelling a sweep stops cells that are already measuring: the in-process executor
measures a sweep's releases for real (pip installs from a wheel directory the test wrote,
benchmark children on a tiny ResNet), and a cancel while the first child runs ends every
cell after the child it is in, failed with the reason, instead of letting the group take
all its processes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select

from app.config import Settings
from app.db import session_scope
from app.models import Cell, Run, Sweep
from app.schemas import SweepCreate
from app.services.sweeps import cancel_sweep, create_sweep, stop_queued, unsent_cells
from app.services.triggering import enqueue
from tests.workers.wheels import use_only, write_releases
from workers import dispatch
from workers.local import get_local_executor

PKG = "swcancel"
# Six processes a cell if nothing stops it (three releases, one cell each: 18 children).
TIMING = {"warmup_iters": 2, "rounds": 20, "min_rounds": 20, "iters_per_round": 5,
          "bootstrap_resamples": 200, "processes": 6, "max_processes": 6,
          "warmup_seconds": 0}


@pytest.mark.slow
def test_a_cancel_stops_the_cells_measuring_after_their_current_child(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_releases(tmp_path / "wheels", PKG, ["1.0", "1.1", "1.2"], {})
    use_only(monkeypatch, tmp_path / "wheels")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    dispatch.install()
    local = settings.model_copy(update={
        "executor": "local", "venv_cache_dir": tmp_path / "venvs",
        "env_allowlist": [*settings.env_allowlist, PKG]})
    with session_scope(local) as session:
        sweep = create_sweep(session, SweepCreate.model_validate({
            "project": "cancel-measured", "package": PKG, "from_version": "1.0",
            "to_version": "1.2", "matrix": {
                "models": ["resnet18"], "backends": ["onnxruntime"], "width": 8,
                "image_size": 32, "sides": "paired", "threads": 1, "timing": TIMING}}),
            settings=local)
        sweep_id = sweep.id
    with session_scope(local) as session:
        assert enqueue(session, unsent_cells(session, sweep_id), local) is None

    deadline = time.monotonic() + 90
    while True:  # the group's cells are claimed and the first child is measuring
        with session_scope(local) as session:
            statuses = set(session.scalars(select(Cell.status).join(
                Run, Run.id == Cell.run_id).where(Run.sweep_id == sweep_id)))
        if statuses == {"running"}:
            break
        assert time.monotonic() < deadline, statuses
        time.sleep(0.2)
    cancelled_at = time.monotonic()
    with session_scope(local) as session:
        cancel_sweep(session, sweep_id, "test")
    with session_scope(local) as session:
        assert stop_queued(session, sweep_id, local) == 0  # nothing was left queued

    assert get_local_executor().wait_idle(timeout_s=120)
    stopped_after = time.monotonic() - cancelled_at
    with session_scope(local) as session:
        cells = session.scalars(select(Cell).join(Run, Run.id == Cell.run_id)
                                .where(Run.sweep_id == sweep_id).order_by(Cell.id)).all()
        assert [c.status for c in cells] == ["failed"] * 3
        for cell in cells:
            assert cell.error is not None
            assert f"cancelled: sweep {sweep_id} was cancelled while this cell was " \
                   "measuring" in cell.error
        # at most the child running at the cancel and its turn-mates: far from 6 each
        assert all("(after 0 processes)" in c.error or "(after 1 processes)" in c.error
                   for c in cells), [c.error for c in cells]
        runs = session.scalars(select(Run).where(Run.sweep_id == sweep_id)).unique().all()
        assert {r.status for r in runs} == {"failed"}
        row = session.get(Sweep, sweep_id)
        assert row is not None and row.status == "cancelled"
    print(f"\nall cells stopped {stopped_after:.1f} s after the cancel")
