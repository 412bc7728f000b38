"""Triggering runs: cells per matrix point, idempotency, validation naming the field, progress
and verdict as the cells finish, listing with filters and cursors."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.main import create_app
from app.models import Cell, Run
from app.services import runs as run_service
from devkit.factories import bearer, bench_result, run_request


def post_run(client: TestClient, token: str, body: dict[str, Any] | None = None,
             key: str | None = None) -> Any:
    headers = bearer(token)
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post("/api/v1/runs", json=body or run_request(), headers=headers)


def test_a_trigger_stores_one_queued_cell_per_matrix_point(
    client: TestClient, ci_token: str
) -> None:
    body = run_request(matrix={"backends": ["onnxruntime", "inductor"],
                               "weights": ["constant", "tensor"], "batch_sizes": [1, 4]})
    response = post_run(client, ci_token, body)
    assert response.status_code == 201
    run = response.json()
    assert run["created"] is True and run["warning"] is None
    assert run["status"] == "queued" and run["verdict"] is None
    assert run["progress"] == {"total": 8, "queued": 8, "running": 0, "done": 0, "failed": 0,
                               "skipped": 0}
    keys = {cell["series_key"] for cell in run["cells"]}
    # a CPU cell's sides are timed in processes of their own by default (key segment)
    assert "resnet18-w8-i32/inductor/tensor/fp32/bs4/static/cpu/tauto/nographs/sides=split" \
        in keys
    assert len(keys) == 8
    assert {cell["queue"] for cell in run["cells"]} == {"cpu"}
    assert run["environment"]["pins"] == ["onnxruntime==1.22.0"]


def test_builds_are_pinned_and_guarded_by_default_and_a_run_may_ask_otherwise(
        client: TestClient, ci_token: str, settings: Settings) -> None:
    """Builds as shipped are a series of their own; the load guard's threshold is the
    server's setting unless the run names one."""
    default = post_run(client, ci_token, run_request(revision="pinned")).json()
    shipped = post_run(client, ci_token, run_request(
        revision="shipped", matrix={"timing": {"builds": "as-shipped",
                                               "max_host_load": 1.5}})).json()
    assert {c["spec"]["builds"] for c in default["cells"]} == {"pinned"}
    assert {c["spec"]["max_host_load"] for c in default["cells"]} == {settings.max_host_load}
    assert {c["spec"]["builds"] for c in shipped["cells"]} == {"as-shipped"}
    assert {c["spec"]["max_host_load"] for c in shipped["cells"]} == {1.5}
    assert all("/builds=as-shipped" in c["series_key"] or ",builds=as-shipped" in c["series_key"]
               for c in shipped["cells"])
    assert not any("builds=" in c["series_key"] for c in default["cells"])


def test_a_run_may_ask_its_processes_to_share_the_workers_compile_cache(
    client: TestClient, ci_token: str
) -> None:
    """"host" is a timing choice, not a new series: the keys stay those of the default."""
    default = post_run(client, ci_token, run_request()).json()
    host = post_run(client, ci_token, run_request(
        revision="shared", matrix={"timing": {"compile_cache": "host"}})).json()
    assert {c["spec"]["compile_cache"] for c in default["cells"]} == {"process"}
    assert {c["spec"]["compile_cache"] for c in host["cells"]} == {"host"}
    assert {c["series_key"] for c in host["cells"]} == {
        c["series_key"] for c in default["cells"]}


def test_optimization_levels_are_an_axis_each_backend_reads_in_its_own_terms(
    client: TestClient, ci_token: str
) -> None:
    """A level some backend of the matrix has is measured there and left out elsewhere;
    a non-default level is its own series, the default leaves the key as it was."""
    body = run_request(matrix={"backends": ["onnxruntime", "inductor"], "weights": ["constant"],
                               "opt_levels": ["default", "basic", "max-autotune-no-cudagraphs"]})
    run = post_run(client, ci_token, body).json()
    cells = {(c["spec"]["backend"], c["spec"]["opt_level"]): c["series_key"]
             for c in run["cells"]}
    assert sorted(cells) == [("inductor", "default"), ("inductor", "max-autotune-no-cudagraphs"),
                             ("onnxruntime", "basic"), ("onnxruntime", "default")]
    assert cells[("onnxruntime", "basic")].endswith("/opt_level=basic,sides=split")
    assert cells[("onnxruntime", "default")].endswith("/nographs/sides=split")


def test_a_thread_count_reaches_every_cell_spec_as_the_runner_option(
    client: TestClient, ci_token: str, session: Session
) -> None:
    body = run_request(matrix={"backends": ["eager", "onnxruntime"], "threads": 1})
    run = post_run(client, ci_token, body).json()
    assert run["cells"] and all(c["spec"]["threads"] == 1 for c in run["cells"])
    stored = session.scalars(select(Cell).where(Cell.run_id == run["id"])).all()
    assert len(stored) == len(run["cells"])
    assert all(c.spec["options"] == {"threads": 1, "sides": "split"} for c in stored)
    assert all(c["spec"]["sides"] == "split" for c in run["cells"])
    unset = post_run(client, ci_token, run_request(revision="other")).json()
    assert all(c["spec"]["threads"] is None for c in unset["cells"])


def test_the_design_of_a_cell_is_the_devices_default_unless_the_matrix_names_one(
    client: TestClient, ci_token: str, session: Session
) -> None:
    paired = post_run(client, ci_token, run_request(
        revision="paired", matrix={"backends": ["eager"], "sides": "paired"})).json()
    assert all(c["spec"]["sides"] == "paired" for c in paired["cells"])
    assert all(not c["series_key"].endswith("/sides=split") for c in paired["cells"])
    bad = post_run(client, ci_token, run_request(
        revision="bad", matrix={"backends": ["eager"], "sides": "both"}))
    assert bad.status_code == 422 and "sides" in bad.text


def test_refit_combinations_outside_tensorrt_are_left_out(
    client: TestClient, ci_token: str
) -> None:
    body = run_request(matrix={"backends": ["onnxruntime", "tensorrt"],
                               "weights": ["constant", "refit"], "device": "cuda"})
    run = post_run(client, ci_token, body).json()
    combos = {(c["spec"]["backend"], c["spec"]["weights"]) for c in run["cells"]}
    assert combos == {("onnxruntime", "constant"), ("tensorrt", "constant"),
                      ("tensorrt", "refit")}
    assert {c["queue"] for c in run["cells"]} == {"gpu"}


def test_same_idempotency_key_returns_the_same_run_with_200(
    client: TestClient, ci_token: str, session: Session
) -> None:
    first = post_run(client, ci_token, key="gha-run-42-attempt-1")
    again = post_run(client, ci_token, key="gha-run-42-attempt-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["created"] is False
    assert session.scalar(select(func.count()).select_from(Run)) == 1


def test_identical_request_without_key_returns_the_existing_run(
    client: TestClient, ci_token: str
) -> None:
    first = post_run(client, ci_token)
    # Same points listed in another order: the same matrix.
    reordered = run_request(matrix={"weights": ["tensor", "constant"]})
    again = post_run(client, ci_token, reordered)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    other_revision = post_run(client, ci_token, run_request(revision="def456"))
    assert other_revision.status_code == 201


def test_a_new_key_forces_a_new_run_of_an_identical_request(
    client: TestClient, ci_token: str
) -> None:
    first = post_run(client, ci_token, key="a")
    second = post_run(client, ci_token, key="b")
    assert second.status_code == 201 and second.json()["id"] != first.json()["id"]


def test_reusing_a_key_for_a_different_request_is_a_conflict(
    client: TestClient, ci_token: str
) -> None:
    post_run(client, ci_token, key="k1")
    response = post_run(client, ci_token, run_request(revision="other"), key="k1")
    assert response.status_code == 409
    assert "Idempotency-Key 'k1'" in response.json()["detail"]


BAD_REQUESTS = [
    ({"matrix": {"models": ["resnet9"]}}, "matrix.models[0]", "'resnet9' is not one of"),
    ({"matrix": {"backends": ["tvm"]}}, "matrix.backends[0]", "'tvm' is not one of"),
    ({"matrix": {"weights": ["frozen"]}}, "matrix.weights[0]", "'frozen' is not one of"),
    ({"matrix": {"precisions": ["int4"]}}, "matrix.precisions[0]", "'int4' is not one of"),
    ({"matrix": {"shape_modes": ["ragged"]}}, "matrix.shape_modes[0]", "is not one of"),
    ({"matrix": {"opt_levels": ["turbo"]}}, "matrix.opt_levels[0]", "is not one of"),
    ({"matrix": {"opt_levels": ["5"]}}, "matrix.opt_levels", "none of the backends"),
    ({"matrix": {"models": []}}, "matrix.models", "at least 1"),
    ({"matrix": {"batch_sizes": [0]}}, "matrix.batch_sizes[0]", "greater than or equal to 1"),
    ({"matrix": {"device": "tpu"}}, "matrix.device", "'tpu' is not one of cpu, cuda"),
    ({"matrix": {"weights": ["refit"]}}, "matrix", "no valid combination"),
    ({"matrix": {"timing": {"rounds": 3, "min_rounds": 5}}}, "matrix.timing.min_rounds",
     "must not exceed rounds"),
    ({"matrix": {"threads": 0}}, "matrix.threads", "greater than or equal to 1"),
    ({"matrix": {"timing": {"compile_cache": "warm"}}}, "matrix.timing.compile_cache",
     "'process' or 'host'"),
    ({"matrix": {"timing": {"builds": "fast"}}}, "matrix.timing.builds",
     "'pinned' or 'as-shipped'"),
    ({"matrix": {"timing": {"max_host_load": 0}}}, "matrix.timing.max_host_load",
     "greater than 0"),
    ({"matrix": {"timing": {"max_host_load": "busy"}}}, "matrix.timing.max_host_load",
     "valid number"),
    # strict JSON types: text, booleans and numbers are not each other
    ({"matrix": {"timing": {"max_host_load": "0.5"}}}, "matrix.timing.max_host_load",
     "valid number"),
    ({"matrix": {"timing": {"max_host_load": True}}}, "matrix.timing.max_host_load",
     "valid number"),
    ({"matrix": {"timing": {"profile": "yes"}}}, "matrix.timing.profile", "valid boolean"),
    ({"matrix": {"timing": {"profile": "true"}}}, "matrix.timing.profile", "valid boolean"),
    ({"matrix": {"timing": {"profile": 1}}}, "matrix.timing.profile", "valid boolean"),
    ({"matrix": {"timing": {"cuda_graphs": "false"}}}, "matrix.timing.cuda_graphs",
     "valid boolean"),
    ({"matrix": {"timing": {"rounds": "5"}}}, "matrix.timing.rounds", "valid integer"),
    ({"matrix": {"batch_sizes": ["1"]}}, "matrix.batch_sizes[0]", "valid integer"),
    ({"matrix": {"threads": True}}, "matrix.threads", "valid integer"),
    ({"matrix": {"colour": "red"}}, "matrix.colour", "unknown field"),
    # two processes on one GPU change each other's timing (benchmarks.timing_policy)
    ({"matrix": {"device": "cuda", "sides": "split"}}, "matrix.sides",
     "split is for CPU cells"),
    ({"priority": 1}, "priority", "unknown field"),
    ({"revision": ""}, "revision", "at least 1 character"),
    # display spoofing: a right-to-left override, a zero-width space, a C1 control
    ({"revision": "abc\u202edcba"}, "revision", "bidi-override characters (U+202E"),
    ({"revision": "v1\u200b.2"}, "revision", "(U+200B at position 2)"),
    ({"branch": "main\x85"}, "branch", "(U+0085"),
    ({"environment": {}}, "environment", "exactly one of pins or interpreter"),
    ({"environment": {"pins": ["onnxruntime==1.22"], "interpreter": "x"}}, "environment",
     "exactly one"),
]
BAD_PINS = [
    ("https://evil.example/onnxruntime.whl", "URLs and paths are not allowed"),
    ("-e git+https://x/y", "pip options"),
    ("--index-url=https://evil", "pip options"),
    ("onnxruntime[gpu]==1.22.0", "extras"),
    ('onnxruntime==1.22.0; python_version>"3"', "markers"),
    ("onnxruntime==1.22.0$(reboot)", "shell metacharacters"),
    ("onnxruntime>=1.22", "only exact pins"),
    ("requests==2.32.0", "not on the allowlist"),
    ("./onnxruntime", "URLs and paths"),
]


@pytest.mark.parametrize(("override", "field", "message"), BAD_REQUESTS,
                         ids=[f for _, f, _ in BAD_REQUESTS])
def test_invalid_requests_are_422_naming_the_field(
    client: TestClient, ci_token: str, session: Session, override: dict[str, Any], field: str,
    message: str,
) -> None:
    response = post_run(client, ci_token, run_request(**override))
    assert response.status_code == 422, response.text
    body = response.json()
    assert any(e["field"] == field and message in e["message"] for e in body["errors"]), body
    assert field in body["detail"]
    assert session.scalar(select(func.count()).select_from(Run)) == 0


@pytest.mark.parametrize(("pin", "why"), BAD_PINS, ids=[p for p, _ in BAD_PINS])
def test_malformed_or_unlisted_pins_are_refused(
    client: TestClient, ci_token: str, pin: str, why: str
) -> None:
    response = post_run(client, ci_token, run_request(environment={"pins": [pin]}))
    assert response.status_code == 422
    error = response.json()["errors"][0]
    assert error["field"] == "environment.pins" and why in error["message"]


def test_a_matrix_over_the_server_limit_is_refused(
    settings: Settings, ci_token: str
) -> None:
    with TestClient(create_app(settings.model_copy(update={"max_matrix_cells": 4}))) as client:
        body = run_request(matrix={"batch_sizes": [1, 2, 4]})  # 2 weights x 3 = 6 cells
        response = post_run(client, ci_token, body)
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "matrix: 6 cells is more than this server's limit of 4")


def test_a_body_over_the_size_limit_is_413(settings: Settings, ci_token: str) -> None:
    with TestClient(create_app(settings.model_copy(update={"max_body_bytes": 1024}))) as client:
        body = run_request(branch="b" * 150, revision="r" * 150, trigger="x" * 30)
        body["environment"] = {"pins": ["onnxruntime==1.22.0"] * 32}
        response = post_run(client, ci_token, body)
        assert response.status_code == 413
        assert "1024 bytes" in response.json()["detail"]
        small = post_run(client, ci_token)
        assert small.status_code == 201


def test_progress_and_verdict_follow_the_cells(
    client: TestClient, ci_token: str, read_token: str, session: Session
) -> None:
    run = post_run(client, ci_token).json()
    first, second = (cell["id"] for cell in run["cells"])

    spec = run_service.claim_cell(session, first)
    assert spec is not None
    session.commit()
    polled = client.get(f"/api/v1/runs/{run['id']}", headers=bearer(read_token)).json()
    assert polled["status"] == "running" and polled["progress"]["running"] == 1

    run_service.record_result(session, first, bench_result(spec, speedup=2.0))
    run_service.finish_run_if_complete(session, run["id"])
    session.commit()
    polled = client.get(f"/api/v1/runs/{run['id']}", headers=bearer(read_token)).json()
    assert polled["progress"]["done"] == 1 and polled["verdict"] is None
    done_cell = next(c for c in polled["cells"] if c["id"] == first)
    assert done_cell["result"]["speedup"] == 2.0 and done_cell["status"] == "done"

    run_service.claim_cell(session, second)
    run_service.fail_cell(session, second, "child killed by signal 9 (out of memory?)")
    assert run_service.finish_run_if_complete(session, run["id"]) is True
    session.commit()
    polled = client.get(f"/api/v1/runs/{run['id']}", headers=bearer(read_token)).json()
    assert polled["status"] == "failed" and polled["verdict"] == "error"
    # the failed cell first; the other cell's "no baseline yet" is told too, never hidden
    assert len(polled["reasons"]) == 2
    assert "child killed by signal 9" in polled["reasons"][0]
    assert "no baseline yet" in polled["reasons"][1]
    assert polled["finished_at"] is not None


def test_list_filters_and_pages_with_a_cursor(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    ids = [post_run(client, ci_token, run_request(revision=f"r{i}", branch=branch)).json()["id"]
           for i, branch in enumerate(["main", "dev", "main", "main"])]
    post_run(client, ci_token, run_request(project="other", revision="x"))

    page1 = client.get("/api/v1/runs?project=vision&branch=main&limit=2",
                       headers=bearer(read_token)).json()
    assert [r["id"] for r in page1["items"]] == [ids[3], ids[2]]
    page2 = client.get(f"/api/v1/runs?project=vision&branch=main&limit=2"
                       f"&cursor={page1['next_cursor']}", headers=bearer(read_token)).json()
    assert [r["id"] for r in page2["items"]] == [ids[0]] and page2["next_cursor"] is None
    queued = client.get("/api/v1/runs?status=queued", headers=bearer(read_token)).json()
    assert len(queued["items"]) == 5
    assert client.get("/api/v1/runs?limit=201", headers=bearer(read_token)).status_code == 422


def test_a_trigger_during_a_broker_outage_is_accepted_with_a_warning_and_a_retry_sends_it(
    settings: Settings, ci_token: str, session: Session
) -> None:
    """A real broker that is down (nothing listens on port 1), then a real Redis: the run is
    stored and accepted (201, not a 5xx: nothing failed), the answer's warning says its cells
    go when the broker is back, and the retry with the same key sends the cells it never
    sent."""
    import uuid

    from workers.celery_app import celery_for

    queue = f"test-broker-outage-{uuid.uuid4().hex[:8]}"
    down = settings.model_copy(update={"executor": "celery", "cpu_queue": queue,
                                       "broker_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(down)) as client:
        response = post_run(client, ci_token, key="retry-me")
    assert response.status_code == 201, response.text
    warning = response.json()["warning"]
    assert "not sent" in warning and "stored" in warning and "broker is back" in warning
    assert response.json()["status"] == "queued"
    assert session.scalar(select(func.count()).select_from(Cell).where(
        Cell.enqueued_at.is_(None))) == 2

    up = down.model_copy(update={"broker_url": "redis://127.0.0.1:6379/0"})
    try:
        with TestClient(create_app(up)) as client:
            again = post_run(client, ci_token, key="retry-me")
        assert again.status_code == 200 and again.json()["warning"] is None
        session.expire_all()
        assert session.scalar(select(func.count()).select_from(Cell).where(
            Cell.enqueued_at.is_(None))) == 0
        with celery_for(up).connection_for_write() as conn:
            # one message: a run's cells on one queue travel as a group
            import json

            messages = conn.default_channel.client.lrange(queue, 0, -1)
            assert [json.loads(m)["headers"]["task"] for m in messages] == [
                "speedwatch.run_cells"]
    finally:
        with celery_for(up).connection_for_write() as conn:
            conn.default_channel.client.delete(queue)
