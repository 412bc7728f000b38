"""What makes a series: one project's results of one key, and a key that holds every axis
that changes what is measured (threads, CUDA graphs or not), through the API on PostgreSQL.

A series is addressed by key and project: the project may be left out while only one
project measures the key; when several do, the request is ambiguous (422 naming `project`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.services import runs as run_service
from benchmarks.result import BenchResult
from benchmarks.spec import BenchSpec
from benchmarks.timing_policy import TimingPolicy
from devkit.factories import bearer, bench_result, ingest_body, run_request, tiny_spec

KEY = "resnet18-w8-i32/onnxruntime/constant/fp32/bs1/static/cpu/tauto/nographs"
GPU = "nvidia-h100"
GPU_SPEC = BenchSpec(model="resnet50", backend="tensorrt", precision="fp16", device="cuda")


def ingest(client: TestClient, token: str, result: BenchResult, *, project: str,
           revision: str) -> dict[str, Any]:
    response = client.post("/api/v1/results", headers=bearer(token),
                           json=ingest_body(result, project=project, revision=revision))
    assert response.status_code == 201, response.text
    stored: dict[str, Any] = response.json()
    return stored


def get(client: TestClient, token: str, path: str, **params: Any) -> Any:
    return client.get(path, params=params, headers=bearer(token))


def series(client: TestClient, token: str, **filters: Any) -> list[dict[str, Any]]:
    response = get(client, token, "/api/v1/series", **filters)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def speedups(client: TestClient, token: str, key: str, project: str) -> list[float]:
    response = get(client, token, f"/api/v1/series/{key}/points", project=project)
    assert response.status_code == 200, response.text
    return [p["speedup"] for p in response.json()["points"]]


# ---- a series belongs to a project ---------------------------------------------------------

def test_two_projects_measuring_the_same_matrix_keep_separate_series(
    client: TestClient, ci_token: str, read_token: str, session: Session
) -> None:
    # Project a: a triggered run (a worker's result) then an ingested one; project b posts
    # the same spec in between, faster. Neither may become the other's point or latest.
    run = client.post("/api/v1/runs", headers=bearer(ci_token), json=run_request(
        project="a", matrix={"weights": ["constant"], "sides": "paired"})).json()
    (cell,) = run["cells"]
    spec = run_service.claim_cell(session, cell["id"])
    assert spec is not None
    run_service.record_result(session, cell["id"], bench_result(spec, speedup=1.5))
    session.commit()
    ingest(client, ci_token, bench_result(speedup=2.4), project="b", revision="b1")
    ingest(client, ci_token, bench_result(speedup=1.6), project="a", revision="a2")

    both = series(client, read_token)
    assert [(s["key"], s["project"]) for s in both] == [(KEY, "a"), (KEY, "b")]
    latest = {s["project"]: s["latest"]["speedup"] for s in both}
    assert latest == {"a": 1.6, "b": 2.4}
    assert [s["project"] for s in series(client, read_token, project="a")] == ["a"]
    assert series(client, read_token, project="nobody") == []
    assert speedups(client, read_token, KEY, "a") == [1.5, 1.6]
    assert speedups(client, read_token, KEY, "b") == [2.4]
    points = get(client, read_token, f"/api/v1/series/{KEY}/points", project="b").json()
    assert points["series"]["project"] == "b" and points["series"]["latest"]["speedup"] == 2.4


def test_the_series_list_pages_through_one_key_in_several_projects(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    for project in ("a", "b", "c"):
        ingest(client, ci_token, bench_result(), project=project, revision="v1")
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = get(client, read_token, "/api/v1/series", **params).json()
        seen += [(s["key"], s["project"]) for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [(KEY, "a"), (KEY, "b"), (KEY, "c")]


# ---- every axis that changes what is measured is in the key --------------------------------

def test_a_change_of_timing_mode_starts_a_new_series(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    graphs = bench_result(GPU_SPEC, speedup=3.0, device_class=GPU)
    # the same spec, but capture failed and both sides ran without graphs (the fallback)
    fallback = dataclasses.replace(
        bench_result(GPU_SPEC, speedup=2.2, device_class=GPU),
        series_key=GPU_SPEC.series_key(GPU, "nographs"),
        evidence={"timing": {"mode": "nographs", "cuda_graphs": {"baseline": False,
                                                                  "candidate": False}}})
    # and a later run that asked for no graphs at all
    plain_spec = dataclasses.replace(GPU_SPEC, timing=TimingPolicy(cuda_graphs=False))
    plain = bench_result(plain_spec, speedup=2.1, device_class=GPU)
    ingest(client, ci_token, graphs, project="vision", revision="v1")
    ingest(client, ci_token, fallback, project="vision", revision="v2")
    ingest(client, ci_token, plain, project="vision", revision="v3")

    found = {s["timing_mode"]: s for s in series(client, read_token, device_class=GPU)}
    assert set(found) == {"graphs", "nographs"}
    assert found["graphs"]["key"] == "resnet50/tensorrt/constant/fp16/bs1/static/nvidia-h100" \
                                     "/tauto/graphs"
    assert found["nographs"]["key"].endswith("/nvidia-h100/tauto/nographs")
    assert speedups(client, read_token, found["graphs"]["key"], "vision") == [3.0]
    assert speedups(client, read_token, found["nographs"]["key"], "vision") == [2.2, 2.1]
    only = series(client, read_token, timing_mode="graphs")
    assert [s["key"] for s in only] == [found["graphs"]["key"]]


def test_a_change_of_threads_starts_a_new_series(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    one_thread = tiny_spec(options={"threads": 1})
    ingest(client, ci_token, bench_result(speedup=1.5), project="vision", revision="v1")
    ingest(client, ci_token, bench_result(one_thread, speedup=1.2), project="vision",
           revision="v2")

    found = {s["threads"]: s for s in series(client, read_token)}
    assert set(found) == {None, 1}
    assert found[1]["key"] == KEY.replace("/tauto/", "/t1/")
    assert found[1]["latest"]["speedup"] == 1.2 and found[None]["latest"]["speedup"] == 1.5
    assert [s["threads"] for s in series(client, read_token, threads="1")] == [1]
    assert [s["threads"] for s in series(client, read_token, threads="auto")] == [None]
    assert get(client, read_token, "/api/v1/series", threads="all").status_code == 422


# ---- naming the project of one series ------------------------------------------------------

def test_points_and_changes_need_the_project_once_several_projects_measure_the_key(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    ingest(client, ci_token, bench_result(), project="a", revision="v1")
    for what in ("points", "changes"):
        alone = get(client, read_token, f"/api/v1/series/{KEY}/{what}")
        assert alone.status_code == 200, "one project: the project may be left out"
    ingest(client, ci_token, bench_result(), project="b", revision="v1")

    for what in ("points", "changes"):
        path = f"/api/v1/series/{KEY}/{what}"
        ambiguous = get(client, read_token, path)
        assert ambiguous.status_code == 422
        (error,) = ambiguous.json()["errors"]
        assert error["field"] == "project"
        assert "exists in several projects (a, b)" in error["message"]
        assert get(client, read_token, path, project="b").status_code == 200
        unknown = get(client, read_token, path, project="c")
        assert unknown.status_code == 404
        assert unknown.json()["detail"] == f"series {KEY!r} not found in project 'c'"
    changes = get(client, read_token, f"/api/v1/series/{KEY}/changes", project="a").json()
    assert (changes["series_key"], changes["project"]) == (KEY, "a")
    missing = get(client, read_token, "/api/v1/series/" + KEY.replace("bs1", "bs2") + "/points")
    assert missing.status_code == 404
