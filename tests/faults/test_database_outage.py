"""PostgreSQL crashes and comes back: the API answers 503 with the reason while it is down,
recovers by itself, and no acknowledged write is lost.

A private cluster is stopped with `pg_ctl -m immediate` (a crash: no shutdown checkpoint, the
restart replays the WAL) while a client keeps triggering runs and another keeps reading.
Every 201 the client got must be in the database afterwards with the id it was given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import normalize_database_url, session_scope, upgrade
from app.models import Run
from app.services.tokens import create_token
from devkit.factories import run_request
from tests.faults.infra import PrivatePostgres, Processes, wait_for

pytestmark = pytest.mark.slow

DOWN_FOR_S = 4.0


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.start()
        upgrade(server.url)
        yield server
    finally:
        server.destroy()


@dataclass
class Traffic:
    """A client that triggers runs (revision = a counter) and reads one, until stopped."""

    url: str
    token: str
    read_id: int
    acknowledged: dict[str, int] = field(default_factory=dict)  # revision -> run id
    answers: list[tuple[float, str, int, float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        n = 0
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                n += 1
                revision = f"r{n}"
                self._call(client, "POST", "/api/v1/runs", headers,
                           run_request(project="outage", revision=revision), revision)
                self._call(client, "GET", f"/api/v1/runs/{self.read_id}", headers, None, "")
                time.sleep(0.05)

    def _call(self, client: httpx.Client, method: str, path: str, headers: dict[str, str],
              body: object, revision: str) -> None:
        started = time.monotonic()
        response = client.request(method, self.url + path, json=body, headers=headers)
        elapsed = time.monotonic() - started
        detail = "" if response.status_code < 400 else response.json().get("detail", "")
        self.answers.append((started, method, response.status_code, elapsed, detail))
        if method == "POST" and response.status_code == 201:
            self.acknowledged[revision] = int(response.json()["id"])


def test_api_answers_503_while_postgresql_is_down_and_recovers_without_losing_writes(
    private_pg: PrivatePostgres, procs: Processes, base_env: dict[str, str],
    settings: Settings,
) -> None:
    own = settings.model_copy(update={"database_url": private_pg.url})
    with session_scope(own) as session:
        _, token = create_token(session, "ci", "outage")
    procs.env = {**base_env, "SPEEDWATCH_DATABASE_URL": private_pg.url,
                 "SPEEDWATCH_EXECUTOR": "none", "SPEEDWATCH_DB_CONNECT_TIMEOUT_SECONDS": "2"}
    url = procs.serve()
    first = httpx.post(f"{url}/api/v1/runs", json=run_request(project="outage", revision="r0"),
                       headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert first.status_code == 201, first.text
    traffic = Traffic(url, token, read_id=int(first.json()["id"]))
    traffic.acknowledged["r0"] = traffic.read_id
    client = threading.Thread(target=traffic.run, daemon=True)
    client.start()
    try:
        wait_for(lambda: len(traffic.acknowledged) >= 4, 30, "writes before the outage")
        down_at = time.monotonic()
        private_pg.stop("immediate")
        health = httpx.get(f"{url}/healthz", timeout=10)
        time.sleep(DOWN_FOR_S)
        up_at = time.monotonic()
        private_pg.start()

        def recovered() -> float | None:
            after = [a for a in traffic.answers if a[0] > up_at]
            ok = [a for a in after if a[1] == "GET" and a[2] == 200]
            return ok[0][0] + ok[0][3] if ok else None

        recovered_at = wait_for(recovered, 30, "the API to answer 200 again",
                                on_timeout=lambda: procs.log("api"))
        writes_before = len(traffic.acknowledged)
        wait_for(lambda: len(traffic.acknowledged) >= writes_before + 3, 30,
                 "writes after the outage")
    finally:
        traffic.stop.set()
        client.join(timeout=30)

    assert health.status_code == 503 and health.json()["database"].startswith("unavailable")
    during = [a for a in traffic.answers if down_at + 0.5 < a[0] < up_at]
    assert {a[1] for a in during} == {"GET", "POST"}, traffic.answers
    for _, method, status, elapsed, detail in during:
        assert status == 503, (method, status, detail)
        assert detail.startswith("database unavailable: "), detail
        assert elapsed < 5, f"{method} took {elapsed:.1f}s while the database was down"
    assert all(a[2] in (200, 201, 503) for a in traffic.answers), traffic.answers
    # every write the client was told about is there, under the id it was told
    engine = create_engine(normalize_database_url(private_pg.url))
    try:
        with Session(engine) as session:
            stored = dict(session.execute(
                select(Run.revision, Run.id).where(Run.revision.in_(traffic.acknowledged))
            ).all())
    finally:
        engine.dispose()
    assert stored == traffic.acknowledged
    print(f"\nPostgreSQL outage: {len(during)} answers while down, all 503 "
          f"(slowest {max(a[3] for a in during):.2f}s); API answered 200 "
          f"{recovered_at - up_at:.2f}s after PostgreSQL was started again; "
          f"{len(traffic.acknowledged)} acknowledged writes, none lost")
