"""Prometheus exposition: request counters/latency plus runs and cells by status.

It follows the read policy: with private reads a scrape needs a `read` token (Prometheus'
`authorization` setting), since run and cell counts and the route list are not public, or
the settings' `metrics_token`, which is checked without the database and so still opens the
page during an outage."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import func, select

from app.api.deps import require_metrics_reader
from app.api.middleware import Metrics
from app.models import CELL_STATUSES, RUN_STATUSES, Cell, Run

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response, summary="Prometheus metrics",
            responses={200: {"content": {"text/plain": {}}}},
            dependencies=[Depends(require_metrics_reader)])
def metrics(request: Request) -> Response:
    registry: Metrics = request.app.state.metrics
    try:
        with request.app.state.sessionmaker() as session:
            runs: dict[str, int] = {
                status: count for status, count in
                session.execute(select(Run.status, func.count()).group_by(Run.status))
            }
            cells: dict[str, int] = {
                status: count for status, count in
                session.execute(select(Cell.status, func.count()).group_by(Cell.status))
            }
    except Exception:  # a scrape still answers when the database is down
        registry.database_up.set(0)
    else:
        registry.database_up.set(1)
        for status in RUN_STATUSES:
            registry.runs.labels(status).set(runs.get(status, 0))
        for status in CELL_STATUSES:
            registry.cells.labels(status).set(cells.get(status, 0))
    return Response(generate_latest(registry.registry), media_type=CONTENT_TYPE_LATEST)
