"""`timing.compile_cache`: whether each process of a cell compiles afresh ("process", the
default: the interval covers what a new compile may choose) or the processes share the
worker's compile cache ("host": runtime variance only). Not part of the series key: both
measure the same speedup, with different noise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.spec import BenchSpec, SpecError
from benchmarks.timing_policy import TimingPolicy, default_timing


def test_the_default_compiles_afresh_in_every_process_on_both_devices() -> None:
    assert default_timing("cuda").compile_cache == "process"
    assert default_timing("cpu").compile_cache == "process"


def test_documents_and_spec_hashes_from_before_the_option_stay_equal() -> None:
    spec = BenchSpec()
    assert "compile_cache" not in spec.to_dict()["timing"]
    assert BenchSpec.from_dict(spec.to_dict()) == spec


def test_host_round_trips_and_keeps_the_series_key() -> None:
    spec = BenchSpec(timing=TimingPolicy(compile_cache="host")).validate()
    again = BenchSpec.from_dict(spec.to_dict())
    assert again.timing.compile_cache == "host"
    assert again.series_key("cpu") == BenchSpec().series_key("cpu")


def test_an_unknown_value_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"timing.compile_cache: 'warm' is not one of process, "
                                        r"host"):
        replace(BenchSpec(), timing=TimingPolicy(compile_cache="warm")).validate()
