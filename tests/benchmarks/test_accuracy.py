"""Accuracy against the fp32 reference: literal tensors, known errors."""

from __future__ import annotations

import pytest
import torch

from benchmarks.accuracy import TOLERANCES, AccuracyError, compare, tolerance


def test_relative_l2_and_max_abs_on_a_literal_pair() -> None:
    ref = torch.tensor([3.0, 4.0])  # norm 5
    acc = compare(torch.tensor([3.0, 4.5]), ref, tol=0.2)
    assert acc.rel_l2 == pytest.approx(0.1)
    assert acc.max_abs == pytest.approx(0.5)
    assert acc.passed
    assert not compare(torch.tensor([3.0, 4.5]), ref, tol=0.05).passed


def test_errors_are_computed_in_float64_so_half_outputs_are_judged_fairly() -> None:
    ref = torch.full((1000,), 1.0, dtype=torch.float32)
    cand = ref.to(torch.float16) + torch.tensor(2.0**-10, dtype=torch.float16)
    acc = compare(cand, ref, tol=tolerance("fp16", "cpu"))
    assert acc.max_abs == 2.0**-10
    assert acc.rel_l2 == pytest.approx(2.0**-10)


def test_identical_outputs_have_zero_error() -> None:
    x = torch.randn(2, 10, generator=torch.Generator().manual_seed(0))
    acc = compare(x.clone(), x, tol=1e-3)
    assert (acc.rel_l2, acc.max_abs, acc.passed) == (0.0, 0.0, True)


def test_shape_mismatch_and_non_finite_outputs_cannot_be_compared() -> None:
    with pytest.raises(AccuracyError, match="shape"):
        compare(torch.zeros(2, 5), torch.zeros(2, 10), tol=1.0)
    with pytest.raises(AccuracyError, match="NaN or Inf"):
        compare(torch.tensor([1.0, float("inf")]), torch.tensor([1.0, 1.0]), tol=1.0)


def test_tolerances_loosen_with_precision_and_tf32_on_cuda() -> None:
    assert TOLERANCES["fp32"] < TOLERANCES["fp16"] < TOLERANCES["bf16"]
    assert tolerance("fp32", "cpu") == TOLERANCES["fp32"]
    assert TOLERANCES["fp32"] < tolerance("fp32", "cuda") <= TOLERANCES["fp16"]
    # int8 is judged looser still (quantized activations), an unknown precision not at all
    assert TOLERANCES["bf16"] < tolerance("int8", "cpu")
    with pytest.raises(ValueError, match="int4"):
        tolerance("int4", "cpu")
