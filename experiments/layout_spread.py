"""Does rebuilding a side inside one process sample the spread that new processes do?

On a 2-core virtual machine, fresh processes of one ONNX Runtime session run at levels 2-4%
(SD) apart: that spread, not the clock, sets a CPU cell's interval. A new process costs
about 3.5 s; rebuilding the session (or eager's weights) in the same process costs a
fraction of that. This script measures both kinds of sample side by side:

- P fresh processes, one after another, each pinned to the last core, one thread;
- in each, K instances of each side built one after another (ORT: K InferenceSessions of
  the same file; eager: K deep copies of the module, so every weight lives at a new
  address), all kept alive and timed round-robin (round r times every instance in turn),
  by the thread's CPU time, 3 calls a round.

It prints, per side, the SD of the instances' log levels within a process and of the
process means between processes: if the within-process instance SD matches the SD of one
instance per process across processes, an in-process rebuild samples the same spread.

usage: python experiments/layout_spread.py --processes 8 --instances 5 --rounds 12 --out F
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(args: argparse.Namespace) -> None:
    import numpy as np
    import onnxruntime as ort
    import torch

    from benchmarks.models import build_model, example_input
    from benchmarks.spec import BenchSpec

    core = max(os.sched_getaffinity(0))
    torch.set_num_threads(1)
    spec = BenchSpec(weights=args.weights)
    model = build_model(spec)
    x = example_input(spec)
    t0 = time.perf_counter()
    eagers = [copy.deepcopy(model) for _ in range(args.instances)] if "eager" in args.sides \
        else []
    eager_build = (time.perf_counter() - t0) / max(1, len(eagers))
    sessions = []
    t0 = time.perf_counter()
    if "ort" in args.sides:
        for _ in range(args.instances):
            o = ort.SessionOptions()
            o.intra_op_num_threads = 1
            o.inter_op_num_threads = 1
            o.log_severity_level = 3
            sessions.append(ort.InferenceSession(args.onnx, o,
                                                 providers=["CPUExecutionProvider"]))
    ort_build = (time.perf_counter() - t0) / max(1, len(sessions))
    xn = x.numpy()
    os.sched_setaffinity(0, {core})
    calls = {"eager": [lambda m=m: m(x) for m in eagers],
             "ort": [lambda s=s: s.run(None, {"input": xn}) for s in sessions]}
    with torch.inference_mode():
        for fns in calls.values():
            for fn in fns:
                fn()
        rounds: dict[str, list[list[float]]] = {k: [[] for _ in v] for k, v in calls.items()}
        for _ in range(args.rounds):
            for side, fns in calls.items():
                for i, fn in enumerate(fns):
                    t = time.thread_time_ns()
                    for _ in range(3):
                        fn()
                    rounds[side][i].append((time.thread_time_ns() - t) / 3e6)
    out = {side: [float(np.median(r)) for r in per] for side, per in rounds.items() if per}
    out["build_seconds"] = {"eager": eager_build, "ort": ort_build}  # type: ignore[assignment]
    print(json.dumps(out))


def export(path: Path, weights: str) -> None:
    import torch

    from benchmarks.models import build_model, example_input
    from benchmarks.spec import BenchSpec

    spec = BenchSpec(weights=weights)
    torch.onnx.export(build_model(spec), (example_input(spec),), str(path), dynamo=False,
                      input_names=["input"], output_names=["output"], opset_version=17)


def sd_log(values: list[float]) -> float:
    import math

    logs = [math.log(v) for v in values]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true")
    p.add_argument("--processes", type=int, default=8)
    p.add_argument("--instances", type=int, default=5)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--sides", default="eager,ort")
    p.add_argument("--weights", default="constant")
    p.add_argument("--onnx", default="")
    p.add_argument("--out", default="")
    args = p.parse_args()
    if args.child:
        child(args)
        return
    tmp = Path(tempfile.mkdtemp())
    onnx = tmp / "model.onnx"
    export(onnx, args.weights)
    per: list[dict[str, list[float]]] = []
    for j in range(args.processes):
        t = time.monotonic()
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--instances", str(args.instances),
             "--rounds", str(args.rounds), "--sides", args.sides, "--onnx", str(onnx),
             "--weights", args.weights],
            capture_output=True, text=True, check=True)
        one = json.loads(proc.stdout.strip().splitlines()[-1])
        per.append(one)
        print(f"process {j + 1}: {time.monotonic() - t:.1f}s "
              + "; ".join(f"{s} " + " ".join(f"{v:.2f}" for v in one[s])
                          for s in ("eager", "ort") if s in one), flush=True)
    report: dict[str, object] = {"processes": per}
    for side in ("eager", "ort"):
        if side not in per[0]:
            continue
        within = statistics.mean(sd_log(p[side]) for p in per)
        first = sd_log([p[side][0] for p in per])
        means = sd_log([statistics.mean(p[side]) for p in per])
        report[side] = {"within_sd": within, "between_first_instance_sd": first,
                        "between_process_mean_sd": means}
        print(f"{side}: SD of instances within a process {100 * within:.2f}%; of instance 1 "
              f"across processes {100 * first:.2f}%; of process means {100 * means:.2f}% "
              f"(a pure layout effect would give {100 * within / args.instances ** 0.5:.2f}%)")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
