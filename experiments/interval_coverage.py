"""Coverage of the units interval (benchmarks.stats.units_half_width), by simulation.

Each simulated cell has k units (processes); unit j's log speedup is its own level b_j ~
N(0, sd_unit^2) plus the mean of n rounds' noise, N(0, sd_round^2) each; `within` is the
rounds' sample variance over n, as a round bootstrap estimates it. The true log speedup is
0, so a 95% interval should hold 0 in about 95% of cells. Two rules side by side:

- "sum": var = between / k + within / k (the earlier rule: the rounds' noise counted twice);
- "max": var = max(between, within) / k (the rule in use).

usage: python experiments/interval_coverage.py [--cells 20000]
Prints one line per (k, sd_unit, sd_round): coverage and mean half-width of each rule.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats


def simulate(k: int, sd_unit: float, sd_round: float, rounds: int, cells: int,
             rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    levels = rng.normal(0.0, sd_unit, size=(cells, k))
    noise = rng.normal(0.0, sd_round, size=(cells, k, rounds))
    logs = levels + noise.mean(axis=2)
    within = (noise.var(axis=2, ddof=1) / rounds).mean(axis=1)
    between = logs.var(axis=1, ddof=1)
    centre = logs.mean(axis=1)
    t = stats.t.ppf(0.975, k - 1)
    out = {}
    for name, var in (("sum", (between + within) / k), ("max", np.maximum(between, within) / k)):
        half = t * np.sqrt(var)
        out[name] = (float(np.mean(np.abs(centre) <= half)), float(np.mean(half)))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cells", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    print("k  sd_unit  sd_round  rounds | coverage sum, max | mean half-width sum, max")
    for k in (3, 5, 8, 16):
        for sd_unit, sd_round in ((0.0, 0.03), (0.01, 0.03), (0.02, 0.02), (0.03, 0.01),
                                  (0.02, 0.005)):
            r = simulate(k, sd_unit, sd_round, 4, args.cells, rng)
            print(f"{k:2d} {sd_unit:7.3f} {sd_round:9.3f} {4:7d} | {r['sum'][0]:.3f}, "
                  f"{r['max'][0]:.3f} | {100 * r['sum'][1]:.2f}%, {100 * r['max'][1]:.2f}%")


if __name__ == "__main__":
    main()
