"""Parts of a result document written and read through the schema's types
(benchmarks.result_schema): the harness writes the parts the verdict reads (the adaptive
record, the in-session comparison, the host's load) through `written`, so a misspelt or
mistyped field fails where it is made, and readers such as the verdict's notes read them
through `stored_part`/`stored_evidence`, so a reader of typed fields needs no guard of
its own."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from benchmarks.result_schema import EvidenceDocument

_Part = TypeVar("_Part", bound=BaseModel)


def written(part: BaseModel, *, unless_none: tuple[str, ...] = ()) -> dict[str, Any]:
    """A typed part as the document holds it: the fields given, None included (the
    harness has always written `"ratio": null` where there was none), except the fields
    in `unless_none`, which a document leaves out rather than holding null."""
    data = part.model_dump(exclude_unset=True)
    return {k: v for k, v in data.items() if v is not None or k not in unless_none}


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
