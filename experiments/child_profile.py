"""Where does a loaded GPU process spend what is not timing?

A loaded process of the four-cell demo on an H200 spent about 7 s, of which 3.0 s timed:
the rest was its weights (0.9-1.4 s), loading the build (1.1-4 s), the software's identity
(0.3-0.5 s) and the statistics and evidence after the timing (0.8-1.5 s). This runs one
cell's measuring process (`python -m benchmarks.child`) `--runs` times in a row, the first
building (the host's build cache as configured), the later ones as a cell's later
processes (no kernel counts, no profiles), each under cProfile, and prints every run's
phases and the functions that took the most time in the last one.

    bash scripts/gpu_run python3 -m experiments.child_profile --out /tmp/cp
"""

from __future__ import annotations

import argparse
import json
import pstats
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.spec import LATER_PROCESS_OPTION, BenchSpec
from benchmarks.timing_policy import TimingPolicy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--weights", default="constant")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=45)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = BenchSpec(model="resnet50", backend="inductor", weights=args.weights,
                     precision="fp16" if args.device == "cuda" else "fp32",
                     batch_size=args.batch, device=args.device,
                     timing=TimingPolicy(max_seconds=2.0))
    report = []
    for run in range(args.runs):
        spec = base if run == 0 else replace(base, options={LATER_PROCESS_OPTION: True})
        spec_file, result_file = out / f"spec-{run}.json", out / f"result-{run}.json"
        spec_file.write_text(json.dumps(spec.to_dict()))
        stats_file = out / f"run-{run}.pstats"
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(stats_file), "-m",
                        "benchmarks.child", str(spec_file), str(result_file)], check=True)
        wall = time.perf_counter() - started
        result = json.loads(result_file.read_text())
        evidence = result.get("evidence") or {}
        row = {"run": run, "wall_s": round(wall, 2), "status": result.get("status"),
               "phases": evidence.get("phases"), "build": evidence.get("build"),
               "speedup": (result.get("speedup") or {}).get("value")}
        report.append(row)
        print(json.dumps(row), flush=True)
    (out / "phases.json").write_text(json.dumps(report, indent=1))
    last = pstats.Stats(str(out / f"run-{args.runs - 1}.pstats"), stream=sys.stdout)
    last.sort_stats("cumulative").print_stats(args.top)
    last.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
