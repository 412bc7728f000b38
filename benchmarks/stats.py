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

Several processes (`combine_processes`). A round bootstrap sees only the noise WITHIN one
process. Between processes there is more: cuDNN's algorithm choice, memory placement and
compiled code differ per process and shift a whole process's speedup at once, so the CIs of
two independent processes often exclude each other. Measuring a cell in k processes and
treating the process as the top-level unit fixes that. The interval is a variance-components
interval on the log scale:

    var = between / k + within / k,   half-width = t(1 - alpha/2, k - 1) * sqrt(var)

- `between` is the sample variance (k - 1 degrees of freedom) of the per-process log
  speedups. On its own, `between / k` already estimates the variance of the mean log speedup
  (it contains within-process noise too), but with k = 3 it rests on two degrees of
  freedom and is small by luck often enough; k processes that happen to agree must not
  produce a CI narrower than the processes' own measurement noise allows.
- `within` is the mean over processes of each process's paired round-bootstrap variance of
  the log speedup. Adding `within / k` is that floor; it is deliberately conservative (it
  counts within-process noise twice in expectation, at most a factor sqrt(2) on the width).
- Student t with k - 1 degrees of freedom, not the normal: with so few top-level units the
  uncertainty of the variance estimate itself matters (t is 4.30 for k = 3, 12.7 for k = 2,
  so k = 3 is the practical minimum).
- Why not a two-level bootstrap (resample processes, then rounds within them): with k = 3
  there are only 10 distinct process resamples, and the percentile bootstrap of a mean of
  k units is known to under-cover badly for small k (its width behaves like a normal
  interval with variance (k-1)/k * s^2/k), i.e. it is too narrow exactly where it matters.
- The interval is centred on the reported value (ratio of the medians of all processes'
  samples pooled, the same definition as for one process), so it always contains it.
For k = 1 the function returns exactly `speedup_ci` of that process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

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


def _check_args(resamples: int, confidence: float) -> None:
    if not 0 < confidence < 1:
        raise StatsError(f"confidence: {confidence!r} must be in (0, 1)")
    if resamples < 1:
        raise StatsError(f"resamples: {resamples!r} must be positive")


def _bootstrap_ratios(
    baseline_rounds: Rounds, candidate_rounds: Rounds, resamples: int, seed: int,
    paired: bool = True,
) -> tuple[float, npt.NDArray[np.float64]]:
    """The point speedup and its round-bootstrap replicates: paired (the same round
    indices for both sides), or, for sides timed in separate processes, each side's
    rounds resampled on their own."""
    if paired and len(baseline_rounds) != len(candidate_rounds):
        raise StatsError(
            f"paired rounds differ in number: baseline {len(baseline_rounds)}, "
            f"candidate {len(candidate_rounds)}"
        )
    base = _as_matrix(baseline_rounds, "baseline")
    cand = _as_matrix(candidate_rounds, "candidate")
    value = float(np.median(_pooled(baseline_rounds)) / np.median(_pooled(candidate_rounds)))
    rng = np.random.default_rng(seed)
    n_base, n_cand = len(baseline_rounds), len(candidate_rounds)
    idx = rng.integers(0, n_base, size=(resamples, n_base))
    idx_cand = idx if paired else rng.integers(0, n_cand, size=(resamples, n_cand))
    ratios = _resampled_medians(base, idx) / _resampled_medians(cand, idx_cand)
    return value, np.asarray(ratios, dtype=np.float64)


def speedup_ci(
    baseline_rounds: Rounds,
    candidate_rounds: Rounds,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    paired: bool = True,
) -> Speedup:
    """Speedup (baseline median / candidate median) with a round bootstrap CI: paired,
    or unpaired for sides timed in separate processes.

    The percentile interval is widened to contain the point estimate if it does not (it can
    miss by a hair with very few rounds); a CI that excludes its own estimate would be
    rejected by `BenchResult.check` and means nothing to a reader.
    """
    _check_args(resamples, confidence)
    value, ratios = _bootstrap_ratios(baseline_rounds, candidate_rounds, resamples, seed,
                                      paired)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return Speedup(
        value=value,
        ci_low=float(min(low, value)),
        ci_high=float(max(high, value)),
        confidence=confidence,
        method="paired-round-bootstrap" if paired else "round-bootstrap",
    )


PROCESSES_METHOD = "processes-variance-components"


def combine_processes(
    per_process: Sequence[tuple[Rounds, Rounds]],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    paired: bool = True,
) -> Speedup:
    """One speedup from k independent processes' rounds (baseline, candidate).

    Process j's bootstrap uses seed + j, the seed its own child used for its own CI, so the
    first process alone reproduces a single-process run. See the module docstring for why
    the interval is t-based variance components rather than a two-level bootstrap.
    `paired=False`: each unit is a pair of adjacent processes, one per side (a split
    measurement); the within-unit variance then comes from resampling each side's rounds
    on their own, and the between-unit variance holds the process-to-process noise of both.
    """
    _check_args(resamples, confidence)
    k = len(per_process)
    if k == 0:
        raise StatsError("no processes")
    if k == 1:
        base, cand = per_process[0]
        return speedup_ci(base, cand, resamples=resamples, confidence=confidence, seed=seed,
                          paired=paired)
    logs, within = [], []
    for j, (base, cand) in enumerate(per_process):
        try:
            value_j, ratios = _bootstrap_ratios(base, cand, resamples, seed + j, paired)
        except StatsError as exc:
            raise StatsError(f"process {j + 1}: {exc}") from None
        logs.append(np.log(value_j))
        within.append(float(np.var(np.log(ratios), ddof=1)) if resamples > 1 else 0.0)
    value = float(
        np.median(_pooled([r for b, _ in per_process for r in b]))
        / np.median(_pooled([r for _, c in per_process for r in c]))
    )
    between = float(np.var(logs, ddof=1))
    t = float(_scipy_stats.t.ppf(1 - (1 - confidence) / 2, k - 1))
    half = t * float(np.sqrt(between / k + float(np.mean(within)) / k))
    return Speedup(
        value=value,
        ci_low=float(value * np.exp(-half)),
        ci_high=float(value * np.exp(half)),
        confidence=confidence,
        method=PROCESSES_METHOD,
    )


# ---- deciding a comparison (adaptive measurement and the verdict share this rule) ----------


def log_half_width(speedup: Speedup) -> float:
    """Half-width of the speedup's CI on the log scale (the larger side if asymmetric)."""
    return float(max(np.log(speedup.ci_high / speedup.value),
                     np.log(speedup.value / speedup.ci_low)))


@dataclass(frozen=True)
class Reference:
    """What a new speedup is compared with: a baseline speedup and how well it is known.

    `log_half` is the baseline's own CI half-width on the log scale (0 for a fixed
    reference such as a window median); `threshold` the relative drop that is a regression.
    `speedup=None` means there is no baseline yet: then a measurement is decided once it
    is precise enough to judge the NEXT one at the threshold (half-width <= threshold / 2).
    """

    threshold: float
    speedup: float | None = None
    log_half: float = 0.0


@dataclass(frozen=True)
class Decision:
    """The comparison of a speedup with its reference, and whether it is settled.

    outcome: "pass" (the ratio's CI lies above 1 - threshold), "regression" (below it),
    "precise" (no reference; CI narrow enough), or "undecided".
    """

    outcome: str
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    log_half: float

    @property
    def decided(self) -> bool:
        return self.outcome != "undecided"


def ratio_interval(new: Speedup, reference: Reference, confidence: float = 0.95) -> tuple[
        float, float, float]:
    """(ratio, low, high) of new / reference speedup.

    The two intervals are independent measurements, so their log half-widths add in
    quadrature (each is a t or percentile 95% half-width: sqrt(h1^2 + h2^2) is the half-width
    of the sum of two independent normal errors at the same level; with t quantiles it errs
    on the wide side). `confidence` is that of the inputs; it is not re-derived here.
    """
    del confidence
    if reference.speedup is None or reference.speedup <= 0:
        raise StatsError("reference: a positive speedup is needed for a ratio")
    ratio = new.value / reference.speedup
    half = float(np.sqrt(log_half_width(new) ** 2 + reference.log_half ** 2))
    return ratio, float(ratio * np.exp(-half)), float(ratio * np.exp(half))


def decide(new: Speedup, reference: Reference) -> Decision:
    """Whether `new` settles its comparison with `reference` at the reference's threshold."""
    if not 0 <= reference.threshold < 1:
        raise StatsError(f"threshold: {reference.threshold!r} must be in [0, 1)")
    h = log_half_width(new)
    if reference.speedup is None:
        precise = h <= reference.threshold / 2
        return Decision("precise" if precise else "undecided", None, None, None, h)
    ratio, low, high = ratio_interval(new, reference)
    limit = 1 - reference.threshold
    outcome = "regression" if high < limit else "pass" if low >= limit else "undecided"
    return Decision(outcome, ratio, low, high, h)
