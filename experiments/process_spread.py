"""How far apart are independent processes measuring the same cell?

A result's CI describes the rounds inside one process. Two processes can still differ
(cuDNN's per-process algorithm timing, memory placement), and two runs only agree within
their CIs if that spread is smaller than the CI. This runs one spec in N child processes per
setting of a swept runner option and prints the speedups and their spread.

    PYTHONPATH=. python3 -m experiments.process_spread --processes 4 \
        --sweep cudnn_benchmark=true,false
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks.isolation import run_isolated
from benchmarks.spec import BenchSpec
from benchmarks.timing_policy import TimingPolicy


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--weights", default="constant")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument("--sweep", default="cudnn_benchmark=true,false")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    key, _, values = args.sweep.partition("=")
    rows = {}
    for value in values.split(","):
        speedups, eager, cand, hws = [], [], [], []
        for i in range(args.processes):
            spec = BenchSpec(
                model=args.model, backend="inductor", weights=args.weights, precision="fp16",
                batch_size=args.batch, device="cuda", options={key: value},
                timing=TimingPolicy(warmup_iters=20, rounds=400, iters_per_round=20,
                                    max_seconds=args.seconds, min_rounds=10,
                                    cuda_graphs=not args.no_graphs),
            ).validate()
            r = run_isolated(spec, timeout_s=900)
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / f"{key}-{value}-p{i}.json").write_text(r.to_json())
            if r.speedup is None or r.baseline is None or r.candidate is None:
                print(f"{key}={value} process {i}: {r.status} {r.reason}", flush=True)
                continue
            speedups.append(r.speedup.value)
            eager.append(r.baseline.median_ms)
            cand.append(r.candidate.median_ms)
            hws.append(r.speedup.half_width_rel * 100)
            print(f"{key}={value} process {i}: speedup {r.speedup.value:.4f} "
                  f"±{hws[-1]:.3f}%  eager {eager[-1]:.4f} ms  candidate {cand[-1]:.4f} ms",
                  flush=True)
        if len(speedups) > 1:
            def spread(xs: list[float]) -> float:
                return (max(xs) / min(xs) - 1) * 100
            rows[value] = {
                "speedups": speedups, "eager_ms": eager, "candidate_ms": cand,
                "speedup_spread_pct": spread(speedups), "eager_spread_pct": spread(eager),
                "candidate_spread_pct": spread(cand),
                "median_ci_half_width_pct": statistics.median(hws),
            }
            print(f"{key}={value}: speedup spread {spread(speedups):.2f}%  eager spread "
                  f"{spread(eager):.2f}%  candidate spread {spread(cand):.2f}%  median CI "
                  f"±{statistics.median(hws):.3f}%", flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
