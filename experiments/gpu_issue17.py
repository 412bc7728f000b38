"""Issue 17's GPU tables, measured with `speedwatch bench` on whatever GPU this host has.

1. torch.compile modes as the opt_level axis: ResNet50 bs1 fp16, inductor (frozen weights),
   default vs max-autotune-no-cudagraphs: speedup over eager with its 95% CI, and the
   generated kernel count per mode.
2. Static vs dynamic shapes: ResNet50 fp16 inductor at batch 1 and 8, static and
   `dynamic=True` (a symbolic batch; dynamo still specialises a batch of 1, which the
   evidence column says): the cost of dynamism with CIs.

Each matrix runs interleaved in one `speedwatch bench` (every spec in processes of its own,
adaptive over processes: the service's GPU defaults, CUDA-graph replays). Writes
OUT/<name>.json (the result documents), OUT/<name>.txt (bench's own table) and
OUT/tables.md (the tables for benchmarks/README.md), and prints the tables.

    bash scripts/gpu_wheelhouse       # here, once: the wheels the GPU host lacks, into .whl/
    bash scripts/gpu_run python3 experiments/gpu_issue17.py --out /tmp/issue17    # on the GPU

`--device cpu --width 8 --image-size 32` runs the same plumbing on a CPU in seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

MATRICES: dict[str, list[str]] = {
    "inductor-modes": ["--model", "resnet50", "--backend", "inductor", "--weights", "constant",
                       "--precision", "fp16", "--batch", "1",
                       "--opt-level", "default,max-autotune-no-cudagraphs"],
    "inductor-shapes": ["--model", "resnet50", "--backend", "inductor", "--weights", "constant",
                        "--precision", "fp16", "--batch", "1,8", "--shape-mode", "static,dynamic"],
}


def bench(name: str, args: list[str], extra: list[str], out: Path) -> list[dict[str, Any]]:
    path = out / f"{name}.json"
    command = [sys.executable, "-m", "cli", "bench", *args, *extra, "--json", str(path)]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    (out / f"{name}.txt").write_text(f"$ {' '.join(command[2:])}\n(exit {proc.returncode}, "
                                     f"{time.monotonic() - started:.0f} s)\n{proc.stdout}\n"
                                     f"{proc.stderr[-4000:]}")
    if not path.is_file():
        raise SystemExit(f"{name}: speedwatch bench wrote no results; see {out / name}.txt")
    results: list[dict[str, Any]] = json.loads(path.read_text())
    return results


def row(result: dict[str, Any]) -> str:
    spec, ev = result["spec"], result.get("evidence") or {}
    speed = result.get("speedup") or {}
    cand, base = result.get("candidate") or {}, result.get("baseline") or {}
    ci = (f"{speed['value']:.3f}x [{speed['ci_low']:.3f}, {speed['ci_high']:.3f}]"
          if speed else result.get("reason") or result["status"])
    dyn = ev.get("dynamic")
    notes = []
    if ev.get("batch1_specialized"):
        notes.append("batch 1 specialised")
    adaptive = ev.get("adaptive")
    if isinstance(adaptive, dict) and adaptive.get("processes"):
        notes.append(f"{adaptive['processes']} processes, {adaptive.get('outcome')}")
    return (f"| {spec.get('opt_level', 'default')} | {spec['batch_size']} | "
            f"{'dynamic' if dyn else spec['shape_mode']} | {base.get('median_ms', 0):.3f} | "
            f"{cand.get('median_ms', 0):.3f} | {ci} | {ev.get('inductor_kernels', '-')} | "
            f"{ev.get('graph_breaks', '-')} | {', '.join(notes)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--width", default="64")
    parser.add_argument("--image-size", default="224")
    parser.add_argument("--only", choices=sorted(MATRICES), action="append")
    parser.add_argument("--bench-arg", action="append", default=[],
                        help="extra `speedwatch bench` argument (repeat), e.g. --max-processes=3")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    extra = ["--device", args.device, "--width", args.width, "--image-size", args.image_size,
             *args.bench_arg]
    import torch

    device = (torch.cuda.get_device_name(0) if torch.cuda.is_available()
              else f"CPU ({platform.machine()})")
    lines = [f"Measured on {device}, torch {torch.__version__}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", ""]
    for name in args.only or sorted(MATRICES):
        results = bench(name, MATRICES[name], extra, args.out)
        lines += [f"### {name}", "", "$ speedwatch bench " + " ".join(MATRICES[name] + extra), "",
                  "| opt_level | batch | shapes | eager ms | inductor ms | speedup [95% CI] "
                  "| kernels | graph breaks | notes |",
                  "|---|---|---|---|---|---|---|---|---|",
                  *(row(r) for r in results), ""]
    text = "\n".join(lines)
    (args.out / "tables.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
