"""Parts of a stored result document read through the schema's types
(benchmarks.result_schema), for readers such as the verdict's notes: a reader of typed
fields then needs no guard of its own."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from benchmarks.result_schema import EvidenceDocument

_Part = TypeVar("_Part", bound=BaseModel)


def stored_part(model: type[_Part], value: object) -> _Part | None:
    """A part of a stored document as its schema types it, for a reader (the verdict's
    notes): None where it is absent, or refused by the schema (a result stored before that
    part was declared, or one built in a worker, which is checked by `BenchResult.check`
    rather than this schema)."""
    if not isinstance(value, dict):
        return None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


def stored_evidence(evidence: object) -> EvidenceDocument:
    """A stored result's evidence, typed: each declared part the schema holds, one it
    refuses left out (so one odd part does not hide the others from the reader)."""
    if not isinstance(evidence, dict):
        return EvidenceDocument()
    whole = stored_part(EvidenceDocument, evidence)
    if whole is not None:
        return whole
    kept = {name: evidence[name] for name in EvidenceDocument.model_fields
            if name in evidence
            and stored_part(EvidenceDocument, {name: evidence[name]}) is not None}
    return EvidenceDocument.model_validate(kept)
