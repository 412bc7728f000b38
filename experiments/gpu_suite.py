"""GPU evidence for the measurement core: ResNet50 fp16, eager vs inductor.

Why a script and not a test: it needs a CUDA device and minutes of timing. It measures the
weight-representation effect (frozen = constants, unfrozen = tensors) with and without CUDA
graphs, plus the custom-op fusion break, twice, each cell in its own process (torch.compile
wrappers of one module share dynamo's cache, so variants must not share a process).

    PYTHONPATH=. python3 -m experiments.gpu_suite --out /tmp/gpu --repeats 2

With `--processes 3` every cell is measured in 3 processes merged into one result whose CI
includes the between-process variance; the repeats then check whether two such results agree.

Compile caches are warmed first by compiling every distinct variant in parallel processes,
so the timed runs spend their time timing instead of compiling.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.isolation import run_isolated
from benchmarks.result import BenchResult
from benchmarks.spec import BenchSpec
from benchmarks.timing_policy import TimingPolicy


def make_spec(model: str, batch: int, weights: str, graphs: bool, seconds: float,
              rounds: int, processes: int = 1) -> BenchSpec:
    return BenchSpec(
        model=model, backend="inductor", weights=weights, precision="fp16",
        batch_size=batch, device="cuda",
        timing=TimingPolicy(warmup_iters=20, rounds=rounds, iters_per_round=20,
                            max_seconds=seconds, min_rounds=10, cuda_graphs=graphs,
                            processes=processes),
    ).validate()


def slug(spec: BenchSpec) -> str:
    g = "graphs" if spec.timing.cuda_graphs else "nographs"
    return f"{spec.model}_bs{spec.batch_size}_{spec.weights}_{g}"


def describe(r: BenchResult) -> str:
    spec = BenchSpec.from_dict(r.spec)
    if r.status != "ok" or r.speedup is None:
        return f"{slug(spec):45s} {r.status}: {r.reason}"
    s = r.speedup
    hw = s.half_width_rel * 100
    kpi = r.evidence.get("kernels_per_inference", {})
    timed = sum(sum(x) for x in r.baseline_samples_ms + r.candidate_samples_ms) / 1000
    return (f"{slug(spec):45s} speedup {s.value:6.3f} [{s.ci_low:.3f}, {s.ci_high:.3f}] "
            f"+-{hw:5.2f}%  eager {r.baseline.median_ms if r.baseline else 0:7.3f} ms "
            f"cand {r.candidate.median_ms if r.candidate else 0:7.3f} ms  "
            f"kernels {kpi.get('baseline')}->{kpi.get('candidate')}  "
            f"rounds {len(r.baseline_samples_ms)} timed {timed:5.1f}s "
            f"compile {r.compile_seconds or 0:5.1f}s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", default="resnet50,resnet50-customop")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--seconds-graphs", type=float, default=10.0)
    ap.add_argument("--seconds-nographs", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--warm-workers", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--graphs-only", action="store_true")
    ap.add_argument("--nographs-only", action="store_true")
    ap.add_argument("--processes", type=int, default=1,
                    help="processes per cell, merged into one result (TimingPolicy.processes); "
                         "--seconds-* then apply to each process")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    env = dict(os.environ)

    # 1. Warm compile caches: one short run per distinct compiled program, in parallel.
    t0 = time.time()
    warm = [make_spec(m, b, w, False, 0.5, 2)
            for m, b, w in itertools.product(models, batches, ("constant", "tensor"))]
    with ThreadPoolExecutor(args.warm_workers) as pool:
        for r in pool.map(lambda s: run_isolated(s, timeout_s=args.timeout, env=env), warm):
            print("warm", describe(r), flush=True)
    print(f"warm-up compile of {len(warm)} variants: {time.time() - t0:.0f}s", flush=True)

    # 2. Timed cells, each in its own process, the whole matrix once per repeat.
    graph_modes = ((True,) if args.graphs_only else (False,) if args.nographs_only
                   else (True, False))
    summary: dict[str, list[dict[str, float]]] = {}
    for rep in range(1, args.repeats + 1):
        rep_dir = args.out / f"run{rep}"
        rep_dir.mkdir(exist_ok=True)
        for m, b, w, g in itertools.product(models, batches, ("constant", "tensor"),
                                            graph_modes):
            spec = make_spec(m, b, w, g, args.seconds_graphs if g else args.seconds_nographs,
                             args.rounds, args.processes)
            r = run_isolated(spec, timeout_s=args.timeout, env=env)
            (rep_dir / f"{slug(spec)}.json").write_text(r.to_json(indent=1))
            print(f"run{rep}", describe(r), flush=True)
            if r.speedup is not None:
                summary.setdefault(slug(spec), []).append(
                    {"value": r.speedup.value, "lo": r.speedup.ci_low, "hi": r.speedup.ci_high})

    # 3. Agreement between repeats: do the CIs of the runs overlap?
    print("\ncell | speedups per run | CI half-widths | runs agree (CIs overlap)")
    for key, runs in summary.items():
        agree = max(x["lo"] for x in runs) <= min(x["hi"] for x in runs)
        hws = [(x["hi"] - x["lo"]) / 2 / x["value"] * 100 for x in runs]
        values = " ".join(f"{x['value']:.3f}" for x in runs)
        widths = " ".join(f"{h:.2f}%" for h in hws)
        print(f"{key} | {values} | {widths} | {agree}")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    all_hw = [(x["hi"] - x["lo"]) / 2 / x["value"] * 100 for rs in summary.values() for x in rs]
    if all_hw:
        print(f"median CI half-width over all cells and runs: {statistics.median(all_hw):.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
