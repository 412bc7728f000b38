"""What got slower: each result keeps a profile of each side, and two results of one model
(a regression and its baseline, or any two) are diffed row by row.

Profiles here are written as benchmarks.profile writes them (the measured ones come from
real runs: tests/benchmarks/test_profiles.py); the API stores, serves and diffs them."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from benchmarks.profile import document
from benchmarks.spec import BenchSpec
from devkit.factories import bearer, tiny_spec
from tests.app.detection_docs import body, measured

NODES = [("/conv1/Conv", "Conv", 1.0, 300.0), ("/fc/Gemm", "Gemm", 1.0, 60.0),
         ("/relu/Relu", "Relu", 1.0, 40.0)]


def profiled(speedup: float, nodes: list[tuple[str, str, float, float]],
             spec: BenchSpec | None = None) -> Any:
    eager = [("aten::mkldnn_convolution", "aten::mkldnn_convolution", 1.0, 900.0)]
    return measured(speedup, spec=spec, evidence={"profile": {
        "baseline": document("torch.profiler", "operators", 1, eager),
        "candidate": document("onnxruntime", "nodes", 1, nodes)}})


def post(client: TestClient, token: str, result: Any, revision: str) -> int:
    response = client.post("/api/v1/results", json=body(result, revision), headers=bearer(token))
    assert response.status_code == 201, response.text
    return int(response.json()["result_id"])


def test_a_results_profile_is_served_side_by_side(client: TestClient, ci_token: str) -> None:
    result_id = post(client, ci_token, profiled(2.0, NODES), "v1")
    response = client.get(f"/api/v1/results/{result_id}/profile", headers=bearer(ci_token))
    assert response.status_code == 200, response.text
    sides = response.json()["sides"]
    assert sides["candidate"]["what"] == "nodes" and sides["baseline"]["what"] == "operators"
    assert sides["candidate"]["entries"][0] == {"name": "/conv1/Conv", "group": "Conv",
                                               "calls": 1.0, "us": 300.0}


def test_a_result_without_a_profile_and_an_unknown_result_are_404s_saying_which(
    client: TestClient, ci_token: str,
) -> None:
    plain = post(client, ci_token, measured(2.0), "v1")
    response = client.get(f"/api/v1/results/{plain}/profile", headers=bearer(ci_token))
    assert response.status_code == 404
    assert response.json()["detail"].startswith(f"result {plain} has no profile")
    unknown = client.get("/api/v1/results/999999/profile", headers=bearer(ci_token))
    assert unknown.status_code == 404
    missing = client.get(f"/api/v1/results/profile-diff?base={plain}&head=999999",
                         headers=bearer(ci_token))
    assert missing.status_code == 404 and "result 999999 not found" in missing.text


def test_the_diff_names_the_node_that_appeared_and_accounts_for_the_change(
    client: TestClient, ci_token: str,
) -> None:
    base = post(client, ci_token, profiled(2.0, NODES), "v1")
    # a custom op appeared (+90 us) and the ReLU it sits before was fused away (-40 us)
    fused = [("/conv1/Conv", "Conv", 1.0, 300.0), ("/fc/Gemm", "Gemm", 1.0, 60.0),
             ("/custom/Op", "CustomOp", 1.0, 90.0)]
    head = post(client, ci_token, profiled(1.6, fused), "v2")
    response = client.get(f"/api/v1/results/profile-diff?base={base}&head={head}",
                          headers=bearer(ci_token))
    assert response.status_code == 200, response.text
    got = response.json()
    candidate = got["sides"]["candidate"]
    assert candidate["matched_by"] == "name"
    assert candidate["change_us"] == pytest.approx(50.0)  # +90 appeared, -40 vanished
    first = candidate["rows"][0]
    assert (first["name"], first["change"], first["delta_us"]) == ("/custom/Op", "appeared", 90)
    assert first["share"] == pytest.approx(1.8)
    assert {r["name"]: r["change"] for r in candidate["rows"]}["/relu/Relu"] == "vanished"
    assert candidate["explained"] == pytest.approx(1.0)
    assert got["largest"].startswith("candidate: /custom/Op new (+90.0 us per inference")


def test_the_regressions_evidence_names_the_largest_contributor_and_its_diff_is_served(
    client: TestClient, ci_token: str,
) -> None:
    post(client, ci_token, profiled(2.0, NODES), "v1")
    post(client, ci_token, profiled(1.6, [*NODES, ("/custom/Op", "CustomOp", 1.0, 90.0)]),
         "v2")
    (regression,) = client.get("/api/v1/regressions", headers=bearer(ci_token)).json()["items"]
    assert "what got slower: candidate /custom/Op new (+90.0 us per inference, 100% of the " \
        "change" in regression["evidence"]
    response = client.get(f"/api/v1/regressions/{regression['id']}/profile-diff",
                          headers=bearer(ci_token))
    assert response.status_code == 200, response.text
    assert response.json()["head_result_id"] == regression["opened_by_result_id"]


def test_two_models_are_a_422_naming_head(client: TestClient, ci_token: str) -> None:
    small = post(client, ci_token, profiled(2.0, NODES), "v1")
    other = post(client, ci_token, profiled(2.0, NODES, spec=tiny_spec(model="resnet50")), "v1")
    response = client.get(f"/api/v1/results/profile-diff?base={small}&head={other}",
                          headers=bearer(ci_token))
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "head"
    assert "a profile diff compares one model" in response.text


def test_a_stored_result_is_read_back_with_its_environment(
    client: TestClient, ci_token: str,
) -> None:
    result_id = post(client, ci_token, profiled(2.0, NODES), "v1")
    got = client.get(f"/api/v1/results/{result_id}", headers=bearer(ci_token)).json()
    assert (got["project"], got["revision"]) == ("vision", "v1")
    assert got["pins"] == ["onnxruntime==1.22.0"]
    assert got["document"]["spec"]["model"] == "resnet18"
    assert got["document"]["series_key"] == got["series_key"]


def test_the_regression_page_shows_what_got_slower_and_a_compare_page_too(
    client: TestClient, ci_token: str,
) -> None:
    first = post(client, ci_token, profiled(2.0, NODES), "v1")
    post(client, ci_token, profiled(1.6, [*NODES, ("/custom/Op", "CustomOp", 1.0, 90.0)]),
         "v2")
    (regression,) = client.get("/api/v1/regressions", headers=bearer(ci_token)).json()["items"]
    client.cookies.set("speedwatch_token", ci_token)
    page = client.get(f"/regressions/{regression['id']}").text
    assert "What got slower: candidate" in page and "/custom/Op" in page
    assert "these rows account for 100% of the change" in page
    base_run = client.get(f"/api/v1/results/{first}", headers=bearer(ci_token)).json()["run_id"]
    compare = client.get(f"/compare?base={base_run}&head={regression['opened_by_run_id']}")
    assert compare.status_code == 200 and "/custom/Op" in compare.text
    client.cookies.clear()


def test_the_pages_link_a_repro_archive_holding_the_bundle(
    client: TestClient, ci_token: str,
) -> None:
    import io
    import json
    import tarfile

    result_id = post(client, ci_token, profiled(2.0, NODES), "v1")
    client.cookies.set("speedwatch_token", ci_token)
    response = client.get(f"/results/{result_id}/repro.tar.gz")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
        names = sorted(tar.getnames())
        spec = json.loads(tar.extractfile(f"repro-{result_id}/spec.json").read())  # type: ignore[union-attr]
    assert names == [f"repro-{result_id}/{n}" for n in (
        "README.md", "environment.json", "fingerprint.json", "repro.sh", "result.json",
        "spec.json")]
    assert spec["model"] == "resnet18"
    assert client.get("/results/999999/repro.tar.gz").status_code == 404
    client.cookies.clear()


def test_a_trigger_may_turn_profiling_off_and_its_cells_carry_that(
    client: TestClient, ci_token: str, session: Any,
) -> None:
    from app.models import Cell
    from devkit.factories import run_request

    response = client.post("/api/v1/runs", headers=bearer(ci_token),
                           json=run_request(matrix={"timing": {"profile": False}}))
    assert response.status_code == 201, response.text
    specs = [c.spec for c in session.query(Cell).filter_by(run_id=response.json()["id"])]
    assert specs and all(s["timing"]["profile"] is False for s in specs)
    refused = client.post("/api/v1/runs", headers=bearer(ci_token),
                          json=run_request(revision="x2", matrix={"timing": {"profile": "maybe"}}))
    assert refused.status_code == 422 and "matrix.timing.profile" in refused.text


def _readme(client: TestClient, result_id: int, **headers: str) -> str:
    import io
    import tarfile

    response = client.get(f"/results/{result_id}/repro.tar.gz", headers=headers)
    assert response.status_code == 200, response.text
    with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
        member = tar.extractfile(f"repro-{result_id}/README.md")
        assert member is not None
        return member.read().decode()


def test_the_repro_readme_names_the_configured_public_url_never_the_requests_host(
    settings: Settings, client: TestClient, ci_token: str,
) -> None:
    result_id = post(client, ci_token, profiled(2.0, NODES), "v1")
    client.cookies.set("speedwatch_token", ci_token)
    unset = _readme(client, result_id, host="evil.example")
    assert "evil.example" not in unset
    assert "on the Speedwatch server that stored it." in unset
    public = settings.model_copy(update={"public_url": "https://speedwatch.example.com/"})
    with TestClient(create_app(public)) as configured:
        configured.cookies.set("speedwatch_token", ci_token)
        named = _readme(configured, result_id, host="evil.example")
    assert "evil.example" not in named
    assert "on https://speedwatch.example.com." in named
    client.cookies.clear()
