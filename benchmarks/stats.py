"""Statistics of paired latency rounds: pure functions on plain numbers (no torch).

The speedup is the ratio of pooled medians, baseline over candidate. Its confidence interval
comes from a bootstrap that resamples whole ROUNDS, the same round indices for both sides:

- Rounds, not single iterations, are the independent unit. Iterations within a round share
  the machine's momentary state (clocks, caches, a noisy neighbour), so resampling them one
  by one would pretend to more independent evidence than there is and give too narrow a CI.
- The same indices for both sides keep the pairing: round i of the baseline and round i of
  the candidate ran back to back, so slow periods that hit both cancel in the ratio instead
  of widening the interval.
- The statistic inside the bootstrap is the same one reported (ratio of medians of the
  pooled samples of the drawn rounds), so the interval is an interval of the number shown,
  and `speedup.value == baseline.median_ms / candidate.median_ms` holds exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from benchmarks.result import LatencySummary, Speedup

Rounds = Sequence[Sequence[float]]

# Upper bound on floats held by one vectorised chunk of resamples (about 64 MB of float64).
_CHUNK_ELEMENTS = 8_000_000


class StatsError(ValueError):
    """Samples that admit no statistic (empty, non-positive, unequal round counts)."""


def _pooled(samples: Rounds | Sequence[float]) -> npt.NDArray[np.float64]:
    flat: list[float] = []
    for item in samples:
        if isinstance(item, (int, float)):
            flat.append(float(item))
        else:
            flat.extend(float(x) for x in item)
    arr = np.asarray(flat, dtype=np.float64)
    if arr.size == 0:
        raise StatsError("no samples")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise StatsError("latency samples must be positive finite numbers")
    return arr


def summary(samples: Rounds | Sequence[float]) -> LatencySummary:
    """Summary of all samples pooled (rounds flattened), in the unit they came in (ms)."""
    arr = _pooled(samples)
    p05, p25, p50, p75, p95 = np.percentile(arr, [5, 25, 50, 75, 95])
    return LatencySummary(
        n=int(arr.size),
        median_ms=float(p50),
        iqr_ms=float(p75 - p25),
        p05_ms=float(p05),
        p95_ms=float(p95),
        mean_ms=float(arr.mean()),
    )


Matrix = npt.NDArray[np.float64] | list[npt.NDArray[np.float64]]


def _as_matrix(rounds: Rounds, side: str) -> Matrix:
    """A (rounds x iters) matrix when rounds are equally long, else a list of arrays."""
    arrays = [np.asarray(r, dtype=np.float64) for r in rounds]
    if not arrays or any(a.size == 0 for a in arrays):
        raise StatsError(f"{side}: every round needs at least one sample")
    for a in arrays:
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise StatsError(f"{side}: latency samples must be positive finite numbers")
    if len({a.size for a in arrays}) == 1:
        return np.stack(arrays)
    return arrays


def _resampled_medians(
    data: Matrix,
    idx: npt.NDArray[np.intp],
) -> npt.NDArray[np.float64]:
    """Median of the pooled samples of the rounds in each row of `idx` (resamples x rounds)."""
    if isinstance(data, np.ndarray):
        n_res, n_rounds = idx.shape
        per = max(1, _CHUNK_ELEMENTS // (n_rounds * data.shape[1]))
        out = np.empty(n_res, dtype=np.float64)
        for start in range(0, n_res, per):
            block = data[idx[start:start + per]]  # (chunk, rounds, iters)
            out[start:start + per] = np.median(block.reshape(block.shape[0], -1), axis=1)
        return out
    # Ragged rounds (only when a caller built them so): slower, still exact.
    return np.asarray([np.median(np.concatenate([data[i] for i in row])) for row in idx])


def speedup_ci(
    baseline_rounds: Rounds,
    candidate_rounds: Rounds,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Speedup:
    """Speedup (baseline median / candidate median) with a paired round bootstrap CI.

    The percentile interval is widened to contain the point estimate if it does not (it can
    miss by a hair with very few rounds); a CI that excludes its own estimate would be
    rejected by `BenchResult.check` and means nothing to a reader.
    """
    if len(baseline_rounds) != len(candidate_rounds):
        raise StatsError(
            f"paired rounds differ in number: baseline {len(baseline_rounds)}, "
            f"candidate {len(candidate_rounds)}"
        )
    if not 0 < confidence < 1:
        raise StatsError(f"confidence: {confidence!r} must be in (0, 1)")
    if resamples < 1:
        raise StatsError(f"resamples: {resamples!r} must be positive")
    base = _as_matrix(baseline_rounds, "baseline")
    cand = _as_matrix(candidate_rounds, "candidate")
    value = float(np.median(_pooled(baseline_rounds)) / np.median(_pooled(candidate_rounds)))
    n_rounds = len(baseline_rounds)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_rounds, size=(resamples, n_rounds))
    ratios = _resampled_medians(base, idx) / _resampled_medians(cand, idx)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return Speedup(
        value=value,
        ci_low=float(min(low, value)),
        ci_high=float(max(high, value)),
        confidence=confidence,
        method="paired-round-bootstrap",
    )
