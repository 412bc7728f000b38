"""Would eager's time, used as a control variate, narrow an in-session CPU comparison?

An in-session comparison (benchmarks.adaptive, `paired_units.compare_levels`) measures the two
environments in units taken in turns and, when eager ran the very same software in both,
compares the candidate sides' own times, pair by pair. A host whose speed moves between
units (a co-tenant, another VM on the physical host) moves eager and the candidate alike, and
eager's expected time is the same in both environments, so it is a control variate: the
paired log difference of the candidate, minus beta times eager's paired log difference,
beta fitted from the pairs (the CUPED estimator), keeps the same expectation with the
variance that eager explains removed. This script re-reads the stored comparisons of the
results folders given and prints, per comparison, three paired t intervals: the candidate
side alone (what the product does), the speedup ratio (beta = 1) and the control variate
(beta fitted, one more degree of freedom spent), beside the stored interval.

    python experiments/control_variate.py 'results/cpu-2026-11-2*'
"""

from __future__ import annotations

import glob
import json
import math
import sqlite3
import sys
from typing import Any

import numpy as np
from scipy import stats


def _interval(values: np.ndarray, dof: int) -> tuple[float, float]:
    """(estimate, half-width) of the mean of `values` on the log scale, t at 95%."""
    mean = float(values.mean())
    half = float(stats.t.ppf(0.975, dof) * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, half


def comparison(evidence: dict[str, Any]) -> dict[str, Any] | None:
    comp = evidence.get("comparison") or {}
    base_units = comp.get("baseline_processes")
    cand_units = evidence.get("processes")
    if not base_units or not cand_units:
        return None
    n = min(len(base_units), len(cand_units))
    if n < 4:
        return None

    def logs(units: list[dict[str, Any]], key: str) -> np.ndarray:
        return np.log(np.array([u[key] for u in units[:n]], dtype=float))

    # paired, baseline environment over candidate environment: > 0 means the candidate slower
    cand = logs(base_units, "candidate_median_ms") - logs(cand_units, "candidate_median_ms")
    eager = logs(base_units, "baseline_median_ms") - logs(cand_units, "baseline_median_ms")
    centred = eager - eager.mean()
    beta = float((centred * (cand - cand.mean())).sum() / (centred * centred).sum())
    rows = {"candidate_only": _interval(cand, n - 1),
            "speedup_ratio": _interval(cand - eager, n - 1),
            # eager's paired difference has a known mean, 0 (the same software on both sides
            # of each pair): subtracting beta times it keeps the candidate's expectation
            "control_variate": _interval(cand - beta * eager, n - 2)}
    out: dict[str, Any] = {"units": n, "beta": round(beta, 2),
                           "stored": [comp.get("ratio"), *(comp.get("ratio_ci") or [])]}
    for name, (mean, half) in rows.items():
        out[name] = [round(100 * (math.exp(mean) - 1), 2), round(100 * half, 2)]
    return out


def main(pattern: str) -> int:
    for folder in sorted(glob.glob(pattern)):
        try:
            db = sqlite3.connect(f"file:{folder}/data/speedwatch.db?mode=ro", uri=True)
            rows = db.execute("select id, evidence from results order by id").fetchall()
        except sqlite3.Error:
            continue
        for result_id, evidence in rows:
            found = comparison(json.loads(evidence) if isinstance(evidence, str) else evidence)
            if found is not None:
                print(json.dumps({"folder": folder, "result": result_id, **found}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "results/cpu-*"))
