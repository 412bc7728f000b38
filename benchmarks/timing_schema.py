"""A timing policy as a pydantic model, made from its one declaration
(benchmarks.timing_policy.TimingPolicy): the result document's `spec.timing`, the API's request
(app.schemas.TimingIn) and the project file's [timing] table (cli.project_file) are each
`timing_model` of the same fields, so none of them lists a field of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, StrictBool, create_model

from benchmarks.document_values import Closed, Int, Number
from benchmarks.timing_policy import Knob, timing_fields


def _value_type(kind: type, knob: Knob, *, strict_names: bool) -> Any:
    if knob.choices is not None:
        return Literal[knob.choices]
    return {bool: StrictBool, int: Int, float: Number}[kind] if strict_names else kind


def optional_timing_field(kind: type, knob: Knob, *, described: bool = True
                          ) -> tuple[Any, Any]:
    """An override of one timing field (absent: the default), bounded as the field is."""
    return _value_type(kind, knob, strict_names=False) | None, Field(
        default=None, ge=knob.ge, gt=knob.gt, le=knob.le, lt=knob.lt,
        description=knob.description if described else None)


def timing_model(name: str, base: type[Any], field_for: Callable[[type, Any, Knob], Any], *,
                 module: str, doc: str | None = None,
                 names: tuple[str, ...] | None = None) -> type[Any]:
    """A pydantic model of TimingPolicy's fields (or `names` of them), one field each from
    `field_for(python type, default, Knob)`: how the API's request, the result document and
    the project file each take a timing policy, from its one declaration."""
    return create_model(name, __base__=base, __module__=module, __doc__=doc, **{
        field: field_for(kind, default, knob)
        for field, kind, default, knob in timing_fields() if names is None or field in names})


if TYPE_CHECKING:
    class TimingPolicyDocument(Closed):
        """benchmarks.timing_policy.TimingPolicy, field for field (made from its declaration)."""
else:
    TimingPolicyDocument = timing_model(
        "TimingPolicyDocument", Closed,
        lambda kind, default, knob: (_value_type(kind, knob, strict_names=True), default),
        module=__name__,
        doc="benchmarks.timing_policy.TimingPolicy, field for field (made from its declaration); "
            "whether the values are usable is BenchSpec.validate's question (and the "
            "runner's: a document of a refused policy records the refusal).")
