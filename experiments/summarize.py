"""Turn result documents from repeated runs into one markdown table.

Each argument is a directory (or JSON file holding a list) of result documents from one
independent run; cells are matched by spec across runs, so the table shows whether the
runs agree within their confidence intervals.

    python -m experiments.summarize results/<dir>/run1 <dir>/run2
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.result import BenchResult


def load(path: Path) -> list[BenchResult]:
    if path.is_dir():
        docs: list[Any] = [json.loads(p.read_text()) for p in sorted(path.glob("*.json"))]
    else:
        data = json.loads(path.read_text())
        docs = data if isinstance(data, list) else data.get("results", [data])
    return [BenchResult.from_dict(d) for d in docs]


def cell_label(r: BenchResult) -> str:
    s = r.spec
    graphs = "graphs" if s.get("timing", {}).get("cuda_graphs") and s["device"] == "cuda" else ""
    return " ".join(x for x in (r.series_key, graphs) if x)


def fmt(r: BenchResult | None) -> str:
    if r is None:
        return "-"
    if r.speedup is None:
        return f"{r.status}: {r.reason}"
    s = r.speedup
    return f"{s.value:.3f} [{s.ci_low:.3f}, {s.ci_high:.3f}] ±{s.half_width_rel * 100:.2f}%"


def evidence(r: BenchResult) -> str:
    ev = r.evidence
    parts = []
    kpi = ev.get("kernels_per_inference")
    if kpi:
        parts.append(f"kernels/inf {kpi['baseline']:.0f}->{kpi['candidate']:.0f}")
    if "onnx_nodes_total" in ev:
        bn = ev.get("onnx_node_counts", {}).get("BatchNormalization", 0)
        parts.append(f"ORT nodes {ev['onnx_nodes_total']} (BN {bn})")
    if "inductor_kernels" in ev:
        parts.append(f"inductor kernels {ev['inductor_kernels']}")
    if r.baseline and r.candidate:
        parts.append(f"eager {r.baseline.median_ms:.3f} ms, cand {r.candidate.median_ms:.3f} ms")
    if r.compile_seconds is not None:
        parts.append(f"compile {r.compile_seconds:.1f}s")
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [{cell_label(r): r for r in load(Path(a))} for a in argv]
    labels = sorted({k for run in runs for k in run})
    head = " | ".join(f"run {i + 1} speedup [95% CI]" for i in range(len(runs)))
    print(f"| cell | {head} | runs agree | evidence (run 1) |")
    print("|" + "---|" * (len(runs) + 3))
    for label in labels:
        rs = [run.get(label) for run in runs]
        ok = [r.speedup for r in rs if r is not None and r.speedup is not None]
        agree = "-"
        if len(ok) == len(runs) and len(ok) > 1:
            overlap = max(s.ci_low for s in ok) <= min(s.ci_high for s in ok)
            spread = (max(s.value for s in ok) / min(s.value for s in ok) - 1) * 100
            agree = f"{'yes' if overlap else 'no'} (spread {spread:.2f}%)"
        first = next((r for r in rs if r is not None), None)
        ev = evidence(first) if first is not None else ""
        print(f"| {label} | " + " | ".join(fmt(r) for r in rs) + f" | {agree} | {ev} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
