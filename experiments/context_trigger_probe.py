"""What, done by another process, moves a GPU process into the faster replay state?

`experiments.context_order_probe` found that once another process makes a CUDA context on
the same GPU after a timing process's own, that process's CUDA-graph replays run about
0.35 us a kernel faster for the rest of its life. On a two-GPU host, the 16-cell fleet's
two-worker phase had six processes (of 65) time both sides 3-11% faster than their cells'
others, clustered in time on both GPUs, with no foreign process seen on either GPU. So:
does a context on the *other* GPU do it? Does a bare driver initialisation, or an NVML
reading (which every worker makes)? And does a context made with the driver API alone (no
torch, a fraction of a second) do it, so that a timing process could be put into the
faster state on purpose, whatever happens around it?

Each case is a fresh timing process on GPU 0 (`CUDA_VISIBLE_DEVICES=0`): it times, one
trigger process runs to its end, it times again.

    bash scripts/gpu_run python3 -m experiments.context_trigger_probe --out /tmp/ctp.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from experiments.host_activity_probe import _models, _time

_DRIVER = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
if sys.argv[1] == "context":
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cuda.cuCtxDestroy_v2(ctx) == 0
"""
_TORCH = "import torch\ntorch.ones(1, device='cuda').add_(1)\ntorch.cuda.synchronize()\n"
_NVML = """
import pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i))
pynvml.nvmlShutdown()
"""
# name: (code, argv, CUDA_VISIBLE_DEVICES or None for unset)
TRIGGERS: dict[str, tuple[str, list[str], str | None]] = {
    "nothing": ("pass", [], "0"),
    "nvml-all-gpus": (_NVML, [], None),
    "driver-init-all-gpus": (_DRIVER, ["init"], None),
    "driver-init-gpu0": (_DRIVER, ["init"], "0"),
    "torch-context-gpu1": (_TORCH, [], "1"),
    "driver-context-gpu1": (_DRIVER, ["context"], "1"),
    "driver-context-gpu0": (_DRIVER, ["context"], "0"),
    "torch-context-gpu0": (_TORCH, [], "0"),
}


def _env(visible: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def _timer(batches: list[int], seconds: float, blocks: int) -> None:
    models = _models(batches)
    for label in ("before", "after"):
        rows = [_time(models, seconds) for _ in range(blocks)]
        print(json.dumps({"label": label, "medians_ms": rows}), flush=True)
        if label == "before":
            sys.stdin.readline()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", default=",".join(TRIGGERS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", default="1")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--timer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    if args.timer:
        _timer(batches, args.seconds, args.blocks)
        return
    report: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for case in args.cases.split(","):
            code, argv, visible = TRIGGERS[case]
            timer = subprocess.Popen(
                [sys.executable, "-m", "experiments.context_trigger_probe", "--timer",
                 "--out", "-", "--batch", args.batch, "--seconds", str(args.seconds),
                 "--blocks", str(args.blocks)],
                text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env("0"))
            assert timer.stdout is not None and timer.stdin is not None
            before = json.loads(timer.stdout.readline())
            trigger = subprocess.run([sys.executable, "-c", code, *argv], env=_env(visible),
                                     capture_output=True, text=True, timeout=120)
            timer.stdin.write("go\n")
            timer.stdin.flush()
            after = json.loads(timer.stdout.readline())
            timer.wait()
            row = {"case": case, "repeat": repeat, "trigger_exit": trigger.returncode,
                   "trigger_stderr": trigger.stderr[-300:], "before": before["medians_ms"],
                   "after": after["medians_ms"]}
            report.append(row)
            first = {b: round(min(r[str(b)] for r in row["before"]), 4) for b in batches}
            then = {b: round(min(r[str(b)] for r in row["after"]), 4) for b in batches}
            print(case, repeat, "exit", trigger.returncode, "before", first, "after", then,
                  flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
