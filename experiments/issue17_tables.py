"""Issue 17's CPU tables from the result documents of `speedwatch bench --json` runs.

Optimization levels, static vs dynamic shapes and int8, one row per spec: eager and
candidate medians, the speedup with its 95% CI (over processes), the per-process speedups,
ONNX Runtime's node count after optimization and, for int8, the accuracy against fp32.
Each argument is a folder holding opt-levels.json, shapes.json and int8.json (one run).

    python -m experiments.issue17_tables results/cpu-2026-11-24-issue17/paired
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def row(doc: dict[str, Any]) -> str:
    spec, ev = doc["spec"], doc.get("evidence") or {}
    level = spec.get("opt_level", "default")
    speed = doc.get("speedup")
    ci = (f"{speed['value']:.3f}x [{speed['ci_low']:.3f}, {speed['ci_high']:.3f}]"
          if speed else f"{doc['status']}: {doc.get('reason')}")
    per = ", ".join(f"{p['speedup']:.2f}" for p in ev.get("processes") or [])
    base = (doc.get("baseline") or {}).get("median_ms")
    cand = (doc.get("candidate") or {}).get("median_ms")
    acc = doc.get("accuracy") or {}
    counts = ev.get("onnx_node_counts") or {}
    quant = counts.get("QLinearConv")
    nodes = f"{ev.get('onnx_nodes_total', '-')}" + (f" ({quant} QLinearConv)" if quant else "")
    return (f"| {level} | {spec['precision']} | {spec['batch_size']} | {spec['shape_mode']} | "
            f"{base:.1f} | {cand:.1f} | {ci} | {per} | {nodes} | "
            f"{acc.get('rel_l2', float('nan')):.1e} |" if base and cand else
            f"| {level} | {spec['precision']} | {spec['batch_size']} | {spec['shape_mode']} | "
            f"- | - | {ci} | {per} | {nodes} | - |")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for folder in map(Path, argv):
        print(f"#### {folder}\n")
        for name in ("opt-levels", "shapes", "int8"):
            path = folder / f"{name}.json"
            if not path.is_file():
                continue
            docs = json.loads(path.read_text())
            print(f"{name}:\n")
            print("| opt_level | precision | batch | shapes | eager ms | ORT ms | "
                  "speedup [95% CI] | per process | ORT nodes | rel L2 vs fp32 eager |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for doc in docs:
                print(row(doc))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
