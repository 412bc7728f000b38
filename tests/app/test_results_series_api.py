"""Ingest of results measured elsewhere, and the read side: series, points, compare."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import Cell, Result, Run
from app.services import runs as run_service
from devkit.factories import bearer, bench_result, ingest_body, run_request, tiny_spec

KEY = "resnet18-w8-i32/onnxruntime/constant/fp32/bs1/static/cpu/tauto/nographs"


def ingest(client: TestClient, token: str, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/results", json=body, headers=bearer(token))


def count(session: Session, model: type) -> int:
    return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_ingest_files_the_result_under_an_ingest_run_and_its_series(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    response = ingest(client, ci_token, ingest_body(bench_result(speedup=1.8)))
    assert response.status_code == 201
    stored = response.json()
    assert stored["series_key"] == KEY and stored["created"] is True

    run = client.get(f"/api/v1/runs/{stored['run_id']}", headers=bearer(read_token)).json()
    assert run["kind"] == "ingest" and run["status"] == "done" and run["verdict"] == "pass"
    assert run["environment"]["installed"] == {"onnxruntime": "1.22.0"}

    # A second spec at the same revision and environment joins the same ingest run.
    other = bench_result(tiny_spec(backend="inductor"))
    assert ingest(client, ci_token, ingest_body(other)).json()["run_id"] == stored["run_id"]


def test_reposting_the_identical_document_is_a_no_op_200(
    client: TestClient, ci_token: str, session: Session
) -> None:
    body = ingest_body(bench_result())
    first = ingest(client, ci_token, body)
    again = ingest(client, ci_token, body)
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["result_id"] == first.json()["result_id"]
    assert count(session, Result) == 1


def test_a_different_document_for_the_same_spec_and_revision_is_a_conflict(
    client: TestClient, ci_token: str
) -> None:
    ingest(client, ci_token, ingest_body(bench_result(speedup=1.5)))
    response = ingest(client, ci_token, ingest_body(bench_result(speedup=1.2)))
    assert response.status_code == 409
    assert "another revision label" in response.json()["detail"]


def _doc(**changes: Any) -> dict[str, Any]:
    document = bench_result().to_dict()
    for path, value in changes.items():
        target = document
        *parents, leaf = path.split("__")
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    return document


BAD_DOCUMENTS = [
    (_doc(schema_version=99), "schema_version: 99 is not supported"),
    (_doc(baseline_samples_ms=[[1.0, -2.0]]),
     "result.baseline_samples_ms[0][1]: Input should be greater than 0"),
    (_doc(candidate_samples_ms=[[1.0, math.nan]]),
     "result.candidate_samples_ms[0][1]: Input should be a finite number"),
    (_doc(speedup__ci_low=2.0), "speedup: ci_low <= value <= ci_high does not hold"),
    (_doc(series_key="resnet50/onnxruntime/constant/fp32/bs1/static/cpu/tauto/nographs"),
     "result.series_key: 'resnet50/onnxruntime"),
    (_doc(series_key="resnet18-w8-i32/onnxruntime/constant/fp32/bs1/static/cpu"),
     "result.series_key: 'resnet18-w8-i32/onnxruntime/constant/fp32/bs1/static/cpu' is not "
     "model/backend/weights/precision/bsN/shape/device/tN|tauto/graphs|nographs[/options]"),
    (_doc(fingerprint={"device_class": "nvidia-h100"}), "does not match its spec and fingerprint"),
    (_doc(fingerprint={}), "result.fingerprint.device_class: required"),
    (_doc(colour="red"), "result.colour: unknown field"),
    (_doc(spec__model="resnet9"), "result.spec: model: 'resnet9'"),
    (_doc(accuracy__rel_l2=math.inf), "result.accuracy.rel_l2"),
    # wrong types and numbers no float holds (each was a 500)
    (_doc(baseline__median_ms="fast"), "result.baseline.median_ms: Input should be a valid number"),
    (_doc(candidate__p95_ms=10**400), "result.candidate.p95_ms: a number no float holds"),
    (_doc(speedup=[1, 2]), "result.speedup: Input should be a valid dictionary"),
    (_doc(baseline_samples_ms=[[True]]),
     "result.baseline_samples_ms[0][0]: Input should be a valid number"),
]


@pytest.mark.parametrize(("document", "message"), BAD_DOCUMENTS,
                         ids=[m[:40] for _, m in BAD_DOCUMENTS])
def test_invalid_documents_are_422_and_nothing_is_stored(
    client: TestClient, ci_token: str, session: Session, document: dict[str, Any], message: str
) -> None:
    # NaN/Infinity are not JSON; send them the way Python's json module would.
    import json

    text = json.dumps(ingest_body(document))
    response = client.post("/api/v1/results", content=text,
                           headers={**bearer(ci_token), "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]
    assert (count(session, Result), count(session, Cell), count(session, Run)) == (0, 0, 0)


def test_unknown_envelope_fields_are_refused(client: TestClient, ci_token: str) -> None:
    response = ingest(client, ci_token, ingest_body(bench_result(), machine="lab-3"))
    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "machine", "message": "unknown field"}]


def test_a_skipped_result_is_stored_without_becoming_a_point(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    response = ingest(client, ci_token, ingest_body(bench_result(status="skipped")))
    assert response.status_code == 201 and response.json()["status"] == "skipped"
    series = client.get("/api/v1/series", headers=bearer(read_token)).json()["items"]
    assert series[0]["key"] == KEY and series[0]["latest"] is None


def _seed_history(client: TestClient, token: str, speedups: list[float]) -> list[int]:
    return [ingest(client, token, ingest_body(bench_result(speedup=s),
                                              revision=f"v{i}")).json()["result_id"]
            for i, s in enumerate(speedups)]


def test_series_list_filters_by_axes_pages_and_shows_the_latest_point(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    _seed_history(client, ci_token, [1.5, 1.6])
    for backend in ("inductor", "eager"):
        ingest(client, ci_token, ingest_body(
            bench_result(tiny_spec(backend=backend))))

    everything = client.get("/api/v1/series", headers=bearer(read_token)).json()
    assert [s["backend"] for s in everything["items"]] == ["eager", "inductor", "onnxruntime"]
    onnx = client.get("/api/v1/series?backend=onnxruntime&device_class=cpu",
                      headers=bearer(read_token)).json()["items"]
    assert len(onnx) == 1 and onnx[0]["latest"]["speedup"] == 1.6
    assert onnx[0]["latest"]["revision"] == "v1"

    page1 = client.get("/api/v1/series?limit=2", headers=bearer(read_token)).json()
    page2 = client.get(f"/api/v1/series?limit=2&cursor={quote(page1['next_cursor'])}",
                       headers=bearer(read_token)).json()
    assert [s["key"] for s in page1["items"] + page2["items"]] == [
        s["key"] for s in everything["items"]]
    assert page2["next_cursor"] is None


@pytest.mark.parametrize("encode", [False, True], ids=["raw-slashes", "url-encoded"])
def test_points_come_oldest_first_with_limit_and_since(
    client: TestClient, ci_token: str, read_token: str, session: Session, encode: bool
) -> None:
    ids = _seed_history(client, ci_token, [1.5, 1.6, 1.4, 1.7])
    # Backdate the first two, so `since` has something to cut.
    old = datetime.now(timezone.utc) - timedelta(days=30)
    for result in session.scalars(select(Result).where(Result.id.in_(ids[:2]))):
        result.created_at = old
    session.commit()
    key = quote(KEY, safe="") if encode else KEY

    points = client.get(f"/api/v1/series/{key}/points", headers=bearer(read_token)).json()
    assert [p["speedup"] for p in points["points"]] == [1.5, 1.6, 1.4, 1.7]
    assert points["series"]["latest"]["speedup"] == 1.7
    last_two = client.get(f"/api/v1/series/{key}/points?limit=2",
                          headers=bearer(read_token)).json()["points"]
    assert [p["speedup"] for p in last_two] == [1.4, 1.7]
    since = quote((old + timedelta(days=1)).isoformat())
    recent = client.get(f"/api/v1/series/{key}/points?since={since}",
                        headers=bearer(read_token)).json()["points"]
    assert [p["result_id"] for p in recent] == ids[2:]


def test_compare_reports_shared_series_change_and_ci_overlap(
    client: TestClient, ci_token: str, read_token: str, session: Session
) -> None:
    def measured_run(revision: str, speedups: dict[str, float]) -> int:
        body = run_request(revision=revision, matrix={"backends": ["onnxruntime", "inductor"],
                                                      "weights": ["constant"],
                                                      "sides": "paired"})
        run = client.post("/api/v1/runs", json=body, headers=bearer(ci_token)).json()
        for cell in run["cells"]:
            backend = cell["spec"]["backend"]
            if backend not in speedups:
                continue
            spec = run_service.claim_cell(session, cell["id"])
            assert spec is not None
            s = speedups[backend]
            run_service.record_result(session, cell["id"],
                                      bench_result(spec, speedup=s, ci=(s - 0.05, s + 0.05)))
        session.commit()
        return int(run["id"])

    base = measured_run("v1", {"onnxruntime": 2.0, "inductor": 1.5})
    head = measured_run("v2", {"onnxruntime": 1.0})
    response = client.get(f"/api/v1/compare?base={base}&head={head}",
                          headers=bearer(read_token)).json()
    assert response["only_in_base"] == [
        "resnet18-w8-i32/inductor/constant/fp32/bs1/static/cpu/tauto/nographs"]
    assert response["only_in_head"] == []
    [row] = response["series"]
    assert row["series_key"] == KEY
    assert (row["base"]["speedup"], row["head"]["speedup"]) == (2.0, 1.0)
    assert row["change"] == pytest.approx(-0.5)
    assert row["ci_overlap"] is False

    same = client.get(f"/api/v1/compare?base={base}&head={base}",
                      headers=bearer(read_token)).json()
    assert all(r["ci_overlap"] and r["change"] == 0 for r in same["series"])


def test_filter_choices_name_only_what_the_projects_a_token_may_read_measure(
    session: Session,
) -> None:
    """A token limited to one project must not learn another project's threads or timing
    modes from the overview's filter choices (every axis is restricted, not only some)."""
    from app.models import Project, Series
    from app.services.series import axis_values
    from app.services.tokens import ProjectAccess

    def series(project: Project, threads: int | None, timing_mode: str, device: str) -> Series:
        return Series(project=project, key=f"{project.name}-{threads}-{timing_mode}",
                      model="m", backend="onnxruntime", weights="constant", precision="fp32",
                      batch_size=1, shape_mode="static", device_class=device,
                      threads=threads, timing_mode=timing_mode)

    mine, theirs = Project(name="mine"), Project(name="theirs")
    session.add_all([series(mine, 1, "nographs", "cpu"),
                     series(theirs, 7, "graphs", "nvidia-h100"),
                     series(theirs, None, "nographs", "nvidia-h100")])
    session.commit()

    limited = axis_values(session, ProjectAccess(frozenset({"mine"}), "mine-reader"))
    assert limited["project"] == ["mine"]
    assert limited["threads"] == [1] and limited["timing_mode"] == ["nographs"]
    assert limited["device_class"] == ["cpu"]

    everything = axis_values(session)
    assert everything["threads"][1:] == [1, 7] and everything["timing_mode"] == [
        "graphs", "nographs"]
