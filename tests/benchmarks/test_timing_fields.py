"""Each timing field is declared once (benchmarks.timing_policy.TimingPolicy, with its bounds
and its API description); the API's request schema, the result document's schema and
BenchSpec.validate are made from that declaration, so they cannot drift apart."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from app.schemas import TimingIn
from benchmarks.spec import BenchSpec, SpecError
from benchmarks.timing_policy import TimingPolicy, timing_fields
from benchmarks.timing_schema import TimingPolicyDocument


def test_the_three_schemas_have_the_policy_s_fields_and_defaults() -> None:
    names = [f.name for f in dataclasses.fields(TimingPolicy)]
    assert list(TimingIn.model_fields) == names
    assert list(TimingPolicyDocument.model_fields) == names
    assert TimingPolicyDocument().model_dump() == dataclasses.asdict(TimingPolicy())


@pytest.mark.parametrize(("field", "value"), [
    ("processes", 17), ("processes", 0), ("max_host_load", 0), ("target_half_width", 0.5),
    ("builds", "fastest"), ("compile_cache", "shared"), ("rounds", "30"), ("profile", 1),
    ("max_host_load", True),
])
def test_the_api_and_a_stored_spec_refuse_the_same_value_naming_the_field(
        field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        TimingIn.model_validate({field: value})
    assert caught.value.errors()[0]["loc"] == (field,)
    spec = BenchSpec(timing=dataclasses.replace(TimingPolicy(), **{field: value}))
    with pytest.raises(SpecError, match=rf"^timing\.{field}: "):
        spec.validate()


def test_a_stored_spec_may_hold_the_harness_s_own_values_the_api_does_not_take() -> None:
    """max_processes 0 (no processes beyond `processes`) is the harness's default."""
    BenchSpec(timing=TimingPolicy(max_processes=0)).validate()
    with pytest.raises(ValidationError):
        TimingIn.model_validate({"max_processes": 0})


def test_every_field_says_what_kind_of_value_it_takes() -> None:
    for name, kind, default, _knob in timing_fields():
        assert isinstance(default, kind), name
