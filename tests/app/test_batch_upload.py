"""A CI job's matrix in one request: `POST /api/v1/results/batch` stores each document as
`POST /api/v1/results` would store it alone, for one request's cost."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from app.config import Settings
from app.db import session_scope
from app.schemas import MAX_BATCH_RESULTS
from app.services.tokens import create_token
from devkit.factories import bearer, bench_result, ingest_body, tiny_spec
from tests.app.test_ingest_statements import statements


def batch_body(*batch_sizes: int, **overrides: Any) -> dict[str, Any]:
    body = ingest_body(bench_result(tiny_spec()), **overrides)
    del body["result"]
    body["results"] = [bench_result(tiny_spec(batch_size=b)).to_dict() for b in batch_sizes]
    return body


def _post(client: TestClient, token: str, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/results/batch", json=body, headers=bearer(token))


def test_a_batch_stores_each_document_under_one_run_in_the_order_posted(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    answer = _post(client, ci_token, batch_body(1, 2, 4))
    assert answer.status_code == 201, answer.text
    data = answer.json()
    assert (data["created"], data["existing"]) == (3, 0)
    keys = [r["series_key"] for r in data["results"]]
    assert [k.split("/")[4] for k in keys] == ["bs1", "bs2", "bs4"]
    assert len({r["run_id"] for r in data["results"]}) == 1
    run = client.get(f"/api/v1/runs/{data['results'][0]['run_id']}", headers=bearer(read_token))
    assert sorted(c["series_key"] for c in run.json()["cells"]) == sorted(keys)


def test_a_batch_and_single_uploads_of_one_revision_share_its_run(
    client: TestClient, ci_token: str
) -> None:
    single = client.post("/api/v1/results", headers=bearer(ci_token),
                         json=ingest_body(bench_result(tiny_spec(batch_size=8))))
    batch = _post(client, ci_token, batch_body(1, 8))
    assert batch.status_code == 201
    results = batch.json()["results"]
    assert {r["run_id"] for r in results} == {single.json()["run_id"]}
    # the document posted alone before is the same document: answered, not stored twice
    assert [r["created"] for r in results] == [True, False]
    assert results[1]["result_id"] == single.json()["result_id"]


def test_posting_the_same_batch_again_answers_200_and_stores_nothing(
    client: TestClient, ci_token: str
) -> None:
    first = _post(client, ci_token, batch_body(1, 2))
    again = _post(client, ci_token, batch_body(1, 2))
    assert again.status_code == 200
    assert (again.json()["created"], again.json()["existing"]) == (0, 2)
    assert [r["result_id"] for r in again.json()["results"]] == \
        [r["result_id"] for r in first.json()["results"]]


def test_one_bad_document_stores_none_of_the_batch_and_the_422_names_it(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    body = batch_body(1, 2, 4)
    body["results"][2]["spec"]["model"] = "subprocess:getoutput"
    answer = _post(client, ci_token, body)
    assert answer.status_code == 422
    assert "results[2].spec" in answer.text and "standard library" in answer.text
    runs = client.get("/api/v1/runs", params={"project": "vision"}, headers=bearer(read_token))
    assert runs.json()["items"] == []


def test_a_schema_error_names_the_document_by_its_index(
    client: TestClient, ci_token: str
) -> None:
    body = batch_body(1, 2)
    body["results"][1]["speedup"] = "fast"
    answer = _post(client, ci_token, body)
    assert answer.status_code == 422
    assert "results.1.speedup" in answer.text or "results[1].speedup" in answer.text


def test_a_conflicting_document_is_a_409_naming_it_and_nothing_of_the_batch_is_stored(
    client: TestClient, ci_token: str
) -> None:
    assert _post(client, ci_token, batch_body(4)).status_code == 201
    body = batch_body(1, 4)
    body["results"][1] = bench_result(tiny_spec(batch_size=4), speedup=1.2).to_dict()
    answer = _post(client, ci_token, body)
    assert answer.status_code == 409
    assert "results[1]" in answer.text and "nothing of this batch was stored" in answer.text
    again = _post(client, ci_token, batch_body(1))
    assert again.status_code == 201  # the refused batch's first document was not stored


def test_a_document_repeated_within_a_batch_is_stored_once(
    client: TestClient, ci_token: str
) -> None:
    answer = _post(client, ci_token, batch_body(2, 2))
    assert answer.status_code == 201
    first, second = answer.json()["results"]
    assert (first["created"], second["created"]) == (True, False)
    assert first["result_id"] == second["result_id"]


def test_a_batch_inserts_its_rows_together_not_document_by_document(
    client: TestClient, ci_token: str
) -> None:
    """Statements per batch do not grow with its documents (series that exist, a run of a
    new revision): one CPU-bound API process's upload rate depends on it. (On SQLite and
    PostgreSQL alike the cells go out in one INSERT, the results in another.)"""
    sizes = (2, 4, 8, 16, 32, 64, 128, 256)
    assert _post(client, ci_token, batch_body(*sizes, revision="r0")).status_code == 201
    counts = []
    for revision, batch in (("r1", sizes[:2]), ("r2", sizes)):
        with statements() as seen:
            assert _post(client, ci_token, batch_body(*batch, revision=revision)).status_code \
                == 201
        ours = [s for s in seen if not s.startswith(("SELECT api_tokens", "UPDATE api_tokens"))]
        # the judging after the answer is not the upload's own
        counts.append(len(ours) - ours[::-1].index("INSERT INTO results"))
    assert counts[0] == counts[1], counts


def test_a_batch_is_bounded_and_never_empty(client: TestClient, ci_token: str) -> None:
    assert _post(client, ci_token, batch_body()).status_code == 422
    body = batch_body(1)
    body["results"] = body["results"] * (MAX_BATCH_RESULTS + 1)
    answer = _post(client, ci_token, body)
    assert answer.status_code in (413, 422)  # the body limit may answer first


def test_a_token_of_another_project_cannot_post_a_batch(
    client: TestClient, settings: Settings
) -> None:
    with session_scope(settings) as session:
        _, limited = create_token(session, "ci", "vision-only", projects=["vision"])
    assert _post(client, limited, batch_body(1, project="someone-else")).status_code == 403
