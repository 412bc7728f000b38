"""The measurement core reads documents through the typed schema (benchmarks.result_schema):
every document the product writes reads back unchanged, a broken one is refused naming the
field, and the child process that writes documents still runs without pydantic.

tests/benchmarks/documents holds real documents, written by
`python -m scripts.result_documents DIR --device cpu|cuda` (the cuda ones on an
H100): one process, adaptive over several processes paired and split, failed, skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.result import BenchResult, ResultError
from benchmarks.result_schema import DOCUMENT_EXAMPLE, BenchResultDocument

DOCUMENTS = Path(__file__).with_name("documents")


def real_documents() -> list[tuple[str, dict[str, Any]]]:
    found = [(p.name, json.loads(p.read_text())) for p in sorted(DOCUMENTS.glob("*.json"))]
    return [*found, ("result_example.json", DOCUMENT_EXAMPLE)]


@pytest.mark.parametrize(("name", "document"), real_documents(),
                         ids=[name for name, _ in real_documents()])
def test_every_real_document_reads_back_unchanged(name: str, document: dict[str, Any]) -> None:
    result = BenchResult.from_dict(document)
    assert result.to_dict() == document
    assert json.loads(result.to_json()) == document


def test_the_documents_cover_what_the_service_reads() -> None:
    """GPU evidence (kernel counts, CUDA-graph timing, NVML readings) and what a merge adds
    (processes, sides, adaptive), so the typed keys are checked against real values."""
    docs = dict(real_documents())
    gpu = docs["cuda-adaptive-split.json"]
    assert set(gpu["evidence"]["kernels_per_inference"]) == {"baseline", "candidate"}
    assert gpu["evidence"]["timing"]["mode"] == "graphs"
    assert {"processes", "sides", "adaptive"} <= set(gpu["evidence"])
    assert {"nvml_start", "nvml_end", "throttled"} <= set(gpu["fingerprint"])
    assert docs["cuda-single-nographs.json"]["evidence"]["timing"]["mode"] == "nographs"
    assert {r["status"] for r in docs.values()} == {"ok", "failed", "skipped"}


def test_a_broken_document_is_refused_naming_each_field() -> None:
    doc = json.loads((DOCUMENTS / "cuda-single.json").read_text())
    doc["evidence"]["kernels_per_inference"]["baseline"] = "x"
    doc["fingerprint"]["nvml_start"]["power_w"] = float("inf")
    with pytest.raises(ResultError) as refused:
        BenchResult.from_json(json.dumps(doc))
    assert str(refused.value) == (
        "evidence.kernels_per_inference.baseline: Input should be a valid number; "
        "fingerprint.nvml_start.power_w: Input should be a finite number")


def test_a_ok_document_without_a_speedup_is_refused_unless_it_is_one_side() -> None:
    doc = json.loads((DOCUMENTS / "cpu-single.json").read_text())
    doc["speedup"] = None
    with pytest.raises(ResultError, match=r"^speedup: status 'ok' needs a speedup$"):
        BenchResult.from_dict(doc)
    doc["spec"]["options"]["_side"] = "baseline"  # a child of a split measurement
    assert BenchResult.from_dict(doc).speedup is None


def _contradicted(change: Any) -> str:
    doc = json.loads((DOCUMENTS / "cpu-single.json").read_text())
    change(doc)
    with pytest.raises(ResultError) as refused:
        BenchResult.from_dict(doc)
    return str(refused.value)


def _set(path: str, value: Any) -> Any:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for part in parents:
            doc = doc[part]
        doc[last] = value
    return change


@pytest.mark.parametrize(("change", "refusal"), [
    # a speedup its own medians do not give (one opened a regression)
    (_set("speedup", {"value": 6.0, "ci_low": 5.5, "ci_high": 6.5}),
     r"^speedup\.value: 6 is not the ratio of the document's own medians \(5\.26968\)$"),
    (_set("speedup", {"value": 5e-324, "ci_low": 5e-324, "ci_high": 5e-324}),
     r"^speedup\.value: 4\.94066e-324 is not the ratio"),
    (_set("baseline.p05_ms", 1e9), r"^baseline: p05_ms <= median_ms <= p95_ms does not hold"),
    (_set("candidate.n", 10**9), r"^candidate\.n: n is 1000000000, the document holds \d+ "
                                 r"samples$"),
    (_set("status", "failed"), r"^speedup: a failed result has no speedup$"),
    (_set("spec.device", "cuda"), r"^series_key: a cpu series for a spec on device 'cuda'$"),
    (_set("started_at", "not-a-date"), r"^started_at: 'not-a-date' is not an ISO 8601 time$"),
], ids=["speedup", "tiny-speedup", "quantiles", "count", "failed-with-speedup",
        "device", "timestamp"])
def test_a_document_that_contradicts_itself_is_refused_naming_the_field(
        change: Any, refusal: str) -> None:
    import re

    assert re.search(refusal, _contradicted(change)), _contradicted(change)


def test_a_spec_with_negative_rounds_is_not_a_spec() -> None:
    from benchmarks.spec import BenchSpec, SpecError

    doc = json.loads((DOCUMENTS / "cpu-single.json").read_text())
    doc["spec"]["timing"]["rounds"] = -5
    with pytest.raises(SpecError, match=r"^timing\.rounds: -5 must be >= 1"):
        BenchSpec.from_dict(doc["spec"]).validate()


def test_the_schema_names_its_bounds_in_the_json_schema() -> None:
    """What a client reads in the OpenAPI document is what the reader enforces."""
    schema = BenchResultDocument.model_json_schema()
    rounds = schema["properties"]["baseline_samples_ms"]
    assert rounds["maxItems"] and rounds["items"]["maxItems"]
    assert rounds["items"]["items"] == {"exclusiveMinimum": 0, "type": "number"}
    evidence = schema["$defs"]["EvidenceDocument"]
    assert evidence["maxProperties"] and "any JSON value nested at most" in \
        evidence["additionalProperties"]["description"]


def test_the_child_that_writes_documents_runs_without_pydantic() -> None:
    """Children run where only torch and the backend under test are installed: importing
    what `python -m benchmarks.child` imports must not load the schema's pydantic."""
    code = ("import sys, benchmarks.child, benchmarks.runner, benchmarks.backends;"
            "from benchmarks.result import BenchResult;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'pydantic_core')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_a_spec_with_an_optimization_level_is_a_valid_document() -> None:
    """Every BenchSpec field has its place in the schema: a child measuring a non-default
    level wrote a document the reader refused ("spec.opt_level: unknown field"), found on
    an H100 when the opt_level axis met the typed schema."""
    import dataclasses

    from benchmarks.result_schema import SpecDocument
    from benchmarks.spec import BenchSpec

    spec_fields = {f.name for f in dataclasses.fields(BenchSpec)}
    assert spec_fields <= set(SpecDocument.model_fields), spec_fields - set(
        SpecDocument.model_fields)
    spec = BenchSpec(backend="onnxruntime", opt_level="basic").to_dict()
    assert SpecDocument.model_validate(spec).opt_level == "basic"
