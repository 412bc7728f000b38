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

    var = max(between, within) / k,   half-width = t(1 - alpha/2, k - 1) * sqrt(var)

- `between` is the sample variance (k - 1 degrees of freedom) of the per-process log
  speedups. It estimates the whole variance of one process's value, its own level and its
  rounds' noise together, so `between / k` is the variance of the mean log speedup.
- `within` is the mean over processes of each process's paired round-bootstrap variance of
  the log speedup. It is a floor, not an addend: with k = 3 the between estimate rests on
  two degrees of freedom and is small by luck often enough, and k processes that happen
  to agree must not produce a CI narrower than their own rounds allow. (Adding it, as an
  earlier rule did, counted the rounds' noise twice; in simulation the max rule keeps
  coverage at or above 95% and is narrower: experiments/interval_coverage.py.)
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

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

from benchmarks.result import LatencySummary, Speedup
from benchmarks.vocabulary import Outcome

Rounds = Sequence[Sequence[float]]

# Upper bound on floats held by one vectorised chunk of resamples (about 64 MB of float64).
_CHUNK_ELEMENTS = 8_000_000


class StatsError(ValueError):
    """Samples that admit no statistic (empty, non-positive, unequal round counts)."""


def pooled_samples(samples: Rounds | Sequence[float]) -> npt.NDArray[np.float64]:
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
    arr = pooled_samples(samples)
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


def rounds_matrix(rounds: Rounds, side: str) -> Matrix:
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


def resampled_medians(
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


def round_bootstrap(
    baseline_rounds: Rounds, candidate_rounds: Rounds, *, rng: np.random.Generator,
    resamples: int, paired: bool = True,
) -> tuple[float, npt.NDArray[np.float64]]:
    """The point speedup (pooled median over pooled median) and its round-bootstrap
    replicates: paired (the same round indices for both sides: they ran back to back, so a
    slow moment cancels in the ratio), or, for sides timed in separate processes, each
    side's rounds resampled on their own. Rounds are resampled, not single iterations:
    iterations of one round share the machine's momentary state.

    The one bootstrap of the project: a result's own interval (`speedup_ci`) and a verdict's
    ratio of two results (app.detection.verdict) both draw from it."""
    if paired and len(baseline_rounds) != len(candidate_rounds):
        raise StatsError(
            f"paired rounds differ in number: baseline {len(baseline_rounds)}, "
            f"candidate {len(candidate_rounds)}"
        )
    base = rounds_matrix(baseline_rounds, "baseline")
    cand = rounds_matrix(candidate_rounds, "candidate")
    value = float(np.median(pooled_samples(baseline_rounds))
                  / np.median(pooled_samples(candidate_rounds)))
    n_base, n_cand = len(baseline_rounds), len(candidate_rounds)
    idx = rng.integers(0, n_base, size=(resamples, n_base))
    idx_cand = idx if paired else rng.integers(0, n_cand, size=(resamples, n_cand))
    ratios = resampled_medians(base, idx) / resampled_medians(cand, idx_cand)
    return value, np.asarray(ratios, dtype=np.float64)


def _bootstrap_ratios(
    baseline_rounds: Rounds, candidate_rounds: Rounds, resamples: int, seed: int,
    paired: bool = True,
) -> tuple[float, npt.NDArray[np.float64]]:
    return round_bootstrap(baseline_rounds, candidate_rounds,
                           rng=np.random.default_rng(seed), resamples=resamples, paired=paired)


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
        np.median(pooled_samples([r for b, _ in per_process for r in b]))
        / np.median(pooled_samples([r for _, c in per_process for r in c]))
    )
    half = units_half_width(logs, float(np.mean(within)), confidence)
    return Speedup(
        value=value,
        ci_low=float(value * np.exp(-half)),
        ci_high=float(value * np.exp(half)),
        confidence=confidence,
        method=PROCESSES_METHOD,
    )


def units_half_width(logs: Sequence[float], within: float, confidence: float = 0.95) -> float:
    """The log half-width of the mean of k units' log speedups, each variance counted once.

    A unit's log speedup varies by its process's own level AND by its rounds' noise, so the
    sample variance of the k values (`between`) already estimates the whole variance of one
    unit. Adding the rounds' variance (`within`, the units' mean bootstrap variance) on top,
    as this rule once did, counted it twice. It stays only as a floor: k units that agree by
    luck cannot claim more precision than their own rounds allow. So the variance of one
    unit is max(between, within), with Student t on k - 1 degrees of freedom
    (experiments/interval_coverage.py: coverage by simulation, and on A/A data)."""
    k = len(logs)
    if k < 2:
        raise StatsError("a half-width over units needs at least two")
    between = float(np.var(np.asarray(logs, dtype=np.float64), ddof=1))
    t = float(_scipy_stats.t.ppf(1 - (1 - confidence) / 2, k - 1))
    return t * float(np.sqrt(max(between, within) / k))


def optimal_rounds(unit_seconds: float, round_seconds: float, round_variance: float,
                   unit_variance: float) -> float | None:
    """Rounds per unit that buy the most precision per second (Kalibera and Jones, "Rigorous
    benchmarking in reasonable time", 2013): sqrt(c_unit / c_round * var_round / var_unit),
    where c_unit is what a new unit costs before its first round (start, build, warm-up),
    c_round one round, var_round the variance of one round's log ratio and var_unit that of a
    unit's own level. None when the unit level does not vary (more rounds always pay)."""
    if unit_variance <= 0 or round_seconds <= 0 or unit_seconds < 0 or round_variance < 0:
        return None
    return float(np.sqrt(unit_seconds / round_seconds * round_variance / unit_variance))


# The variance a promise of resolution rests on is an upper bound of the measured one at
# this one-sided level: three units estimate a variance on two degrees of freedom, and a
# runner must not promise a width its next cell will miss.
RESOLVABLE_BOUND = 0.8


def resolvable_half_width(unit_variance: float, unit_timing_seconds: float,
                          budget_seconds: float, *, units: int, sides: int = 2,
                          confidence: float = 0.95) -> float | None:
    """The relative half-width a comparison reaches when each of its `sides` measurements
    spends `budget_seconds` of timing on units of `unit_timing_seconds` whose log speedups
    vary by `unit_variance`, measured over `units` units (the smallest change the runner
    can decide at that budget). The variance is taken at its RESOLVABLE_BOUND upper bound
    (chi-square on units - 1 degrees of freedom)."""
    if unit_variance < 0 or unit_timing_seconds <= 0 or budget_seconds <= 0 or units < 2:
        return None
    df = units - 1
    bound = unit_variance * df / float(_scipy_stats.chi2.ppf(1 - RESOLVABLE_BOUND, df))
    n = max(2, int(budget_seconds // unit_timing_seconds))
    t = float(_scipy_stats.t.ppf(1 - (1 - confidence) / 2, n - 1))
    return float(np.expm1(t * np.sqrt(sides * bound / n)))


def unit_variance(units: Sequence[Speedup], confidence: float = 0.95) -> float:
    """The variance of one unit's log speedup, each variance counted once (floored by the
    units' own rounds), for allocation and for what a budget can resolve."""
    if len(units) < 2:
        raise StatsError("a unit variance needs at least two units")
    z = float(_scipy_stats.norm.ppf(1 - (1 - confidence) / 2))
    within = float(np.mean([(log_half_width(u) / z) ** 2 for u in units]))
    return max(float(np.var([math.log(u.value) for u in units], ddof=1)), within)


def round_variance(units: Sequence[Speedup], rounds: Sequence[int],
                   confidence: float = 0.95) -> float:
    """The variance of one round's log speedup, from each unit's own interval (its
    bootstrap variance times its rounds), averaged over the units."""
    z = float(_scipy_stats.norm.ppf(1 - (1 - confidence) / 2))
    return float(np.mean([(log_half_width(u) / z) ** 2 * max(1, r)
                          for u, r in zip(units, rounds, strict=True)]))


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
    # the baseline's software identity (benchmarks.identity): its digest, and its
    # environment's, so a measurement can tell "nothing changed" before it times anything
    software: str | None = None
    environment: str | None = None
    result_id: int | None = None


def classify_ratio(ratio: float, low: float, high: float, threshold: float) -> Outcome:
    """The one decision rule, for a ratio new / reference and its interval [low, high].

    "regression": the interval excludes no change (high < 1) AND the estimate is past the
    threshold (ratio < 1 - threshold); "improvement" mirrored; "pass": the interval's low
    end is at or above 1 - threshold (a drop of the threshold's size is ruled out);
    otherwise "undecided".

    Why not "the whole interval past the threshold": that asks for 95% certainty that a drop
    EXCEEDS the threshold, so a real drop of 1.5x the threshold is confirmed only when the
    half-width is under half the threshold, which a loaded 2-core CPU does not reach in
    minutes (real 4.5-6% drops beside two co-tenants: intervals 2-5% wide, most of them
    "suspect" though every one excluded 0). The interval says whether the change is real, the
    threshold how large a real change must be to matter: the rule of significance plus
    magnitude most regression alerting uses. Its cost: a real drop just under the threshold
    is called a regression when its estimate lands past it (at most about half the time at
    exactly the threshold, falling fast below it), where the stricter rule left it
    undecided.
    """
    if high < 1 and ratio < 1 - threshold:
        return "regression"
    if low > 1 and ratio > 1 + threshold:
        return "improvement"
    if low >= 1 - threshold:
        return "pass"
    return "undecided"


def pool_ratios(intervals: Sequence[tuple[float, float, float]], confidence: float = 0.95
                ) -> tuple[float, float, float]:
    """(ratio, low, high) of several measurements of ONE ratio, each (ratio, low, high) at
    `confidence`: the inverse-variance mean on the log scale (a fixed-effect meta-analysis),
    each standard error read back from its half-width with the normal quantile. A half-width
    built on a t quantile gives back a larger error than it had, so the pooled interval errs
    wide. Why pool: a suspect comparison and its re-measure both measured the same drop; the
    second alone overruling the first (a pass after a suspect) threw the first away."""
    if not intervals:
        raise StatsError("nothing to pool")
    z = float(_scipy_stats.norm.ppf(1 - (1 - confidence) / 2))
    weights, means = [], []
    for ratio, low, high in intervals:
        if not 0 < low <= ratio <= high:
            raise StatsError(f"not an interval around its ratio: {ratio} [{low}, {high}]")
        se = (math.log(high) - math.log(low)) / 2 / z
        if se <= 0:
            raise StatsError("an interval of no width cannot be weighed")
        weights.append(1 / se ** 2)
        means.append(math.log(ratio))
    total = sum(weights)
    mean = sum(w * m for w, m in zip(weights, means, strict=True)) / total
    half = z / math.sqrt(total)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


@dataclass(frozen=True)
class Decision:
    """The comparison of a speedup with its reference, and whether it is settled.

    outcome: one of `classify_ratio`'s (a real change past the threshold, "pass", or
    "undecided"), or "precise" (no reference; CI narrow enough).
    """

    outcome: Outcome
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
    return Decision(classify_ratio(ratio, low, high, reference.threshold), ratio, low, high, h)
