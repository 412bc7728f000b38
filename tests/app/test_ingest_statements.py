"""An upload to an existing run and series costs the store three statements and a commit.

One API process's upload rate is bounded by its CPU, and the ORM's statements are most of
an upload's work: the run and its series are read in one query, and the cell and result
are inserted without a savepoint (a duplicate rolls the transaction back instead). A
change that adds a statement to the common path fails here, not in a capacity run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from devkit.factories import bearer, bench_result, ingest_body, tiny_spec


@contextmanager
def statements() -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        seen.append(" ".join(statement.split()[:3]))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def _post(client: TestClient, token: str, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/results", json=body, headers=bearer(token))


def test_an_upload_to_an_existing_run_and_series_runs_three_statements_of_its_own(
    client: TestClient, ci_token: str
) -> None:
    # the run of revision r1 and the series of batch 2 exist before the counted upload
    assert _post(client, ci_token, ingest_body(bench_result(tiny_spec(batch_size=1)),
                                               revision="r1")).status_code == 201
    assert _post(client, ci_token, ingest_body(bench_result(tiny_spec(batch_size=2)),
                                               revision="r0")).status_code == 201
    with statements() as seen:
        answer = _post(client, ci_token, ingest_body(bench_result(tiny_spec(batch_size=2)),
                                                     revision="r1"))
    assert answer.status_code == 201 and answer.json()["created"] is True
    assert answer.json()["series_key"].split("/")[4] == "bs2"
    ours = [s for s in seen if not s.startswith(("SELECT api_tokens", "UPDATE api_tokens"))]
    # the token's check and the judging after the answer are not the upload's own
    upload = ours[:ours.index("INSERT INTO results") + 1]
    assert not any("SAVEPOINT" in s for s in upload), upload
    assert len(upload) == 3, upload  # the run with its series, the cell, the result


def test_a_retry_after_the_savepoint_went_still_answers_the_stored_result(
    client: TestClient, ci_token: str
) -> None:
    body = ingest_body(bench_result(tiny_spec(batch_size=3)), revision="r2")
    first = _post(client, ci_token, body).json()
    again = _post(client, ci_token, body)
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["result_id"] == first["result_id"]
    assert again.json()["series_key"] == first["series_key"]
