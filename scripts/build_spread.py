"""How far apart fresh builds land: the spread of speedups over the processes of each spec of
a `speedwatch bench --json` file, with the build fingerprints the processes reported.

Each process of a bench spec compiles afresh (its own inductor cache), so with builds "as
shipped" every process is a new build with its own timed choices, and with "pinned" builds
every process should make the same one. Measure both side by side in one run, then read it:

    speedwatch bench --device cuda --model resnet50 --backend inductor --precision fp16 \\
        --weights constant,tensor --batch 32 --builds pinned,as-shipped \\
        --processes 6 --max-processes 6 --json spread.json
    python scripts/build_spread.py spread.json            # a Markdown table

Spread = (max - min) / median of the processes' speedups; candidate ms is the range of the
processes' candidate medians (the compiled side's own latency).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def rows(results: list[dict[str, Any]]) -> list[str]:
    out = ["| spec | builds | processes | speedups | spread | candidate ms (min-max) | "
           "distinct builds | fingerprints |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        spec = r["spec"]
        name = (f"{spec['model']} {spec['backend']} {spec['weights']} {spec['precision']} "
                f"bs{spec['batch_size']}")
        builds = (spec.get("timing") or {}).get("builds", "pinned")
        if r["status"] != "ok":
            out.append(f"| {name} | {builds} | - | {r['status']}: {r.get('reason')} | | | | |")
            continue
        processes = r["evidence"].get("processes") or [{
            "speedup": r["speedup"]["value"], "candidate_median_ms": r["candidate"]["median_ms"],
            "build_fingerprint": r["evidence"].get("build_fingerprint")}]
        speedups = [p["speedup"] for p in processes]
        cand = [p["candidate_median_ms"] for p in processes]
        middle = sorted(speedups)[len(speedups) // 2]
        prints = [str(p.get("build_fingerprint")) for p in processes]
        out.append(
            f"| {name} | {builds} | {len(processes)} | "
            f"{', '.join(f'{s:.4f}' for s in speedups)} | "
            f"{(max(speedups) - min(speedups)) / middle:.2%} | "
            f"{min(cand):.4f}-{max(cand):.4f} | {len(set(prints))} | "
            f"{', '.join(sorted(set(prints)))} |")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    results = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    print("\n".join(rows(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
