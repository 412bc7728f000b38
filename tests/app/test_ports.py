"""The services reach the executors through app.ports only: the app factory wires the
worker package's executors in, and with nothing wired a trigger behaves as with a broker
that is down (the run is kept, its cells stay queued for the reconciler)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app import ports
from app.config import Settings
from app.main import create_app
from app.models import Cell
from devkit.factories import bearer, run_request
from workers import dispatch


@pytest.fixture(autouse=True)
def _rewire() -> Iterator[None]:
    """Each test may change the process-wide wiring; the next test gets the real one."""
    yield
    dispatch.install()


class Recorded:
    """A CellQueue that keeps what it was given."""

    def __init__(self) -> None:
        self.sent: list[tuple[list[tuple[int, str]], Settings]] = []

    def enqueue(self, cells: Sequence[tuple[int, str]], settings: Settings) -> None:
        self.sent.append((list(cells), settings))

    def warm_up(self, settings: Settings) -> None:
        pass


def test_the_app_factory_wires_the_worker_executors_into_the_ports(settings: Settings) -> None:
    ports.unwire()
    create_app(settings)
    assert isinstance(ports.cell_queue(), dispatch.ExecutorCellQueue)
    assert isinstance(ports.delivery_queue(), dispatch.CeleryDeliveryQueue)


def test_a_trigger_sends_its_committed_cells_through_the_wired_queue(
    settings: Settings, ci_token: str, session: Session
) -> None:
    local = settings.model_copy(update={"executor": "local"})
    recorded = Recorded()
    with TestClient(create_app(local)) as client:
        ports.wire(cells=recorded, deliveries=dispatch.CeleryDeliveryQueue())
        response = client.post("/api/v1/runs", json=run_request(), headers=bearer(ci_token))
    assert response.status_code == 201, response.text
    [(cells, sent_with)] = recorded.sent
    stored = session.scalars(select(Cell).order_by(Cell.id)).all()
    assert cells == [(c.id, c.queue) for c in stored] and len(cells) == 2
    assert sent_with == local  # the API's own settings, so a local executor uses its database


def test_with_no_executor_wired_a_trigger_is_kept_and_its_cells_stay_queued(
    settings: Settings, ci_token: str, session: Session
) -> None:
    local = settings.model_copy(update={"executor": "local"})
    with TestClient(create_app(local)) as client:
        ports.unwire()
        response = client.post("/api/v1/runs", json=run_request(), headers=bearer(ci_token))
    assert response.status_code == 201  # stored; the warning says its cells are not sent
    warning = response.json()["warning"]
    assert "no cell queue is wired" in warning and "stored" in warning
    assert session.scalar(select(func.count()).select_from(Cell).where(
        Cell.status == "queued", Cell.enqueued_at.is_(None))) == 2


def test_with_nothing_wired_webhook_deliveries_stay_pending_with_a_warning(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    from app.services import webhooks

    ports.unwire()
    celery = settings.model_copy(update={"executor": "celery"})
    webhooks.dispatch([101, 102], celery)  # never raises: the reconciler sends them later
    assert "webhook deliveries [101, 102] not dispatched" in caplog.text
    assert "no webhook delivery queue is wired" in caplog.text
