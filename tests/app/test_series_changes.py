"""GET /api/v1/series/{key}/changes on literal histories stored through the real ingest
path: where the speedup moved, the first revision after it, and the versions that changed
between the segment before and the segment after."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from devkit.factories import bearer, tiny_spec
from tests.app._asserts import assert_needs_token, assert_unknown_id
from tests.app.detection_docs import body, measured

SPEC = tiny_spec(backend="onnxruntime")
KEY = SPEC.series_key("cpu")
OLD = {"onnxruntime": "1.22.0", "torch-tensorrt": "2.6.0"}
NEW = {"onnxruntime": "1.22.0", "torch-tensorrt": "2.7.0"}
# small point-to-point wiggle, as real runs have
WIGGLE = (0.000, 0.012, -0.008, 0.005, -0.011, 0.009, -0.004, 0.007, -0.006, 0.010, 0.003,
          -0.009)


def seed(client: TestClient, token: str, history: list[tuple[str, float, dict[str, str]]],
         **measure: Any) -> list[dict[str, Any]]:
    stored = []
    for revision, speedup, packages in history:
        response = client.post("/api/v1/results", headers=bearer(token), json=body(
            measured(speedup, spec=SPEC, packages=packages, **measure), revision))
        assert response.status_code == 201, response.text
        stored.append(response.json())
    return stored


def changes(client: TestClient, token: str, **params: Any) -> dict[str, Any]:
    response = client.get(f"/api/v1/series/{KEY}/changes", params=params,
                          headers=bearer(token))
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def test_a_step_is_attributed_to_the_first_revision_after_it_with_the_package_that_moved(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    # 12 points a side: with an outlier among them, 10 are too few for the detector's
    # p <= 0.001 (it would rather miss a change than cry wolf)
    before = [(f"v1.{i}", 2.61 * (1 + WIGGLE[i]), OLD) for i in range(12)]
    before[0] = ("v1.0", before[0][1], {**OLD, "torch-tensorrt": "2.5.0"})  # long ago
    before[6] = ("v1.6", 1.2, OLD)  # one outlier is not a change point
    before[11] = ("v1.11", 2.61, NEW)  # one run on a stray environment names nothing
    after = [(f"v2.{i}", 1.68 * (1 + WIGGLE[i]), NEW) for i in range(12)]
    stored = seed(client, ci_token, before + after)

    found = changes(client, read_token)

    assert found["series_key"] == KEY and found["searched_points"] == 24
    [change] = found["changes"]
    assert change["direction"] == "regression"
    assert change["revision"] == "v2.0" and change["previous_revision"] == "v1.11"
    assert change["run_id"] == stored[12]["run_id"]
    assert change["result_id"] == stored[12]["result_id"]
    assert abs(change["before"] - 2.61) < 0.03 and abs(change["after"] - 1.68) < 0.02
    assert change["versions"] == [
        {"package": "torch-tensorrt", "before": "2.6.0", "after": "2.7.0"}]
    date = change["created_at"][:10]
    low, high = change["relative_change_ci_low"], change["relative_change_ci_high"]
    assert low < change["relative_change"] < high < 0
    assert change["sentence"] == (
        f"speedup {change['before']:.2f}x -> {change['after']:.2f}x "
        f"({change['relative_change']:+.0%}; 95% CI {low:+.0%} to {high:+.0%}) from revision "
        f"v2.0 ({date}); torch-tensorrt 2.6.0 -> 2.7.0")
    assert "-35%" in change["sentence"]
    assert "interval" in change["test"]


def test_a_flat_history_has_no_change_and_a_step_in_the_code_names_no_package(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    seed(client, ci_token, [(f"v{i}", 2.0 * (1 + WIGGLE[i]), OLD) for i in range(10)])
    assert changes(client, read_token)["changes"] == []
    seed(client, ci_token, [(f"w{i}", 2.5 * (1 + WIGGLE[i]), OLD) for i in range(10)])
    [change] = changes(client, read_token)["changes"]
    assert change["direction"] == "improvement" and change["revision"] == "w0"
    assert change["versions"] == []
    assert change["sentence"].endswith("; no installed version changed")


def test_only_the_newest_limit_points_are_searched(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    seed(client, ci_token, [(f"a{i}", 2.0 * (1 + WIGGLE[i]), OLD) for i in range(8)]
         + [(f"b{i}", 1.5 * (1 + WIGGLE[i]), NEW) for i in range(8)])
    assert [c["revision"] for c in changes(client, read_token)["changes"]] == ["b0"]
    newest = changes(client, read_token, limit=8)
    assert newest["searched_points"] == 8 and newest["changes"] == []


def test_changes_need_a_token_a_known_series_and_a_sane_limit(
    client: TestClient, read_token: str
) -> None:
    assert_needs_token(client, "GET", f"/api/v1/series/{KEY}/changes")
    assert_unknown_id(client, "GET", "/api/v1/series/no/such/series/changes",
                      bearer(read_token), "no/such/series")
    for limit in (0, 7, 2001):
        response = client.get(f"/api/v1/series/{KEY}/changes", params={"limit": limit},
                              headers=bearer(read_token))
        assert response.status_code == 422 and "limit" in response.json()["detail"]


# sixteen speedups that wiggle by 1% and drop 3% after the eighth
WIDE_STEP = (2.016, 1.988, 2.004, 1.98, 2.008, 2.02, 1.996, 1.984, 1.9206, 1.9478, 1.9594,
             1.9361, 1.9245, 1.9516, 1.94, 1.9555)


def test_the_search_reads_each_stored_interval_unless_the_result_came_without_samples(
    client: TestClient, ci_token: str, read_token: str
) -> None:
    """Results that each say +-5% cannot show a 3% step among sixteen; the same speedups
    ingested without raw samples carry only their sender's word, so the search goes by the
    series' scatter and shows it (as `speedwatch detect` does without intervals)."""
    history = [(f"v{i}", s, OLD) for i, s in enumerate(WIDE_STEP)]
    seed(client, ci_token, history, half_width=0.05)
    assert changes(client, read_token)["changes"] == []
    seed(client, ci_token, [(f"u{i}", s, OLD) for i, s in enumerate(WIDE_STEP)],
         half_width=0.05, samples=False)
    found = changes(client, read_token, limit=16)
    assert [(c["revision"], c["direction"]) for c in found["changes"]] == [
        ("u8", "regression")]
    assert "interval" not in found["changes"][0]["test"]
