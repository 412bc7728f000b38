"""A GPU regression on a fleet is confirmed on several GPUs of its class at once, on real
PostgreSQL: one confirmation pair per GPU, each sent to one worker's own queue (the GPU
that measured the suspect result first), and the verdict says on how many GPUs it
reproduces. Results are recorded through the worker's own calls, as in
tests/app/test_confirmation.py; tests/workers/test_direct_queue.py sends a cell to one
worker's own queue through a real Celery worker.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Cell, Regression, Run
from app.schemas import RunCreate
from app.services import confirmation, triggering
from app.services import runs as run_service
from app.services.workers import Announcement, direct_queue, heartbeat
from devkit.factories import bench_result, run_request
from tests.app.test_confirmation import local, sent  # noqa: F401 (fixtures)

GPU = {"weights": ["constant"], "device": "cuda", "precisions": ["fp16"]}
OLD_ENV = {"pins": ["onnxruntime==1.22.0"]}
NEW_ENV = {"pins": ["onnxruntime==1.23.0"]}
H100 = "NVIDIA H100 80GB HBM3"


def workers(session: Session, queue: str, gpus: list[int], host: str = "host-a") -> list[str]:
    """Live fleet workers, one per GPU, announcing `queue` and their own queue."""
    names = []
    for index in gpus:
        name = f"speedwatch-gpu{index}-nvidia-h100@{host}"
        heartbeat(session, Announcement(
            name=name, host=host, pid=1000 + index, queues=[queue, direct_queue(name)],
            gpus=[{"index": index, "name": H100, "device_class": "nvidia-h100"}]))
        names.append(name)
    session.commit()
    return names


def gpu_run(session: Session, settings: Settings, revision: str, speedup: float,
            environment: dict[str, Any], gpu_index: int = 0, host: str = "host-a") -> Run:
    run, _ = triggering.create_run(session, RunCreate.model_validate(run_request(
        revision=revision, environment=environment, matrix=GPU)), settings=settings)
    session.commit()
    cell = run.cells[0]
    spec = run_service.claim_cell(session, cell.id, settings=settings)
    assert spec is not None
    run_service.record_result(session, cell.id, on_gpu(spec, speedup, gpu_index, host))
    run_service.finish_run_if_complete(session, run.id, settings=settings)
    session.commit()
    session.refresh(run)
    return run


def on_gpu(spec: Any, speedup: float, gpu_index: int, host: str = "host-a") -> Any:
    result = bench_result(spec, speedup=speedup, device_class="nvidia-h100")
    result.fingerprint.update({"gpu": H100, "gpu_index": gpu_index, "hostname": host,
                               "device_class": "nvidia-h100"})
    return result


def sides(session: Session, run: Run) -> dict[str, list[Cell]]:
    found = session.scalars(select(Run).join(Cell, Cell.id == Run.confirms_cell_id)
                            .where(Cell.run_id == run.id)).unique().all()
    return {confirmation.side_of(r): sorted(r.cells, key=lambda c: c.id) for r in found}


def remeasure(session: Session, settings: Settings, run: Run,
              pairs: list[tuple[int, float, float]]) -> None:
    """Each pair's results: (GPU index, candidate speedup, baseline speedup)."""
    cells = sides(session, run)
    for i, (gpu_index, cand, base) in enumerate(pairs):
        for side, value in (("candidate", cand), ("baseline", base)):
            cell = cells[side][i]
            spec = run_service.claim_cell(session, cell.id, settings=settings)
            assert spec is not None
            run_service.record_result(session, cell.id, on_gpu(spec, value, gpu_index))
            session.commit()
    for confirm in {c.run_id for side in cells.values() for c in side}:
        run_service.finish_run_if_complete(session, confirm, settings=settings)
        session.commit()
    session.refresh(run)


def test_a_fleet_confirms_on_two_gpus_first_the_one_that_measured_the_drop(
    session: Session, local: Settings, sent: list[tuple[int, str]]  # noqa: F811
) -> None:
    gpu_run(session, local, "v1", 2.0, OLD_ENV)
    queue = session.scalars(select(Cell.queue)).first()
    assert queue is not None
    gpu0, gpu1, _ = workers(session, queue, [0, 1, 2])
    run = gpu_run(session, local, "v2", 1.6, NEW_ENV, gpu_index=1)

    cells = sides(session, run)
    assert [c.queue for c in cells["candidate"]] == [direct_queue(gpu1), direct_queue(gpu0)]
    assert [c.queue for c in cells["baseline"]] == [direct_queue(gpu1), direct_queue(gpu0)]
    # both pairs are sent at once, each to its GPU; each pair's task measures both sides
    assert sent == [(c.id, c.queue) for c in cells["candidate"]]
    pair = confirmation.confirmation_pair(session, cells["baseline"][1].id)
    assert pair == confirmation.ConfirmationPair(cells["candidate"][1].id,
                                                 cells["baseline"][1].id)


def test_a_drop_on_both_gpus_opens_the_alert_saying_it_reproduces_on_2_of_2(
    session: Session, local: Settings, sent: list[tuple[int, str]]  # noqa: F811
) -> None:
    gpu_run(session, local, "v1", 2.0, OLD_ENV)
    workers(session, session.scalars(select(Cell.queue)).one(), [0, 1])
    run = gpu_run(session, local, "v2", 1.6, NEW_ENV, gpu_index=0)
    remeasure(session, local, run, [(0, 1.6, 2.0), (1, 1.61, 2.01)])

    assert (run.status, run.verdict) == ("done", "regression")
    says = "confirmed by re-measure: reproduces on 2 of 2 H100s (GPU 0 of host-a, GPU 1 of " \
        "host-a): speedup 2.00x -> 1.60x"
    assert any(says in r for r in run.reasons), "\n".join(run.reasons)
    [regression] = session.scalars(select(Regression)).unique().all()
    assert regression.status == "open"
    assert any("reproduces on 2 of 2 H100s" in r for r in regression.reasons)


@pytest.mark.parametrize(("pairs", "verdict", "says"), [
    # one GPU shows the drop, one does not: the alert opens, saying so
    ([(0, 1.6, 2.0), (1, 1.99, 2.0)], "regression", "reproduces on 1 of 2 H100s (GPU 0 of "),
    # neither: a drop the first measurement alone saw
    ([(0, 1.98, 2.0), (1, 1.99, 2.0)], "pass", "regression not confirmed: re-measure shows "
     "reproduces on 0 of 2 H100s: speedup 2.00x -> 1.98x"),
])
def test_the_verdict_counts_the_gpus_the_drop_reproduces_on(
    session: Session, local: Settings, sent: list[tuple[int, str]],  # noqa: F811
    pairs: list[tuple[int, float, float]], verdict: str, says: str
) -> None:
    gpu_run(session, local, "v1", 2.0, OLD_ENV)
    workers(session, session.scalars(select(Cell.queue)).one(), [0, 1])
    run = gpu_run(session, local, "v2", 1.6, NEW_ENV)
    remeasure(session, local, run, pairs)
    assert (run.status, run.verdict) == ("done", verdict)
    assert any(says in r for r in run.reasons), "\n".join(run.reasons)


def test_with_one_live_gpu_worker_the_pair_goes_to_the_class_queue(
    session: Session, local: Settings, sent: list[tuple[int, str]]  # noqa: F811
) -> None:
    gpu_run(session, local, "v1", 2.0, OLD_ENV)
    queue = session.scalars(select(Cell.queue)).one()
    workers(session, queue, [0])
    run = gpu_run(session, local, "v2", 1.6, NEW_ENV)
    cells = sides(session, run)
    assert [c.queue for c in cells["candidate"]] == [queue]
    assert len(cells["baseline"]) == 1


def test_a_pair_whose_gpu_holds_a_foreign_process_fails_and_stores_nothing(
    session: Session, local: Settings, sent: list[tuple[int, str]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pair's worker guards its GPU like any cell's: a process outside its tree on the
    device, still there after the idle wait, fails the pair with the reason (that GPU then
    counts as not measured) before any environment is built."""
    from workers import exclusivity
    from workers.confirm import execute_confirmation

    gpu_run(session, local, "v1", 2.0, OLD_ENV)
    workers(session, session.scalars(select(Cell.queue)).one(), [0, 1])
    run = gpu_run(session, local, "v2", 1.6, NEW_ENV)
    cells = sides(session, run)
    busy = exclusivity.DeviceGuard(0, lambda: exclusivity.Sample((4242,), 90),
                                   mine=lambda: {1}, name_of=lambda _: "train")
    monkeypatch.setattr(exclusivity, "guard_for_worker", lambda specs: busy)
    pair = confirmation.confirmation_pair(session, cells["candidate"][0].id)
    assert pair is not None
    settings = local.model_copy(update={"gpu_idle_wait_seconds": 0.0})
    assert execute_confirmation(pair, settings) == "failed"

    session.expire_all()
    for cell in (cells["candidate"][0], cells["baseline"][0]):
        session.refresh(cell)
        assert cell.status == "failed"
        assert cell.error == ("before the re-measure: a foreign process used GPU 0 during "
                              "the cell: pid 4242 (train)")
    assert session.scalars(select(Cell).where(Cell.status == "done", Cell.id.in_(
        [cells["candidate"][0].id, cells["baseline"][0].id]))).all() == []
