"""How a bisect chooses its steps and words its answer, with the measurements stood in:
each step's result is stored as a worker stores a real one, with a speedup the test
decides from the step's pins, so every branch of the search is exercised in seconds (the
real measurement is tests/workers/test_bisect_measured.py).

The releases are read from a wheel directory through pip's own configuration, as the
service reads them from an index.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.config import Settings
from app.db import session_scope
from app.detection.policy import DetectionPolicy
from app.errors import InvalidRequest
from app.models import Cell, Regression, Run, Sweep
from app.schemas import BisectCreate
from app.services.policy import set_policy
from app.services.sweeps import cancel_sweep, create_bisect, stop_queued
from devkit.factories import bearer
from tests.app.detection_docs import body, measured
from tests.app.sweep_driver import allowing, drive, releases

PKG = "swbisect"
VERSIONS = [f"1.{i}" for i in range(9)]
PROJECT = "bisect-steps"
MATRIX = {"models": ["resnet18"], "backends": ["onnxruntime"], "width": 8, "image_size": 32}


def _slower_from(first: str, fast: float = 2.0, slow: float = 1.0, package: str = PKG):
    def speedup(pins: dict[str, str]) -> float:
        version = tuple(int(x) for x in pins[package].split("."))
        return slow if version >= tuple(int(x) for x in first.split(".")) else fast
    return speedup


def _bisect(settings: Settings, good: list[str], bad: list[str], **extra: object) -> int:
    with session_scope(settings) as session:
        set_policy(session, PROJECT, DetectionPolicy(threshold=0.1))
        sweep = create_bisect(session, BisectCreate.model_validate(
            {"project": PROJECT, "good": good, "bad": bad, "matrix": MATRIX, **extra}),
            settings=settings)
        return sweep.id


@pytest.fixture
def local(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    releases(tmp_path, monkeypatch, {PKG: VERSIONS, "swother": ["2.0", "2.1", "2.2", "2.3"]})
    return allowing(settings, PKG, "swother")


def test_the_first_slower_release_is_named_in_log2_steps_with_its_drop_and_ci(
    local: Settings,
) -> None:
    sweep_id = _bisect(local, [f"{PKG}==1.0"], [f"{PKG}==1.8"])
    with session_scope(local) as session:
        first = session.get(Sweep, sweep_id)
        assert first is not None
        # created with its first step only: the good environment, the reference
        assert [s["role"] for s in first.state["steps"]] == ["good"]
        assert first.state["packages"][0]["versions"] == VERSIONS

    done = drive(local, sweep_id, _slower_from("1.3"))

    assert done.status == "done"
    assert done.outcome is not None
    assert done.outcome.startswith(f"first slower in {PKG} 1.3 (1.2 fine): -50.0% [")
    steps = done.state["steps"]
    assert [s["role"] for s in steps[:2]] == ["good", "bad"]
    searched = [s["version"] for s in steps if s["role"] == "bisect"]
    assert len(searched) <= math.ceil(math.log2(len(VERSIONS) - 1))
    assert searched[0] == "1.4"  # the middle of 1.0 .. 1.8 first
    # each step's run was judged against the good environment
    with session_scope(local) as session:
        verdicts = {s["version"]: session.get(Run, s["run_id"]).verdict  # type: ignore[union-attr]
                    for s in steps if s["role"] == "bisect"}
    assert verdicts == {v: ("regression" if v >= "1.3" else "pass") for v in searched}


def test_a_release_that_cannot_be_measured_is_skipped_and_named_if_it_could_be_the_one(
    local: Settings,
) -> None:
    slower = _slower_from("1.3")
    sweep_id = _bisect(local, [f"{PKG}==1.0"], [f"{PKG}==1.8"])
    done = drive(local, sweep_id, lambda pins: None if pins[PKG] == "1.3" else slower(pins))
    assert done.outcome is not None
    assert done.outcome.startswith(f"first slower in {PKG} 1.4 or in one of 1.3, which could "
                                   "not be measured (1.2 fine)"), done.outcome
    failed = [s for s in done.state["steps"] if s["outcome"] == "failed"]
    assert [s["version"] for s in failed] == ["1.3"]
    assert "no wheel for this platform" in failed[0]["sentence"]


def test_a_drop_that_does_not_reproduce_ends_the_bisect_after_two_runs_and_says_so(
    local: Settings,
) -> None:
    sweep_id = _bisect(local, [f"{PKG}==1.0"], [f"{PKG}==1.8"])
    done = drive(local, sweep_id, lambda pins: 2.0)
    assert done.status == "done"
    assert [s["role"] for s in done.state["steps"]] == ["good", "bad"]
    assert done.outcome is not None
    assert done.outcome.startswith("the drop does not reproduce, nothing to bisect: bad "
                                   "environment: speedup")


def test_the_step_limit_stops_the_search_with_the_range_still_in_doubt(
    local: Settings,
) -> None:
    sweep_id = _bisect(local, [f"{PKG}==1.0"], [f"{PKG}==1.8"], max_steps=3)
    done = drive(local, sweep_id, _slower_from("1.3"))
    assert len(done.state["steps"]) == 3
    assert done.outcome == (f"{PKG}: stopped after 3 steps, the most this bisect may take; "
                            f"first slower in one of 1.1, 1.2, 1.3, 1.4 (1.0 fine)")


def test_with_several_packages_each_is_tried_alone_and_only_the_one_that_moved_is_searched(
    local: Settings,
) -> None:
    sweep_id = _bisect(local, [f"{PKG}==1.0", "swother==2.0"], [f"{PKG}==1.4", "swother==2.3"])
    done = drive(local, sweep_id, _slower_from("2.2", package="swother"))
    roles = [(s["role"], s["package"], s["version"]) for s in done.state["steps"]]
    assert roles[:4] == [("good", None, None), ("bad", None, None),
                         ("probe", PKG, "1.4"), ("probe", "swother", "2.3")]
    # the probes hold the other package at its good version
    assert done.state["steps"][2]["pins"] == [f"{PKG}==1.4", "swother==2.0"]
    assert done.state["steps"][3]["pins"] == [f"{PKG}==1.0", "swother==2.3"]
    assert all(p == "swother" for _, p, _ in roles[4:])
    assert done.outcome is not None
    assert done.outcome.startswith(f"swother moved; {PKG} 1.0 -> 1.4 alone: no drop; first "
                                   "slower in swother 2.2 (2.1 fine): -50.0% ["), done.outcome


def test_cancelling_takes_no_further_step_and_fails_the_queued_one(local: Settings) -> None:
    sweep_id = _bisect(local, [f"{PKG}==1.0"], [f"{PKG}==1.8"])
    with session_scope(local) as session:
        cancel_sweep(session, sweep_id, "someone")
    with session_scope(local) as session:
        assert stop_queued(session, sweep_id, local) == 1
    with session_scope(local) as session:
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None and sweep.status == "cancelled"
        assert sweep.outcome is not None and sweep.outcome.startswith(
            "cancelled by someone; so far: ")
        (step,) = sweep.state["steps"]
        assert step["outcome"] == "failed" and "cancelled" in step["sentence"]
        cells = session.scalars(select(Cell).join(Run, Run.id == Cell.run_id)
                                .where(Run.sweep_id == sweep_id)).all()
        assert [c.status for c in cells] == ["failed"]


@pytest.mark.parametrize(("good", "bad", "field", "words"), [
    ([f"{PKG}==1.0"], [f"{PKG}==1.0"], "bad", "same version of every allowlisted package"),
    ([f"{PKG}==1.0"], [f"{PKG}==1.8", "swother==2.1"], "good", "swother is pinned on one side"),
    (["left-pad==1.0"], ["left-pad==1.1"], "good", "not on the allowlist"),
])
def test_environments_that_cannot_be_bisected_are_refused_naming_the_field(
    local: Settings, good: list[str], bad: list[str], field: str, words: str,
) -> None:
    with pytest.raises(InvalidRequest) as refused, session_scope(local) as session:
        create_bisect(session, BisectCreate.model_validate(
            {"project": PROJECT, "good": good, "bad": bad, "matrix": MATRIX}),
            settings=local)
    assert refused.value.field == field and words in refused.value.message


def test_a_matrix_of_several_cells_is_refused_because_a_bisect_follows_one_series(
    local: Settings,
) -> None:
    with pytest.raises(InvalidRequest, match="a bisect follows one series") as refused, \
            session_scope(local) as session:
        create_bisect(session, BisectCreate.model_validate({
            "project": PROJECT, "good": [f"{PKG}==1.0"], "bad": [f"{PKG}==1.8"],
            "matrix": {**MATRIX, "weights": ["constant", "tensor"]}}), settings=local)
    assert refused.value.field == "matrix"


def test_a_regressions_bisect_starts_from_its_two_results_and_writes_its_answer_into_the_evidence(
    local: Settings, monkeypatch: pytest.MonkeyPatch, ci_token: str,
) -> None:
    """The regression was opened by ingested results whose installed versions differ in
    the test package only; the bisect rebuilds both environments from those versions."""
    monkeypatch.setenv("SPEEDWATCH_ENV_ALLOWLIST", f'{local.env_allowlist!r}'.replace("'", '"'))
    from app.config import get_settings
    from app.main import create_app

    get_settings.cache_clear()
    with TestClient(create_app(local)) as client:
        for revision, speedup, version in (("v1", 2.0, "1.0"), ("v2", 1.0, "1.8")):
            posted = client.post("/api/v1/results", headers=bearer(ci_token), json=body(
                measured(speedup, packages={"onnxruntime": "1.22.0", PKG: version}),
                revision, PROJECT))
            assert posted.status_code == 201, posted.text
        (regression,) = client.get("/api/v1/regressions", headers=bearer(ci_token),
                                   params={"project": PROJECT}).json()["items"]
        started = client.post("/api/v1/bisects", headers=bearer(ci_token), json={
            "project": PROJECT, "regression_id": regression["id"]})
        assert started.status_code == 201, started.text
        bisect = started.json()
        assert (bisect["kind"], bisect["package"], bisect["from_version"],
                bisect["to_version"]) == ("bisect", PKG, "1.0", "1.8")
        assert bisect["regression_id"] == regression["id"]
        # onnxruntime was the same on both sides: held, not searched
        assert bisect["holds"] == ["onnxruntime==1.22.0"]
        assert bisect["steps"][0]["pins"] == ["onnxruntime==1.22.0", f"{PKG}==1.0"]

        done = drive(local, bisect["id"], _slower_from("1.3"))
        assert done.outcome is not None and done.outcome.startswith(
            f"first slower in {PKG} 1.3 (1.2 fine): -50.0%")
        after = client.get(f"/api/v1/regressions/{regression['id']}",
                           headers=bearer(ci_token)).json()
        assert f"bisect {bisect['id']}: first slower in {PKG} 1.3 (1.2 fine)" in after["evidence"]
        page = client.get(f"/regressions/{regression['id']}",
                          cookies={"speedwatch_token": ci_token})
        assert page.status_code == 200
        assert f"bisect-{bisect['id']}-steps" in page.text and "first slower in" in page.text
    with session_scope(local) as session:
        row = session.get(Regression, regression["id"])
        assert row is not None and row.status == "open"  # a bisect only adds evidence
    get_settings.cache_clear()
