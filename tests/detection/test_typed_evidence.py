"""The verdict reads a result's evidence through the document schema's own types: the
harness's fields are declared once (benchmarks.result_schema), uploads are held to them,
and a stored part the schema refuses is left out of the reading, not guessed at."""

from __future__ import annotations

import copy
import typing
from dataclasses import replace

import pytest
from pydantic import ValidationError

from app.detection.notes import gpu_shared_note, host_load_note, measurement_notes
from benchmarks import stats
from benchmarks.result_schema import DOCUMENT_EXAMPLE, BenchResultDocument, error_path
from benchmarks.stored_parts import stored_evidence
from benchmarks.vocabulary import Outcome
from tests.detection.test_verdict import result

ADAPTIVE = {"processes": 3, "timing_seconds": 4.0, "stopped_by": "decided",
            "outcome": "pass", "mode": "adaptive"}


def test_a_part_the_schema_refuses_is_left_out_and_the_others_still_read() -> None:
    evidence = {"adaptive": ADAPTIVE, "comparison": {"mode": "interleaved", "ratio": "fast"}}
    typed = stored_evidence(evidence)
    assert typed.comparison is None
    assert typed.adaptive is not None and typed.adaptive.processes == 3
    notes = measurement_notes(replace(result(10.0, 5.0), evidence=evidence))
    assert "measurement: decided after 3 processes (4.0 s of timing)" in notes


def test_a_merged_host_load_reads_as_the_guards_note() -> None:
    loaded = replace(result(10.0, 5.0), fingerprint={"host_load": {
        "other_cores": 1.25, "peak_cores": 1.9, "cores": 2, "threshold": 0.5, "units": 6,
        "units_loaded": 2, "loaded": True, "remeasured": [{"unit": 3, "other_cores": 1.4}]}})
    note = host_load_note(loaded)
    assert note is not None
    assert note.startswith("host busy: other processes kept 1.2 of 2 cores busy while timing "
                           "(2 of 6 units past the 0.5-core guard, 1 re-measured)")
    quiet = replace(loaded, fingerprint={"host_load": {"other_cores": 0.1, "loaded": False}})
    assert host_load_note(quiet) is None


@pytest.mark.parametrize(("where", "value", "field"), [
    (("fingerprint", "host_load"), {"other_cores": "2"}, "fingerprint.host_load.other_cores"),
    (("fingerprint", "host_load"), {"loaded": "yes"}, "fingerprint.host_load.loaded"),
    (("evidence", "comparison"), {"ratio_ci": [0.9]}, "evidence.comparison.ratio_ci"),
    (("evidence", "comparison"), {"control_variate": 1}, "evidence.comparison.control_variate"),
])
def test_an_upload_is_held_to_the_types_the_verdict_reads(
    where: tuple[str, str], value: dict[str, object], field: str
) -> None:
    document = copy.deepcopy(DOCUMENT_EXAMPLE)
    document[where[0]][where[1]] = value
    with pytest.raises(ValidationError) as caught:
        BenchResultDocument.model_validate(document)
    assert field in {error_path(e["loc"]) for e in caught.value.errors()}


@pytest.mark.parametrize(("ratio", "low", "high"), [
    (1.20, 1.10, 1.30),   # a real improvement past the threshold
    (0.80, 0.75, 0.85),   # a real regression
    (1.00, 0.99, 1.01),   # pass
    (0.98, 0.90, 1.05),   # undecided
])
def test_every_outcome_the_decision_rule_gives_is_one_a_document_may_hold(
        ratio: float, low: float, high: float) -> None:
    """The harness writes stats.classify_ratio's word into evidence.adaptive.outcome; the
    schema takes its words from the same vocabulary (an improvement was once refused, so an
    improved cell's upload failed and the verdict lost its adaptive record)."""
    outcome = stats.classify_ratio(ratio, low, high, 0.03)
    evidence = {"adaptive": {"outcome": outcome, "processes": 3}}
    assert stored_evidence(evidence).adaptive is not None
    assert stored_evidence(evidence).adaptive.outcome == outcome  # type: ignore[union-attr]
    assert set(typing.get_args(Outcome)) >= {outcome}


def test_processes_that_saw_a_newer_gpu_process_read_as_the_gpu_guards_note() -> None:
    processes = [{"speedup": 2.6, "gpu_processes": {"present": 1, "newer": 0}},
                 {"speedup": 2.5, "gpu_processes": {"present": 2, "newer": 1}},
                 {"speedup": 2.6, "gpu_processes": {"present": 1, "newer": 0}}]
    shared = replace(result(10.0, 5.0), evidence={
        "processes": processes, "adaptive": {**ADAPTIVE, "gpu_remeasured": [2, 2]}})
    note = gpu_shared_note(shared)
    assert note is not None and note.startswith(
        "GPU shared: in 1 of 3 processes another process made a CUDA context on the GPU "
        "while they measured (2 re-measured)")
    assert note in measurement_notes(shared)
    alone = replace(shared, evidence={"processes": [{**p, "gpu_processes": {
        "present": 1, "newer": 0}} for p in processes], "adaptive": ADAPTIVE})
    assert gpu_shared_note(alone) is None
    one_process = replace(shared, evidence={"gpu_processes": {"present": 1, "newer": 2}})
    assert (gpu_shared_note(one_process) or "").startswith("GPU shared: in 1 of 1 processes")
