"""A bounded soak: triggers, ingests and page reads under load while a worker is SIGKILLed
and restarted and the broker (a private, non-persistent Redis) is killed and restarted.

At the end every triggered cell has exactly one result, every run finished done, and no
request got a 5xx or lost its connection. Everything is real and on loopback: the API
(`speedwatch serve`, private reads), a Celery worker and beat, Redis, PostgreSQL.

`SPEEDWATCH_SOAK_SECONDS` sets the loaded period (default 30 s in CI; the whole test stays under
10 minutes up to about 300 s). The counts are printed for the README and the notes.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.dashboard.session import TOKEN_COOKIE
from app.models import Cell, Result, Run
from tests.app.detection_docs import body, measured
from tests.faults.infra import PrivateRedis, Processes, wait_for
from tests.workers.helpers import tiny_request

pytestmark = pytest.mark.slow

SOAK_S = float(os.environ.get("SPEEDWATCH_SOAK_SECONDS", "30"))
TRIGGER_EVERY_S = 4.0  # a tiny cell takes 2-4 s on the shared cores: the worker keeps up
INGEST_EVERY_S = 0.5
PAGES = ["/", "/runs", "/workers", "/regressions", "/api/v1/runs?limit=20",
         "/api/v1/workers", "/api/v1/regressions", "/metrics"]


@dataclass
class Tally:
    """What every request got, by kind; guarded by one lock (the threads share it)."""

    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)
    accepted_unsent: int = 0  # triggers answered while the broker was away (a warning)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, response: httpx.Response | None, error: str = "") -> None:
        with self.lock:
            if response is None:
                self.errors.append(f"{kind}: {error}")
            else:
                self.statuses[(kind, response.status_code)] += 1
                if response.status_code >= 500:
                    self.errors.append(f"{kind}: {response.status_code} {response.text[:200]}")

    def count(self, kind: str) -> int:
        return sum(n for (k, _), n in self.statuses.items() if k == kind)

    def server_errors(self) -> int:
        return sum(n for (_, status), n in self.statuses.items() if status >= 500)


def _call(tally: Tally, kind: str, client: httpx.Client, method: str, url: str,
          **kwargs: object) -> httpx.Response | None:
    try:
        response = client.request(method, url, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError as exc:
        tally.record(kind, None, f"{type(exc).__name__}: {exc}")
        return None
    tally.record(kind, response)
    return response


def test_soak_every_triggered_cell_gets_one_result_and_no_request_a_5xx(
    private_redis: PrivateRedis, procs: Processes, base_env: dict[str, str],
    session: Session, queue: str, token: str, tmp_path: Path,
) -> None:
    procs.env = {**base_env, "SPEEDWATCH_BROKER_URL": private_redis.url,
                 "SPEEDWATCH_PUBLIC_READS": "false",
                 "SPEEDWATCH_RECONCILE_AFTER_SECONDS": "10",
                 "SPEEDWATCH_RECONCILE_INTERVAL_SECONDS": "2",
                 "SPEEDWATCH_WORKER_HEARTBEAT_SECONDS": "1",
                 "SPEEDWATCH_BROKER_VISIBILITY_TIMEOUT_SECONDS": "20",
                 "SPEEDWATCH_CELL_TIMEOUT_SECONDS": "60"}
    url = procs.serve()
    procs.worker("worker", queue)
    procs.worker("maintenance", f"{queue}-maintenance")  # beat's reconciler sweeps
    procs.start("beat", "beat", "--schedule", str(tmp_path / "beat-schedule"))
    tally = Tally()
    stop = threading.Event()
    headers = {"Authorization": f"Bearer {token}"}
    project = f"soak-{queue}"

    def triggers() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            n = 0
            while not stop.is_set():
                n += 1
                # a branch each: no run is judged against another's tiny, noisy cell
                response = _call(tally, "trigger", client, "POST", "/api/v1/runs", json={
                    **tiny_request(project=project, revision=f"t{n}"), "branch": f"t{n}"})
                if response is not None and response.status_code in (200, 201):
                    with tally.lock:
                        tally.run_ids.append(int(response.json()["id"]))
                        tally.accepted_unsent += response.json()["warning"] is not None
                stop.wait(TRIGGER_EVERY_S)

    def ingests() -> None:
        document = measured(2.0)
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            n = 0
            while not stop.is_set():
                n += 1
                _call(tally, "ingest", client, "POST", "/api/v1/results",
                      json=body(document, revision=f"i{n}", project=f"{project}-ingest"))
                stop.wait(INGEST_EVERY_S)

    def reads(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=url, headers=headers, cookies={TOKEN_COOKIE: token},
                          timeout=30) as client:
            while not stop.is_set():
                with tally.lock:
                    runs = list(tally.run_ids)
                pages = PAGES + ([f"/runs/{rng.choice(runs)}", f"/api/v1/runs/{rng.choice(runs)}"]
                                 if runs else [])
                _call(tally, "read", client, "GET", rng.choice(pages))

    threads = [threading.Thread(target=triggers), threading.Thread(target=ingests),
               *(threading.Thread(target=reads, args=(i,)) for i in range(2))]
    started = time.monotonic()
    for thread in threads:
        thread.start()

    faults: list[str] = []

    def at(fraction: float) -> None:
        stop.wait(max(0.0, started + SOAK_S * fraction - time.monotonic()))

    try:
        at(0.2)
        procs.kill("worker")
        faults.append(f"worker SIGKILLed at {time.monotonic() - started:.0f} s")
        at(0.3)
        procs.worker("worker", queue)
        faults.append(f"worker restarted at {time.monotonic() - started:.0f} s")
        at(0.55)
        private_redis.kill()
        faults.append(f"Redis killed at {time.monotonic() - started:.0f} s")
        at(0.7)
        private_redis.start()
        faults.append(f"Redis restarted at {time.monotonic() - started:.0f} s")
        at(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    loaded = time.monotonic() - started

    run_ids = sorted(set(tally.run_ids))

    def all_finished() -> bool:
        session.expire_all()
        return session.scalar(select(func.count()).select_from(Run).where(
            Run.id.in_(run_ids), Run.status.in_(("done", "failed")))) == len(run_ids)

    wait_for(all_finished, 300, "every triggered run to finish", interval=1,
             on_timeout=lambda: procs.log("worker") + procs.log("beat"))
    drained = time.monotonic() - started - loaded

    session.expire_all()
    cells = session.scalars(select(Cell).where(Cell.run_id.in_(run_ids))).all()
    results = Counter(session.scalars(
        select(Result.cell_id).where(Result.cell_id.in_([c.id for c in cells]))).all())
    one_each = sum(results[c.id] == 1 for c in cells)
    lost = [c.id for c in cells if results[c.id] == 0]
    doubled = [c.id for c in cells if results[c.id] > 1]
    retried = sum(c.attempts > 1 for c in cells)
    not_done = [(c.id, c.status, c.error) for c in cells if c.status != "done"]
    print(f"\nsoak {loaded:.0f} s loaded + {drained:.0f} s to drain; {'; '.join(faults)}\n"
          f"requests: {tally.count('trigger')} triggers, {tally.count('ingest')} ingests, "
          f"{tally.count('read')} reads ({tally.accepted_unsent} triggers accepted while the "
          f"broker was down); statuses {dict(sorted(tally.statuses.items()))}\n"
          f"triggered runs {len(run_ids)}, cells {len(cells)}, cells with exactly one result "
          f"{one_each}, lost {len(lost)}, doubled {len(doubled)}, measured again after a "
          f"fault {retried}; 5xx {tally.server_errors()}, connection errors "
          f"{len([e for e in tally.errors if ': 5' not in e])}")

    assert tally.errors == []
    assert tally.accepted_unsent >= 1  # the outage met a trigger: that path was exercised
    assert len(run_ids) >= max(3, int(SOAK_S / TRIGGER_EVERY_S / 2))
    assert tally.count("ingest") >= SOAK_S / INGEST_EVERY_S / 3
    assert lost == [] and doubled == [] and one_each == len(cells)
    assert not_done == []
    assert procs.alive("api") and procs.alive("worker") and procs.alive("beat")
