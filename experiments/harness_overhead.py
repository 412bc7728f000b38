"""How much does the harness add to the GPU latency it reports?

Compares, in one process and interleaved, the candidate latency the harness reports
(`time_paired`: one event pair per iteration, samples kept per round) with a bare loop
that records one event pair around K back-to-back replays of the same CUDA graph and
divides by K. Both time the very same captured graph of the same compiled callable, so any
difference is the harness's own cost. Target: under 2%.

    PYTHONPATH=. python3 -m experiments.harness_overhead --batch 1,32
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np
import torch

from benchmarks import stats
from benchmarks.backends import get_backend
from benchmarks.models import build_model, example_input, model_dtype
from benchmarks.spec import BenchSpec
from benchmarks.timing import capture_cuda_graph, time_paired
from benchmarks.timing_policy import TimingPolicy


def bare_loop_ms(fn: object, iters: int) -> float:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()  # type: ignore[operator]
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / iters


def measure(batch: int, blocks: int, iters: int) -> dict[str, float]:
    spec = BenchSpec(model="resnet50", backend="inductor", weights="constant",
                     precision="fp16", batch_size=batch, device="cuda").validate()
    torch.backends.cudnn.benchmark = True
    model = build_model(spec).to("cuda").to(model_dtype(spec.precision))
    x = example_input(spec).to("cuda").to(model_dtype(spec.precision))
    compiled = get_backend("inductor").compile(model, x, spec)
    with torch.inference_mode():
        replay = capture_cuda_graph(lambda: compiled.run(x))
        policy = TimingPolicy(warmup_iters=20, rounds=1, iters_per_round=iters,
                              max_seconds=1e9, min_rounds=1)
        harness_blocks: list[float] = []
        bare_blocks: list[float] = []
        for i in range(blocks):
            # Alternate which goes first, as the harness itself does.
            order = ("harness", "bare") if i % 2 == 0 else ("bare", "harness")
            for which in order:
                if which == "harness":
                    s = time_paired(replay, replay, policy, device="cuda")
                    harness_blocks.append(stats.summary(s.candidate_ms).median_ms)
                else:
                    for _ in range(3):
                        replay()
                    bare_blocks.append(bare_loop_ms(replay, iters))
    ratios = np.asarray(harness_blocks) / np.asarray(bare_blocks)
    rng = np.random.default_rng(0)
    boots = np.median(rng.choice(ratios, size=(2000, ratios.size), replace=True), axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {
        "batch": batch,
        "harness_median_ms": statistics.median(harness_blocks),
        "bare_median_ms": statistics.median(bare_blocks),
        "overhead_pct": (float(np.median(ratios)) - 1) * 100,
        "overhead_ci_low_pct": (float(lo) - 1) * 100,
        "overhead_ci_high_pct": (float(hi) - 1) * 100,
        "blocks": blocks,
        "iters_per_block": iters,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("harness_overhead: needs a CUDA device", file=sys.stderr)
        return 2
    rows = []
    for b in (int(v) for v in args.batch.split(",")):
        torch._dynamo.reset()
        row = measure(b, args.blocks, args.iters)
        rows.append(row)
        print(f"bs{row['batch']:<3} harness {row['harness_median_ms']:.4f} ms  bare graph "
              f"replay {row['bare_median_ms']:.4f} ms  overhead {row['overhead_pct']:+.2f}% "
              f"[{row['overhead_ci_low_pct']:+.2f}, {row['overhead_ci_high_pct']:+.2f}]",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
