"""The workers as they announce themselves, and each queue's consumers and backlog."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter

from app.api.deps import ReadAccess, SessionDep, SettingsDep
from app.api.presenters import error_responses
from app.schemas import QueuePublic, WorkerPublic, WorkersPublic
from app.services.workers import list_queues, list_workers

router = APIRouter(prefix="/api/v1/workers", tags=["workers"])


@router.get("", response_model=WorkersPublic, responses=error_responses(401, 403, 422, 503),
            summary="Workers (queues, host, GPUs, interpreters, last heartbeat) and queues")
def get_workers(session: SessionDep, settings: SettingsDep, _read: ReadAccess) -> WorkersPublic:
    """Every worker heard from within `worker_forget_seconds`, alive ones first, and every
    queue with its live workers and its queued and running cells: a queue with cells and no
    live worker is the one to start a worker for."""
    workers = list_workers(session, settings)
    return WorkersPublic(
        heartbeat_seconds=settings.worker_heartbeat_seconds,
        lost_after_seconds=settings.worker_lost_after(),
        workers=[WorkerPublic.model_validate(asdict(w)) for w in workers],
        queues=[QueuePublic.model_validate(asdict(q))
                for q in list_queues(session, settings, workers)],
    )
