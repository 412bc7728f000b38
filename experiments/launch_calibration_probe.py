"""Can a process read its own kernel-launch state, before it times anything?

In the faster launch state every kernel of a CUDA graph runs about 0.35 us shorter
(benchmarks.launch_state). A cell tells its processes' states apart only by comparing them
with each other, so a cell whose every process was in the faster state cannot tell. If a
graph of many tiny kernels (each a one-element add, so that a replay is almost all launch)
ran 0.35 us a kernel shorter in the faster state too, each process could read its state on
its own, in a fraction of a second.

The timing process here (a fresh one, on the GPU it is given) times eager ResNet50's replays
and the tiny graph's, in turns; then another process makes a CUDA context on the same GPU
(the one known way into the faster state: benchmarks.fingerprint.newer_gpu_processes) and
ends, and it times both again; then a second one does the same, and it times both a third
time (`--first driver`: the first context is made by benchmarks.launch_pin's helper through
the driver API, the second by torch). The tiny graph reads the state if its time per kernel
moves by what eager's time per kernel moves; the third block says whether the faster state
holds once entered (so that a process could be put into it on purpose, whatever happens on
the host afterwards).

    bash scripts/gpu_run python3 -m experiments.launch_calibration_probe --out /tmp/lcp.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import launch_pin
from experiments.context_order_probe import _holder
from experiments.host_activity_probe import _models, _time

LABELS = ("before", "after-newer-context", "after-second-context")
EAGER_KERNELS = 342  # eager ResNet50 fp16 at batch 1 (evidence.kernels_per_inference)


def _tiny_graph(kernels: int) -> Any:
    import torch

    from benchmarks.timing import capture_cuda_graph

    x = torch.zeros(1, device="cuda")

    def call() -> Any:
        for _ in range(kernels):
            x.add_(1.0)
        return x
    replay = capture_cuda_graph(call)
    replay.keep = x  # type: ignore[attr-defined]
    return replay


def _time_tiny(replay: Any, kernels: int, seconds: float) -> float:
    """Median microseconds a kernel over `seconds` of replays."""
    from benchmarks.timing import _CudaRoundTimer

    timer = _CudaRoundTimer(20)
    for _ in range(3):
        timer(replay, 20)
    samples: list[float] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        samples.extend(timer(replay, 20))
    return statistics.median(samples) * 1000 / kernels


def _timer(kernels: int, seconds: float, blocks: int) -> None:
    models = _models([1])
    tiny = _tiny_graph(kernels)
    for label in LABELS:
        rows = []
        for _ in range(blocks):
            eager_ms = _time(models, seconds)[1]
            rows.append({"eager_ms": eager_ms, "tiny_us_per_kernel":
                         _time_tiny(tiny, kernels, seconds)})
        print(json.dumps({"label": label, "rows": rows}), flush=True)
        if label != LABELS[-1]:
            sys.stdin.readline()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.7)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--first", choices=("torch", "driver"), default="torch",
                        help="what makes the first newer context: a torch process, or "
                             "benchmarks.launch_pin's driver-API helper")
    parser.add_argument("--timer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.timer:
        _timer(args.kernels, args.seconds, args.blocks)
        return
    report: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        timer = subprocess.Popen(
            [sys.executable, "-m", "experiments.launch_calibration_probe", "--timer", "--out",
             "-", "--kernels", str(args.kernels), "--seconds", str(args.seconds), "--blocks",
             str(args.blocks)], text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert timer.stdout is not None and timer.stdin is not None
        blocks = [json.loads(timer.stdout.readline())]
        helper_errors = []
        for step in range(len(LABELS) - 1):
            if step == 0 and args.first == "driver":
                # benchmarks.launch_pin's helper: the driver API, no torch
                helper_errors.append(launch_pin.make_newer_context(0))
            else:
                holder = _holder()  # a newer context on the same GPU (torch), then gone
                holder.kill()
                holder.wait()
            timer.stdin.write("go\n")
            timer.stdin.flush()
            blocks.append(json.loads(timer.stdout.readline()))
        timer.wait()

        def medians(rows: list[dict[str, float]]) -> dict[str, float]:
            return {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        b, a, a2 = (medians(block["rows"]) for block in blocks)
        row = {"repeat": repeat, "first": args.first, "helper_errors": helper_errors,
               "before": b, "after": a, "after_second": a2,
               "eager_shift_us_per_kernel": (b["eager_ms"] - a["eager_ms"]) * 1000
               / EAGER_KERNELS,
               "tiny_shift_us_per_kernel": b["tiny_us_per_kernel"] - a["tiny_us_per_kernel"],
               "second_eager_shift_us_per_kernel": (a["eager_ms"] - a2["eager_ms"]) * 1000
               / EAGER_KERNELS,
               "second_tiny_shift_us_per_kernel":
                   a["tiny_us_per_kernel"] - a2["tiny_us_per_kernel"]}
        report.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
