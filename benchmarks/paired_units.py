"""Two environments compared in one session, from units taken in turns (benchmarks.adaptive).

Unit j of the candidate environment and unit j of the baseline environment ran back to
back, so the comparison is a paired one: a t interval on the pairs' log differences, each
variance counted once (`stats.units_half_width`). When eager ran the very same software in
both environments its paired differences are a control variate (`compare_levels`): the
host's movement between units moves eager and the candidate alike, and eager's expected
difference is known, 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

from benchmarks.result import Speedup
from benchmarks.stats import (
    Rounds,
    StatsError,
    log_half_width,
    pooled_samples,
    resampled_medians,
    rounds_matrix,
    units_half_width,
)


@dataclass(frozen=True)
class UnitsComparison:
    """Candidate-environment speedup over baseline-environment speedup, from units measured
    in turns (unit j of each side ran back to back): ratio of the two pooled speedups, with
    a t interval on the units' paired log differences (their variance, floored by their
    rounds' own, counted once as in `units_half_width`)."""

    ratio: float
    low: float
    high: float
    log_half: float
    pairs: int
    pair_variance: float  # of one pair's log difference
    # eager's paired differences adjusted the estimate (`compare_levels`)
    control_variate: bool = False


def compare_units(candidate: Sequence[Speedup], baseline: Sequence[Speedup],
                  ratio: float, confidence: float = 0.95) -> UnitsComparison:
    """`ratio` (the pooled speedups' ratio) with its interval from the paired units: unit j
    of the candidate against unit j of the baseline; an unpaired last unit is left out of
    the variance."""
    n = min(len(candidate), len(baseline))
    if n < 2:
        raise StatsError("a comparison of units needs at least two of each side")
    diffs = [math.log(c.value / b.value) for c, b in zip(candidate[:n], baseline[:n], strict=True)]
    z = float(_scipy_stats.norm.ppf(1 - (1 - confidence) / 2))
    within = float(np.mean([(log_half_width(c) / z) ** 2 + (log_half_width(b) / z) ** 2
                            for c, b in zip(candidate[:n], baseline[:n], strict=True)]))
    half = units_half_width(diffs, within, confidence)
    variance = max(float(np.var(diffs, ddof=1)), within)
    return UnitsComparison(ratio, ratio * math.exp(-half), ratio * math.exp(half), half, n,
                           variance)


def _log_median_draws(rounds: Rounds, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
    """The log of a side's pooled median over each resample of its rounds (a row of idx)."""
    return np.log(resampled_medians(rounds_matrix(rounds, "rounds"), idx))


def _round_indices(rounds: Rounds, resamples: int, seed: int) -> npt.NDArray[np.intp]:
    return np.random.default_rng(seed).integers(0, len(rounds), size=(resamples, len(rounds)))


def _log_median_variance(rounds: Rounds, resamples: int, seed: int) -> float:
    """The round-bootstrap variance of the log of a side's pooled median."""
    return float(np.var(_log_median_draws(rounds, _round_indices(rounds, resamples, seed)),
                        ddof=1))


@dataclass(frozen=True)
class _PairRoundNoise:
    """Round-bootstrap (co)variances of one pair's paired log differences: the candidate
    sides' (y) and eager's (x). Within one process round i of eager and of the candidate ran
    back to back, so they are drawn with the same round indices: a burst that slowed both
    sides of a round shows here as covariance, and the adjusted quantity y - beta * x loses
    it, as the fit does."""

    var_y: float
    var_x: float
    cov: float

    def adjusted(self, beta: float) -> float:
        return max(0.0, self.var_y + beta * beta * self.var_x - 2 * beta * self.cov)


def _pair_round_noise(cand_c: Rounds, eager_c: Rounds, cand_b: Rounds, eager_b: Rounds, *,
                      resamples: int, seed_c: int, seed_b: int) -> _PairRoundNoise:
    """The pair's y = log(base cand / cand cand) and x = log(base eager / cand eager) drawn
    jointly; a process whose eager ran another number of rounds than its candidate is drawn
    apart (no covariance claimed)."""
    ys, xs = [], []
    sides = ((cand_c, eager_c, seed_c, -1.0), (cand_b, eager_b, seed_b, 1.0))
    for cand, eager, seed, sign in sides:
        idx = _round_indices(cand, resamples, seed)
        eager_idx = (idx if len(eager) == len(cand)
                     else _round_indices(eager, resamples, seed + 7919))
        ys.append(sign * _log_median_draws(cand, idx))
        xs.append(sign * _log_median_draws(eager, eager_idx))
    y, x = ys[0] + ys[1], xs[0] + xs[1]
    cov = np.cov(y, x, ddof=1)
    return _PairRoundNoise(float(cov[0, 0]), float(cov[1, 1]), float(cov[0, 1]))


# Units an in-session comparison needs before eager's paired differences adjust it
# (`compare_levels`): the fit spends a degree of freedom, and below this the t quantile it
# costs (n - 2 against n - 1) outweighs what the adjustment removes.
CONTROL_VARIATE_MIN_UNITS = 6


def compare_levels(candidate_env: Sequence[Rounds], baseline_env: Sequence[Rounds], *,
                   candidate_env_eager: Sequence[Rounds] | None = None,
                   baseline_env_eager: Sequence[Rounds] | None = None,
                   resamples: int = 500, seed: int = 0,
                   confidence: float = 0.95) -> UnitsComparison:
    """The ratio of two environments' speedups when their baseline sides ran the very same
    software (benchmarks.identity.side_identity): eager then runs one program in both, its
    expected time is the same, and the speedups' ratio is the ratio of the candidate sides'
    times, baseline environment over candidate environment. Each argument holds the
    candidate side's rounds of each unit; unit j of the two ran back to back. The eager
    side's own spread between processes (on a 2-core machine the larger one: 72-91 ms a
    call against 35-39 for ONNX Runtime) stays out of the interval.

    With the eager sides' rounds too (`*_eager`) and at least CONTROL_VARIATE_MIN_UNITS
    pairs, eager is a control variate: a host whose speed moves between units moves eager
    and the candidate alike, and eager's paired log difference has a known mean, 0 (the same
    program on both sides of a pair). The estimate is the intercept of the least-squares
    line of the candidate's paired log differences on eager's, at eager's 0 (the CUPED
    estimator), with its t interval on n - 2 degrees of freedom; where eager explains
    nothing the line is flat and the estimate is the plain one. Re-reading the stored
    comparisons of a 6% slowdown beside two busy co-tenants (13-15 pairs,
    experiments/control_variate.py): half-widths 0.7-3.7% against 2.0-4.6%, estimates
    -5.0% to -7.4% against -3.3% to -7.9%."""
    n = min(len(candidate_env), len(baseline_env))
    if n < 2:
        raise StatsError("a comparison of units needs at least two of each side")
    cand = [float(np.median(pooled_samples(r))) for r in candidate_env[:n]]
    base = [float(np.median(pooled_samples(r))) for r in baseline_env[:n]]
    diffs = [math.log(b / c) for b, c in zip(base, cand, strict=True)]
    if candidate_env_eager is not None and baseline_env_eager is not None \
            and min(len(candidate_env_eager), len(baseline_env_eager)) >= n \
            and n >= CONTROL_VARIATE_MIN_UNITS:
        eager = [math.log(float(np.median(pooled_samples(b))) / float(np.median(pooled_samples(c))))
                 for b, c in zip(baseline_env_eager[:n], candidate_env_eager[:n],
                                 strict=True)]
        noise = [_pair_round_noise(candidate_env[j], candidate_env_eager[j], baseline_env[j],
                                   baseline_env_eager[j], resamples=resamples,
                                   seed_c=seed + j, seed_b=seed + n + j) for j in range(n)]
        adjusted = _control_variate(diffs, eager, noise, confidence)
        if adjusted is not None:
            estimate, half, variance = adjusted
            ratio = math.exp(estimate)
            return UnitsComparison(ratio, ratio * math.exp(-half), ratio * math.exp(half),
                                   half, n, variance, control_variate=True)
    within = float(np.mean([
        _log_median_variance(c, resamples, seed + j) + _log_median_variance(b, resamples,
                                                                            seed + n + j)
        for j, (c, b) in enumerate(zip(candidate_env[:n], baseline_env[:n], strict=True))]))
    ratio = float(np.median(pooled_samples([r for u in baseline_env for r in u]))
                  / np.median(pooled_samples([r for u in candidate_env for r in u])))
    half = units_half_width(diffs, within, confidence)
    variance = max(float(np.var(diffs, ddof=1)), within)
    return UnitsComparison(ratio, ratio * math.exp(-half), ratio * math.exp(half), half, n,
                           variance)


def _control_variate(diffs: Sequence[float], eager: Sequence[float],
                     noise: Sequence[_PairRoundNoise],
                     confidence: float) -> tuple[float, float, float] | None:
    """(estimate, log half-width, one pair's residual variance) of the intercept of diffs
    on eager at eager = 0; None when eager does not vary. The residual variance is floored
    by the rounds' own noise of the adjusted quantity, y - beta * x (as `units_half_width`
    floors by the rounds'): pairs that fit the line by luck cannot claim more precision than
    their rounds allow. The floor is of the adjusted quantity, not of the candidate alone:
    where a burst slowed eager and the candidate in the same round, the adjustment removes it
    from the rounds as from the pairs, and a floor from the candidate's rounds alone set the
    width of three A/A comparisons beside two co-tenants (+-6-7% where the fit gave +-1.5-6.3%)."""
    y, x = np.asarray(diffs, dtype=np.float64), np.asarray(eager, dtype=np.float64)
    n = len(y)
    sxx = float(((x - x.mean()) ** 2).sum())
    if sxx <= 0:
        return None
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    intercept = float(y.mean() - slope * x.mean())
    residual = float(((y - intercept - slope * x) ** 2).sum() / (n - 2))
    floor = float(np.mean([pair.adjusted(slope) for pair in noise]))
    variance = max(residual, floor)
    se = math.sqrt(variance * (1 / n + float(x.mean()) ** 2 / sxx))
    t = float(_scipy_stats.t.ppf(1 - (1 - confidence) / 2, n - 2))
    return intercept, t * se, variance
