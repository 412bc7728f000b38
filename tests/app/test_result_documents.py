"""POST /api/v1/results holds every part of a result document to its type: a hostile or
broken document is a 422 naming the field (never a 201, a 400 or a 500), and every
document the product writes is still stored.

Bodies are sent as JSON text, the way a client's bytes arrive: NaN, Infinity and 1e400 are
what Python's json module (which parses the body) reads as float specials.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.main import create_app
from app.models import Result
from app.services.common import canonical_hash
from benchmarks.document_values import (
    MAX_JSON_DEPTH,
    MAX_JSON_ITEMS,
    MAX_OPEN_KEYS,
    MAX_ROUND_SAMPLES,
    MAX_ROUNDS,
)
from benchmarks.result_schema import DOCUMENT_EXAMPLE
from devkit.factories import bearer, bench_result, ingest_body

DOCUMENTS = Path(__file__).parents[1] / "benchmarks" / "documents"
# The JSON text of a number no float holds, and of the float specials Python's json reads.
RAW_NUMBERS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "1e400": "1e400",
               "10**400": "1" + "0" * 400}


def post(client: TestClient, token: str, body: dict[str, Any] | str) -> Any:
    text = body if isinstance(body, str) else json.dumps(body)
    return client.post("/api/v1/results", content=text,
                       headers={**bearer(token), "Content-Type": "application/json"})


def stored(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(Result)) or 0)


def document(**at: Any) -> dict[str, Any]:
    """A valid document with values put at dotted paths ("evidence.timing.mode")."""
    doc = bench_result().to_dict()
    for path, value in at.items():
        target = doc
        *parents, leaf = path.split(".")
        for parent in parents:
            target = target.setdefault(parent, {}) if isinstance(target, dict) else \
                target[int(parent)]
        if isinstance(target, list):
            target[int(leaf)] = value
        else:
            target[leaf] = value
    return doc


def with_raw_number(path: str, raw: str) -> str:
    """The body of a valid document whose `path` holds the JSON text `raw`."""
    marker = "__raw_number__"
    return json.dumps(ingest_body(document(**{path: marker}))).replace(f'"{marker}"', raw)


def assert_refused(response: Any, field: str, session: Session) -> str:
    assert response.status_code == 422, response.text
    body = response.json()
    fields = [e["field"] for e in body["errors"]]
    assert field in fields, (field, body)
    assert stored(session) == 0
    return str(next(e["message"] for e in body["errors"] if e["field"] == field))


# ---- wrong types, however deep -----------------------------------------------------------

def test_a_string_where_a_kernel_count_belongs_is_a_422_naming_its_path(
    client: TestClient, ci_token: str, session: Session
) -> None:
    """Was a 201: the evidence was free-form, so "x" was stored as a kernel count."""
    body = ingest_body(document(**{"evidence.kernels_per_inference": {
        "baseline": "x", "candidate": 42.0}}))
    message = assert_refused(post(client, ci_token, body),
                             "result.evidence.kernels_per_inference.baseline", session)
    assert "number" in message


@pytest.mark.parametrize(("path", "value", "where"), [
    ("evidence.kernels_per_inference.candidate", -1.0, ""),
    ("evidence.kernels_per_inference.candidate", True, ""),
    ("evidence.kernels_per_inference", "x", ""),
    ("evidence.timing.mode", "fast", ""),
    ("evidence.timing.cuda_graphs", {"baseline": "yes"}, ".baseline"),
    ("evidence.timing.timing_seconds", "2s", ""),
    ("evidence.adaptive.timing_seconds", "x", ""),  # the verdict formats it as a number
    ("evidence.adaptive.log_half_width", 1e308, ""),  # and takes expm1 of it
    ("evidence.processes", [{"speedup": "fast"}], "[0].speedup"),
    ("evidence.sides.order", ["baseline", "eager"], "[1]"),
    ("fingerprint.packages.onnxruntime", 1, ""),  # installed versions are strings
    ("fingerprint.device_class", ["cpu"], ""),
    ("fingerprint.nvml_start.sm_clock_mhz", "1980", ""),
    ("fingerprint.throttled", "no", ""),
    ("spec.options.threads", "x", ""),  # the series key reads it as an integer
    ("spec.timing.cuda_graphs", "yes", ""),
    ("spec.batch_size", 1.5, ""),
    ("peak_memory_bytes.baseline", -1, ""),
    ("baseline.n", "6", ""),
    ("speedup.method", 7, ""),
    ("accuracy.passed", "true", ""),
    ("started_at", "x" * 41, ""),  # longer than the store's column
])
def test_a_wrong_type_anywhere_is_a_422_naming_its_path(
    client: TestClient, ci_token: str, session: Session, path: str, value: Any, where: str
) -> None:
    body = ingest_body(document(**{path: value}))
    assert_refused(post(client, ci_token, body), f"result.{path}{where}", session)


def test_a_single_kernel_count_is_kept_as_sent(
    client: TestClient, ci_token: str, session: Session
) -> None:
    """The runner counts each side; a client that counted one number sends that, and the
    regression's evidence sentence reads it ("kernels per inference 58 -> 161")."""
    response = post(client, ci_token, ingest_body(document(**{
        "evidence.kernels_per_inference": 58})))
    assert response.status_code == 201, response.text
    row = session.get(Result, response.json()["result_id"])
    assert row is not None and row.evidence["kernels_per_inference"] == 58


def test_an_unknown_key_of_a_closed_part_is_refused_and_of_an_open_part_kept(
    client: TestClient, ci_token: str, session: Session
) -> None:
    """Summaries, the speedup and the spec have no room for more; evidence and the
    fingerprint take new keys (a newer writer's), as bounded JSON."""
    refused = post(client, ci_token, ingest_body(document(**{"speedup.p_value": 0.01})))
    assert assert_refused(refused, "result.speedup.p_value", session) == "unknown field"
    kept = post(client, ci_token, ingest_body(document(**{
        "evidence.trt_layers_by_type": {"Convolution": 20, "Pooling": 1},
        "fingerprint.rack": "b7"})))
    assert kept.status_code == 201, kept.text


# ---- numbers: finite, and held by a float ------------------------------------------------

@pytest.mark.parametrize("raw", RAW_NUMBERS.values(), ids=list(RAW_NUMBERS))
@pytest.mark.parametrize("path", [
    "baseline_samples_ms.0",
    "baseline.median_ms",
    "speedup.ci_high",
    "accuracy.rel_l2",
    "compile_seconds",
    "duration_seconds",
    "peak_memory_bytes.baseline",
    "evidence.kernels_per_inference.baseline",
    "evidence.inductor_kernels",  # open-ended evidence: still a finite number
    "evidence.onnx_node_counts.Conv",
    "fingerprint.nvml_end.power_w",
    "spec.timing.max_seconds",
    "spec.options.ort_intra_op_threads",
])
def test_nan_infinity_and_numbers_no_float_holds_are_a_422_anywhere(
    client: TestClient, ci_token: str, session: Session, path: str, raw: str
) -> None:
    if path == "baseline_samples_ms.0":
        text = with_raw_number("baseline_samples_ms", "[[1.0, __x__]]").replace("__x__", raw)
        field = "result.baseline_samples_ms[0][1]"
    else:
        text = with_raw_number(path, raw)
        field = "result." + path
    assert_refused(post(client, ci_token, text), field, session)


# ---- sizes and depth -----------------------------------------------------------------------

def test_a_round_with_more_samples_than_any_timing_takes_is_a_422(
    client: TestClient, ci_token: str, session: Session
) -> None:
    rounds = [[1.0] * (MAX_ROUND_SAMPLES + 1)]
    body = ingest_body(document(baseline_samples_ms=rounds, candidate_samples_ms=rounds))
    message = assert_refused(post(client, ci_token, body),
                             "result.baseline_samples_ms[0]", session)
    assert str(MAX_ROUND_SAMPLES) in message


def test_more_rounds_than_any_measurement_takes_is_a_422(
    settings: Settings, ci_token: str, session: Session
) -> None:
    """A million rounds is more than the default body limit carries: a server that allows
    larger bodies still refuses it by the schema."""
    roomy = create_app(settings.model_copy(update={"max_body_bytes": 64 * 1024 * 1024}))
    text = json.dumps(ingest_body(document(**{"baseline_samples_ms": "__rounds__"})))
    rounds = "[" + ",".join(["[1.0]"] * (MAX_ROUNDS + 1)) + "]"
    with TestClient(roomy) as client:
        response = post(client, ci_token, text.replace('"__rounds__"', rounds))
    message = assert_refused(response, "result.baseline_samples_ms", session)
    assert str(MAX_ROUNDS) in message


@pytest.mark.parametrize(("path", "value", "field"), [
    ("evidence.graph_break_reasons", ["x"] * (MAX_JSON_ITEMS + 1),
     "result.evidence.graph_break_reasons"),
    ("evidence.onnx_node_counts", {f"Op{i}": 1 for i in range(MAX_JSON_ITEMS + 1)},
     "result.evidence.onnx_node_counts"),
    ("fingerprint.packages", {f"p{i}": "1.0" for i in range(MAX_OPEN_KEYS + 1)},
     "result.fingerprint.packages"),
    ("evidence.processes", [{}] * 65, "result.evidence.processes"),
    ("reason", "r" * 10_001, "result.reason"),
    ("evidence.notes", "n" * 10_001, "result.evidence.notes"),
    ("fingerprint.gpu", "g" * 1_001, "result.fingerprint.gpu"),
])
def test_oversize_lists_maps_and_strings_are_a_422(
    client: TestClient, ci_token: str, session: Session, path: str, value: Any, field: str
) -> None:
    assert_refused(post(client, ci_token, ingest_body(document(**{path: value}))), field,
                   session)


def test_too_many_keys_in_the_evidence_is_a_422(
    client: TestClient, ci_token: str, session: Session
) -> None:
    evidence = {f"k{i}": i for i in range(MAX_OPEN_KEYS + 1)}
    assert_refused(post(client, ci_token, ingest_body(document(evidence=evidence))),
                   "result.evidence", session)


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"x": value}
    return value


def test_an_open_ended_value_nested_too_deep_is_a_422_naming_where(
    client: TestClient, ci_token: str, session: Session
) -> None:
    body = ingest_body(document(**{"evidence.notes": nested(MAX_JSON_DEPTH + 1)}))
    field = "result.evidence.notes" + ".x" * MAX_JSON_DEPTH
    message = assert_refused(post(client, ci_token, body), field, session)
    assert f"deeper than {MAX_JSON_DEPTH} levels" in message
    ok = post(client, ci_token, ingest_body(document(**{
        "evidence.notes": nested(MAX_JSON_DEPTH)})))
    assert ok.status_code == 201, ok.text


@pytest.mark.parametrize("path", ["evidence.notes", "fingerprint.extra", "spec.options.o"])
def test_5000_levels_of_nesting_are_a_422_not_a_400(
    client: TestClient, ci_token: str, session: Session, path: str
) -> None:
    """Was a 400 "There was an error parsing the body": the JSON parser's recursion ran out
    before any schema saw the body."""
    text = with_raw_number(path, "[" * 5000 + "]" * 5000)
    response = post(client, ci_token, text)
    assert response.status_code == 422, response.text
    [error] = response.json()["errors"]
    assert error["field"].startswith("result." + path + "[0][0]")
    assert "nested deeper than" in error["message"]
    assert stored(session) == 0


def test_brackets_inside_strings_nest_nothing(
    client: TestClient, ci_token: str, session: Session
) -> None:
    reason = '[{"\\"' * 1000 + "]" * 10
    response = post(client, ci_token, ingest_body(document(reason=reason)))
    assert response.status_code == 201, response.text
    row = session.get(Result, response.json()["result_id"])
    assert row is not None and row.reason == reason


def test_deep_nesting_is_a_422_on_every_endpoint_that_takes_json(
    client: TestClient, ci_token: str
) -> None:
    response = client.post("/api/v1/runs", content='{"matrix": ' + "[" * 5000 + "]" * 5000
                           + "}", headers={**bearer(ci_token),
                                           "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"].startswith("matrix[0]")


# ---- what the product writes is stored ----------------------------------------------------

def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def test_the_documented_example_is_stored(
    client: TestClient, ci_token: str, session: Session
) -> None:
    """The OpenAPI example (a document `speedwatch bench --isolate --json` wrote) ingests as
    it is: clients copy it, and schemathesis starts from it."""
    example = client.get("/openapi.json").json()["components"]["schemas"]["ResultIngest"][
        "examples"][0]
    assert example["result"] == without_nulls(DOCUMENT_EXAMPLE)  # FastAPI drops them there
    response = post(client, ci_token, example)
    assert response.status_code == 201, response.text
    assert stored(session) == 1


@pytest.mark.parametrize("name", sorted(p.name for p in DOCUMENTS.glob("*.json")))
def test_every_document_the_product_wrote_is_stored(
    client: TestClient, ci_token: str, session: Session, name: str
) -> None:
    """Real documents of every shape (tests/benchmarks/documents: GPU and CPU, one process
    and adaptive over several, paired and split, failed, skipped)."""
    doc = json.loads((DOCUMENTS / name).read_text())
    response = post(client, ci_token, ingest_body(doc))
    if doc["spec"]["batch_size"] == 0:
        # the runner's record of a spec it refused: read back by the schema, refused by
        # the store, which takes only specs it could have measured
        assert assert_refused(response, "result.spec", session).startswith("batch_size: 0")
        return
    assert response.status_code == 201, response.text
    row = session.get(Result, response.json()["result_id"])
    assert row is not None
    assert row.document_hash == canonical_hash(doc), "stored as it was sent"


# ---- text no stored string may hold -------------------------------------------------------

@pytest.mark.parametrize(("path", "value", "field"), [
    # a bidi override makes text display as something else; labels refuse it too
    ("evidence.note", "ok \u202e)evil(", "result.evidence.note"),
    ("evidence.deep", {"a": ["fine", "x\u2066y"]}, "result.evidence.deep.a[1]"),
    ("reason", "accuracy \u202e", "result.reason"),
    # PostgreSQL holds no NUL: it used to fail at the database, naming no field
    ("fingerprint.hostname", "gpu\x00host", "result.fingerprint.hostname"),
    ("fingerprint.hostname", "line\nbreak", "result.fingerprint.hostname"),
    ("evidence.note", "a\x00b", "result.evidence.note"),
])
def test_nul_and_bidi_override_characters_are_a_422_naming_the_field(
    client: TestClient, ci_token: str, session: Session, path: str, value: Any, field: str,
) -> None:
    message = assert_refused(post(client, ci_token, ingest_body(document(**{path: value}))),
                             field, session)
    assert "must not contain U+" in message


def test_a_key_holding_a_nul_or_a_bidi_override_is_a_422(
    client: TestClient, ci_token: str, session: Session,
) -> None:
    for key in ("bad\x00key", "bad\u202ekey"):
        response = post(client, ci_token, ingest_body(document(evidence={key: 1})))
        assert response.status_code == 422, response.text
        assert "result.evidence" in [e["field"] for e in response.json()["errors"]]
    assert stored(session) == 0


def test_what_the_product_writes_never_holds_them_whatever_a_model_printed(
    client: TestClient, ci_token: str, session: Session,
) -> None:
    result = bench_result()
    result.reason = "the model printed \x00 and \u202e"
    result.evidence = {"note": "x\u2067y"}
    written = result.to_dict()
    assert written["reason"] == "the model printed \ufffd and \ufffd"
    assert written["evidence"]["note"] == "x\ufffdy"
    assert post(client, ci_token, ingest_body(written)).status_code == 201
    assert stored(session) == 1
