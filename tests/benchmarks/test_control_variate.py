"""An in-session comparison adjusted by eager (benchmarks.paired_units.compare_levels): a host whose
speed moves between units moves eager and the candidate alike, and eager ran the same
program in both environments, so its paired differences take the host's movement out."""

from __future__ import annotations

import numpy as np

from benchmarks.paired_units import CONTROL_VARIATE_MIN_UNITS, compare_levels


def units(n: int, *, slower: float, host_sd: float, noise_sd: float, seed: int = 1,
          eager_follows: bool = True):
    """n pairs of units: each unit's host speed a random factor shared by its two sides
    (or not shared with eager, `eager_follows=False`); the candidate environment's candidate
    `slower` times the baseline environment's."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[list[list[float]]]] = {k: [] for k in ("cc", "ce", "bc", "be")}
    for _ in range(n):
        for env, factor in (("c", 1 + slower), ("b", 1.0)):
            host = float(np.exp(rng.normal(0, host_sd)))
            eager_host = host if eager_follows else float(np.exp(rng.normal(0, host_sd)))
            cand = 60.0 * factor * host * float(np.exp(rng.normal(0, noise_sd)))
            eager = 100.0 * eager_host * float(np.exp(rng.normal(0, noise_sd)))
            out[env + "c"].append([[cand] * 5])
            out[env + "e"].append([[eager] * 5])
    return out


def compare(u, *, adjusted: bool = True):
    extra = {"candidate_env_eager": u["ce"], "baseline_env_eager": u["be"]} if adjusted else {}
    return compare_levels(u["cc"], u["bc"], resamples=200, **extra)


def test_a_moving_host_hides_a_5_percent_drop_until_eager_adjusts_it() -> None:
    u = units(14, slower=0.05, host_sd=0.12, noise_sd=0.01)
    plain, adjusted = compare(u, adjusted=False), compare(u)
    assert not plain.control_variate and adjusted.control_variate
    assert plain.high > 1.0  # the host's movement swamps the drop
    assert adjusted.high < 0.97 and abs(adjusted.ratio - 1 / 1.05) < 0.02
    assert adjusted.log_half < plain.log_half / 3


def test_eager_that_does_not_follow_the_host_leaves_the_estimate_as_it_was() -> None:
    u = units(14, slower=0.05, host_sd=0.02, noise_sd=0.01, eager_follows=False)
    plain, adjusted = compare(u, adjusted=False), compare(u)
    assert abs(np.log(adjusted.ratio) - np.log(plain.ratio)) < 0.01
    assert adjusted.log_half < 2 * plain.log_half


def test_too_few_pairs_are_not_adjusted() -> None:
    u = units(CONTROL_VARIATE_MIN_UNITS - 1, slower=0.05, host_sd=0.12, noise_sd=0.01)
    assert not compare(u).control_variate


def test_the_adjusted_interval_covers_no_change_in_an_a_a_simulation() -> None:
    """200 A/A comparisons of 8 pairs on a host moving 10% between units: the 95% interval
    holds 1 in at least 90% (a binomial 95% lower bound for 200 draws at 95%)."""
    held = 0
    for seed in range(200):
        c = compare(units(8, slower=0.0, host_sd=0.10, noise_sd=0.02, seed=seed))
        held += c.low <= 1.0 <= c.high
    assert held >= 180


def units_with_rounds(n: int, *, slower: float, host_sd: float, burst_sd: float,
                      noise_sd: float, shared_bursts: bool, seed: int = 1, rounds: int = 20):
    """Like `units`, with rounds: each round of a process has a burst factor (a co-tenant's
    moment) that slows eager and the candidate of that round alike (`shared_bursts`) or each
    side on its own, and every sample its own small noise."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[list[list[float]]]] = {k: [] for k in ("cc", "ce", "bc", "be")}
    for _ in range(n):
        for env, factor in (("c", 1 + slower), ("b", 1.0)):
            host = float(np.exp(rng.normal(0, host_sd)))
            bursts = np.exp(rng.normal(0, burst_sd, size=rounds))
            eager_bursts = bursts if shared_bursts else np.exp(rng.normal(0, burst_sd, rounds))
            def noise() -> np.ndarray:
                return np.exp(rng.normal(0, noise_sd, (rounds, 3)))
            cand = 60.0 * factor * host * bursts[:, None] * noise()
            eager = 100.0 * host * eager_bursts[:, None] * noise()
            out[env + "c"].append(cand.tolist())
            out[env + "e"].append(eager.tolist())
    return out


def test_a_burst_that_slowed_both_sides_of_a_round_does_not_set_the_width() -> None:
    """The interval's floor is the rounds' noise of the adjusted quantity: a co-tenant's burst
    that slowed eager and the candidate of the same round leaves it, as the host's movement
    between units does; bursts that hit one side only stay in it."""
    shared = compare(units_with_rounds(12, slower=0.05, host_sd=0.08, burst_sd=0.15,
                                       noise_sd=0.01, shared_bursts=True))
    apart = compare(units_with_rounds(12, slower=0.05, host_sd=0.08, burst_sd=0.15,
                                      noise_sd=0.01, shared_bursts=False))
    assert shared.control_variate and apart.control_variate
    assert shared.log_half < apart.log_half / 2
    assert shared.high < 1.0 and abs(shared.ratio - 1 / 1.05) < 0.02


def test_the_adjusted_interval_covers_no_change_with_bursts_in_the_rounds() -> None:
    """200 A/A comparisons of 8 pairs, the host moving 8% between units and bursts of 10% in
    the rounds, some shared by both sides of a round: the interval holds 1 in at least 180."""
    held = 0
    for seed in range(200):
        c = compare(units_with_rounds(8, slower=0.0, host_sd=0.08, burst_sd=0.10,
                                      noise_sd=0.03, shared_bursts=seed % 2 == 0, seed=seed,
                                      rounds=10))
        held += c.low <= 1.0 <= c.high
    assert held >= 180
