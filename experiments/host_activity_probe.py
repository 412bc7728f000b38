"""Does what the host's CPUs do move a GPU timing of CUDA-graph replays?

Prepared ahead (benchmarks.prepared), some GPU processes timed eager ResNet50 at batch 1
about 12% faster than every other (0.90 against 1.02 ms; 3.52 against 3.64 at batch 32),
with every other child stopped while they timed. The difference was about 0.35 us per
kernel on both sides (eager 342 kernels, the candidate 105), which points at the launch
of each kernel rather than its work: the GPU reads a graph's commands and writes its
events through the host's memory, and how fast that goes can depend on whether the host's
cores and memory are awake. This probe times the same replays, interleaved in blocks,
while the host is:

- idle: nothing else runs;
- busy-1 / busy-8: one or eight processes spin on other cores;
- dma-0: this process holds /dev/cpu_dma_latency at 0 (the kernel keeps every core out of
  deep idle states while the file is open), nothing else runs;
- busy-8+dma-0: both;

then again with other processes that hold CUDA contexts, waiting or stopped (SIGSTOP) as
prepared children are while one times (`--phases`). The timed thread is pinned to the last core, the
spinners to the first ones. Blocks run in a shuffled order, repeated, so a drift of the
machine cannot line up with one condition.

    bash scripts/gpu_run python3 -m experiments.host_activity_probe --out /tmp/hap.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CONDITIONS = ("idle", "busy-1", "busy-8", "dma-0", "busy-8+dma-0")
DMA_LATENCY = "/dev/cpu_dma_latency"
SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"
CONTEXT = ("import torch, sys\ntorch.ones(1, device='cuda').add_(1)\ntorch.cuda.synchronize()\n"
           "print('ready', flush=True)\nsys.stdin.read()\n")


def _host_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"cores": os.cpu_count()}
    cpu0 = Path("/sys/devices/system/cpu/cpu0")
    with contextlib.suppress(OSError):
        facts["governor"] = (cpu0 / "cpufreq/scaling_governor").read_text().strip()
    states = []
    for state in sorted(cpu0.glob("cpuidle/state*")):
        with contextlib.suppress(OSError):
            states.append({"name": (state / "name").read_text().strip(),
                           "latency_us": int((state / "latency").read_text()),
                           "disabled": (state / "disable").read_text().strip() == "1"})
    facts["idle_states"] = states
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
    facts["dma_latency_file"] = os.access(DMA_LATENCY, os.W_OK)
    return facts


class Spinners:
    """Busy processes on the first cores, stopped until a condition asks for them."""

    def __init__(self, count: int, last_core: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(i % last_core)])
                      for i in range(count)]
        self.run(0)

    def run(self, count: int) -> None:
        for i, proc in enumerate(self.procs):
            os.kill(proc.pid, signal.SIGCONT if i < count else signal.SIGSTOP)

    def close(self) -> None:
        for proc in self.procs:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def dma_latency_zero(wanted: bool) -> Iterator[bool]:
    if not wanted:
        yield False
        return
    try:
        fd = os.open(DMA_LATENCY, os.O_WRONLY)
    except OSError:
        yield False
        return
    try:
        os.write(fd, struct.pack("i", 0))
        yield True
    finally:
        os.close(fd)


def _populate(contexts: list[subprocess.Popen[str]], phase: str) -> None:
    """End the other CUDA processes alive, then start the ones `phase` asks for."""
    for proc in contexts:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()
    contexts.clear()
    kind, _, count = phase.partition("-")
    if kind not in ("idle", "stopped"):
        return
    for _ in range(int(count)):
        proc = subprocess.Popen([sys.executable, "-c", CONTEXT], text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        proc.stdout.readline()
        contexts.append(proc)
    if kind == "stopped":
        for proc in contexts:
            os.kill(proc.pid, signal.SIGSTOP)


def _models(batches: list[int]) -> dict[int, tuple[Callable[[], Any], Any]]:
    import torch

    from benchmarks.models import build_model, example_input
    from benchmarks.spec import BenchSpec
    from benchmarks.timing import _CudaRoundTimer, capture_cuda_graph

    out = {}
    for batch in batches:
        spec = BenchSpec(model="resnet50", backend="eager", precision="fp16", batch_size=batch,
                         device="cuda")
        model = build_model(spec).to("cuda", torch.float16).eval()
        x = example_input(spec).to("cuda", torch.float16)

        def call(model: Any = model, x: Any = x) -> Any:
            with torch.inference_mode():
                return model(x)
        replay = capture_cuda_graph(call)
        replay.keep = call  # type: ignore[attr-defined]  # the weights and input the graph reads
        out[batch] = (replay, _CudaRoundTimer(50))
    return out


def _time(models: dict[int, tuple[Callable[[], Any], Any]], seconds: float
          ) -> dict[int, float]:
    """The median per-call time of each batch's replays over `seconds` of rounds each."""
    medians = {}
    for batch, (replay, timer) in models.items():
        samples: list[float] = []
        for _ in range(3):  # warm-up rounds, not kept
            timer(replay, 50)
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            samples.extend(timer(replay, 50))
        medians[batch] = statistics.median(samples)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", default="1,32")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--phases", default="alone,stopped-4",
                        help="other CUDA processes per phase: alone (none yet), idle-N (N "
                             "alive, waiting), stopped-N (N alive, SIGSTOPped), exited "
                             "(every other one ended)")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    args = parser.parse_args()
    import torch

    last = (os.cpu_count() or 2) - 1
    os.sched_setaffinity(0, {last})
    models = _models([int(b) for b in args.batch.split(",")])
    spinners = Spinners(8, last)
    blocks: list[dict[str, Any]] = []
    contexts: list[subprocess.Popen[str]] = []
    phases = args.phases.split(",")
    conditions = args.conditions.split(",")
    rng = random.Random(0)
    try:
        for phase in phases:
            _populate(contexts, phase)
            order = [c for _ in range(args.repeats) for c in conditions]
            rng.shuffle(order)
            for condition in order:
                spinners.run(8 if "busy-8" in condition else 1 if condition == "busy-1"
                             else 0)
                with dma_latency_zero("dma-0" in condition) as held:
                    time.sleep(0.3)
                    medians = _time(models, args.seconds)
                spinners.run(0)
                clock = None
                with contextlib.suppress(Exception):
                    clock = torch.cuda.clock_rate()
                blocks.append({"phase": phase, "condition": condition, "dma_held": held,
                               "medians_ms": medians, "sm_clock_mhz": clock})
                print(phase, condition, {b: round(m, 4) for b, m in medians.items()},
                      clock, flush=True)
    finally:
        spinners.close()
        _populate(contexts, "exited")
    summary: dict[str, dict[str, dict[int, float]]] = defaultdict(dict)
    for phase in phases:
        for condition in conditions:
            rows = [b["medians_ms"] for b in blocks
                    if b["phase"] == phase and b["condition"] == condition]
            summary[phase][condition] = {batch: round(statistics.median(r[batch] for r in rows), 4)
                                         for batch in rows[0]}
    Path(args.out).write_text(json.dumps({"host": _host_facts(), "summary": summary,
                                          "blocks": blocks}, indent=1))
    print(json.dumps(summary, indent=1))
    print(json.dumps(_host_facts(), indent=1))


if __name__ == "__main__":
    main()
