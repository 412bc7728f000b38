"""Check `max_over_splits_p` (the step test's correction for the split searched) against
simulation: equal-weight white noise of L points, the largest standardized step over every
split with m points a side, P(max |Z| > b), beside Bonferroni's p times the splits.

    PYTHONPATH=. .venv/bin/python experiments/check_max_over_splits.py    # about 30 s
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.detection.changepoint_tests import max_over_splits_p

DRAWS = 200_000


def simulated(length: int, m: int, b: float, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    k = np.arange(m, length - m + 1)
    hits = 0
    for _ in range(DRAWS // 20_000):
        s = np.cumsum(rng.standard_normal((20_000, length)), axis=1)
        z = (s[:, k - 1] - k / length * s[:, -1:]) / np.sqrt(k * (length - k) / length)
        hits += int(np.sum(np.abs(z).max(axis=1) > b))
    return hits / DRAWS


def main() -> None:
    print("| points | m | b | Bonferroni | max_over_splits_p | simulated |")
    print("|---|---|---|---|---|---|")
    for length, m in ((8, 4), (16, 3), (40, 3), (80, 4), (160, 3)):
        sw = np.arange(length + 1, dtype=np.float64)
        for b in (3.0, 3.5, 4.0):
            p = float(2 * stats.norm.sf(b))
            bonferroni = min(1.0, p * (length - 2 * m + 1))
            print(f"| {length} | {m} | {b} | {bonferroni:.2e} | "
                  f"{max_over_splits_p(p, sw, 0, length, m):.2e} | "
                  f"{simulated(length, m, b):.2e} |")


if __name__ == "__main__":
    main()
