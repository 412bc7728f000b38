"""The run verdict as CI reads it from GET /api/v1/runs/{id}: each cell judged from its raw
samples against its series' baseline under the project's detection policy."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.main import create_app
from app.models import Project
from devkit.factories import bearer, bench_result, tiny_spec
from tests.app.detection_docs import body, measured


def post(client: TestClient, token: str, document: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v1/results", json=document, headers=bearer(token))
    assert response.status_code == 201, response.text
    stored: dict[str, Any] = response.json()
    return stored


def run_of(client: TestClient, token: str, stored: dict[str, Any]) -> dict[str, Any]:
    response = client.get(f"/api/v1/runs/{stored['run_id']}", headers=bearer(token))
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    return run


def test_a_clear_twenty_percent_drop_is_a_regression_with_readable_reasons(
    client: TestClient, ci_token: str
) -> None:
    post(client, ci_token, body(measured(2.0, evidence={"onnx_initializers": 20},
                                         packages={"onnxruntime": "1.22.0"}), "v1"))
    after = post(client, ci_token, body(
        measured(1.6, evidence={"onnx_initializers": 0}, packages={"onnxruntime": "1.23.0"}),
        "v2"))
    run = run_of(client, ci_token, after)
    assert run["verdict"] == "regression"
    text = " ".join(run["reasons"])
    assert "speedup 2.00x -> 1.60x" in text and "-20.0%" in text
    assert "the previous run on the branch (v1)" in text
    assert "slower, past the 3% threshold" in text
    # the evidence sentence says what changed between the two documents
    assert "onnxruntime 1.22.0 -> 1.23.0" in text


def test_the_same_speedup_again_passes(client: TestClient, ci_token: str) -> None:
    post(client, ci_token, body(measured(2.0), "v1"))
    run = run_of(client, ci_token, post(client, ci_token, body(measured(2.0), "v2")))
    assert run["verdict"] == "pass"
    # a pass says what it rests on: the comparison, with its interval and its baseline
    [reason] = run["reasons"]
    assert "speedup 2.00x -> 2.00x" in reason and "against the previous run on the branch (v1)" \
        in reason and reason.endswith("no change beyond 3%")


def test_a_failed_cell_is_an_error(client: TestClient, ci_token: str) -> None:
    post(client, ci_token, body(measured(2.0), "v1"))
    failed = bench_result(tiny_spec(), status="failed")
    run = run_of(client, ci_token, post(client, ci_token, body(failed, "v2")))
    assert run["verdict"] == "error"
    assert "cell failed: backend unavailable" in run["reasons"][0]


def test_the_baseline_comes_from_the_same_branch_only(
    client: TestClient, ci_token: str
) -> None:
    post(client, ci_token, body(measured(2.0), "main-1", branch="main"))
    post(client, ci_token, body(measured(1.6), "feature-1", branch="feature"))
    # main's next run compares with main-1 (2.0x), not the slower feature branch
    run = run_of(client, ci_token, post(client, ci_token, body(measured(2.0), "main-2")))
    assert run["verdict"] == "pass"


def test_a_pinned_baseline_run_is_used_when_the_project_says_so(
    client: TestClient, ci_token: str, session: Session
) -> None:
    pinned = post(client, ci_token, body(measured(2.0), "release"))
    post(client, ci_token, body(measured(1.6), "v2"))
    project = session.scalars(select(Project).where(Project.name == "vision")).one()
    project.detection = {"baseline": "pinned", "pinned_run_id": pinned["run_id"]}
    session.commit()
    # against the previous run (1.6x) this would pass; against the pinned 2.0x it regresses
    run = run_of(client, ci_token, post(client, ci_token, body(measured(1.6), "v3")))
    assert run["verdict"] == "regression"
    assert "the pinned run (release)" in " ".join(run["reasons"])


def test_a_window_baseline_is_steady_against_one_lucky_run(
    client: TestClient, ci_token: str, session: Session
) -> None:
    post(client, ci_token, body(measured(2.0), "v1"))
    project = session.scalars(select(Project).where(Project.name == "vision")).one()
    project.detection = {"baseline": "window", "window": 3}
    session.commit()
    post(client, ci_token, body(measured(2.0), "v2"))
    post(client, ci_token, body(measured(2.6), "v3"))  # one lucky run
    # against the previous run (2.6x) this would regress; the window's median is 2.0x
    run = run_of(client, ci_token, post(client, ci_token, body(measured(2.0), "v4")))
    assert run["verdict"] == "pass"


def test_an_ingest_run_judges_each_cell_once_as_it_grows(
    client: TestClient, ci_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every POST re-combines its ingest run's verdict; the cells judged by earlier POSTs
    keep their judgement instead of paying another bootstrap each (ingest latency)."""
    import app.services.detection as detection

    judged: list[str] = []
    real_judge = detection.judge_cell

    def counting_judge(document: Any, *args: Any, **kwargs: Any) -> Any:
        judged.append(document.series_key)
        return real_judge(document, *args, **kwargs)

    monkeypatch.setattr(detection, "judge_cell", counting_judge)
    post(client, ci_token, body(measured(2.0, spec=tiny_spec(batch_size=1)), "v1"))
    post(client, ci_token, body(measured(2.0, spec=tiny_spec(batch_size=2)), "v1"))
    post(client, ci_token, body(measured(2.0, spec=tiny_spec(batch_size=1)), "v2"))
    slower = post(client, ci_token, body(measured(1.6, spec=tiny_spec(batch_size=2)), "v2"))
    assert len(judged) == 4  # one judgement per posted result, none repeated
    run = run_of(client, ci_token, slower)
    # the run verdict still combines the remembered judgement of the first v2 cell (pass)
    # with the new one (regression)
    assert run["verdict"] == "regression"
    # the regressed cell's reasons come first; the remembered pass is still told after it
    assert "/bs2/" in run["reasons"][0] and "slower, past the 3% threshold" in run["reasons"][0]
    assert any("/bs1/" in reason and "no change beyond 3%" in reason
               for reason in run["reasons"][1:])


def test_results_posted_together_are_judged_shortly_after_their_responses(
    settings: Settings, ci_token: str
) -> None:
    """With a judging window (the production default), POST answers before the verdict
    exists; the verdict follows within the window, and a drop still opens its regression."""
    coalescing = settings.model_copy(update={"ingest_judge_delay_seconds": 2.0})
    with TestClient(create_app(coalescing)) as client:
        first = post(client, ci_token, body(measured(2.0), "w1"))
        second = post(client, ci_token, body(measured(1.6), "w2"))
        assert run_of(client, ci_token, second)["verdict"] is None  # not judged yet

        deadline = time.monotonic() + 20
        while run_of(client, ci_token, second)["verdict"] is None:
            assert time.monotonic() < deadline, "the judging window never closed"
            time.sleep(0.1)

        assert run_of(client, ci_token, first)["verdict"] == "pass"
        assert run_of(client, ci_token, second)["verdict"] == "regression"
