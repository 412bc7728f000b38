"""Two identical CI triggers at the same moment make one run.

CI systems retry, and two pipelines for the same commit start together. Against a real
uvicorn (two worker processes) on PostgreSQL, identical POST /api/v1/runs requests are
released at once from several threads: exactly one run row exists afterwards, one request
got 201 and every other one 200 with the same run id. The project exists beforehand: a new
project's row would be inserted under the race too, and that insert alone serialises the
requests (each waits on the first one's uncommitted project), hiding the race on the run.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import Cell, Project, Run
from devkit.factories import run_request
from tests.faults.infra import Processes

pytestmark = pytest.mark.slow

CONCURRENT = 6
ROUNDS = 4


def fire_together(url: str, body: dict[str, Any], headers: dict[str, str]
                  ) -> list[httpx.Response]:
    barrier = threading.Barrier(CONCURRENT)
    responses: list[httpx.Response | BaseException] = [None] * CONCURRENT  # type: ignore[list-item]

    def post(i: int) -> None:
        with httpx.Client(timeout=30) as client:
            client.get(f"{url}/healthz")  # connect first, so the POSTs leave together
            barrier.wait()
            try:
                responses[i] = client.post(f"{url}/api/v1/runs", json=body, headers=headers)
            except httpx.HTTPError as exc:
                responses[i] = exc

    threads = [threading.Thread(target=post, args=(i,)) for i in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for response in responses:
        assert isinstance(response, httpx.Response), response
    return responses  # type: ignore[return-value]


@pytest.fixture
def api(procs: Processes, base_env: dict[str, str]) -> str:
    procs.env = {**base_env, "SPEEDWATCH_EXECUTOR": "none"}
    return procs.serve("api", "--workers", "2")


@pytest.mark.parametrize("keyed", [True, False], ids=["idempotency-key", "identical-request"])
def test_simultaneous_identical_triggers_make_one_run(
    api: str, token: str, session: Session, keyed: bool, procs: Processes
) -> None:
    for _ in range(ROUNDS):
        project = f"race-{secrets.token_hex(4)}"
        headers = {"Authorization": f"Bearer {token}"}
        earlier = httpx.post(f"{api}/api/v1/runs", headers=headers, timeout=30,
                             json=run_request(project=project, revision="earlier"))
        assert earlier.status_code == 201, earlier.text
        if keyed:
            headers["Idempotency-Key"] = f"ci-{secrets.token_hex(6)}"
        responses = fire_together(api, run_request(project=project), headers)

        codes = sorted(r.status_code for r in responses)
        assert codes == [200] * (CONCURRENT - 1) + [201], (
            [r.text[:300] for r in responses], procs.log("api"))
        assert len({r.json()["id"] for r in responses}) == 1
        session.expire_all()
        runs = session.scalars(select(Run).join(Project).where(
            Project.name == project, Run.revision == "abc123")).all()
        assert len(runs) == 1
        assert session.scalar(select(func.count()).select_from(Cell)
                              .where(Cell.run_id == runs[0].id)) == 2
