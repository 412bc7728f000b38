"""What does eager's latency depend on: the candidate's presence, or running between its calls?

Each measurement is its own process (ResNet18 at 128x128, one thread, CPU) timing eager for
a few seconds under one condition:

- alone: only the eager model exists in the process.
- idle-constant / idle-tensor: ONNX Runtime (constant or tensor weights) is built and run
  once, then left alone while eager is timed.
- paired-constant / paired-tensor / paired-eager: eager and the candidate alternate in
  rounds of 5 calls, as `benchmarks.timing.time_paired` does ("eager" = a deep copy).
- blocked-constant / blocked-tensor: as paired, in turns of 25 calls whose first 5 are
  not kept (does eager recover once the candidate has been quiet for a while?).

It also times each candidate alone (eager built, never called while timing), so the
candidate's side of a split design can be compared with its paired value. Conditions run
in a shuffled order, repeated, so a drift of the machine cannot line up with one condition.

    PYTHONPATH=. .venv/bin/python experiments/eager_neighbour.py --batch 2,16 --repeats 4
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

CONDITIONS = ("alone", "idle-constant", "idle-tensor", "paired-constant", "paired-tensor",
              "paired-eager", "blocked-constant", "blocked-tensor", "candidate-constant",
              "candidate-tensor")


def _time_rounds(fns: list[Any], seconds: float, iters: int = 5,
                 discard: int = 0) -> list[list[float]]:
    """Rounds of `iters` calls of each fn in turn, order alternating; ms per call per fn.

    The first `discard` calls of each side's turn are run but not kept."""
    out: list[list[float]] = [[] for _ in fns]
    start, r = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            for n in range(iters):
                t0 = time.perf_counter_ns()
                fns[i]()
                if n >= discard:
                    out[i].append((time.perf_counter_ns() - t0) / 1e6)
        r += 1
    return out


def measure(condition: str, batch: int, seconds: float) -> dict[str, Any]:
    import torch

    from benchmarks.backends import get_backend
    from benchmarks.models import build_model, example_input
    from benchmarks.spec import BenchSpec

    torch.set_num_threads(1)
    backend_name, weights = "eager", "constant"
    if condition.endswith("-constant") or condition.endswith("-tensor"):
        backend_name, weights = "onnxruntime", condition.rsplit("-", 1)[1]
    spec = BenchSpec(model="resnet18", image_size=128, batch_size=batch, backend=backend_name,
                     weights=weights, options={"threads": 1})
    model = build_model(spec)
    x = example_input(spec)
    with torch.inference_mode():
        model(x)
    fns = [lambda: model(x)]
    if condition != "alone":
        compiled = get_backend(spec.backend).compile(copy.deepcopy(model), x, spec)
        with torch.inference_mode():
            compiled.run(x)
        candidate = lambda: compiled.run(x)  # noqa: E731
        if condition.startswith(("paired", "blocked")):
            fns.append(candidate)
        elif condition.startswith("candidate"):
            fns = [candidate]
    with torch.inference_mode():
        _time_rounds(fns, 1.0)  # warm-up
        blocked = condition.startswith("blocked")
        rounds = _time_rounds(fns, seconds, iters=25 if blocked else 5,
                              discard=5 if blocked else 0)
    medians = [statistics.median(r) for r in rounds]
    names = ["candidate"] if condition.startswith("candidate") else ["eager", "candidate"]
    return {"condition": condition, "batch": batch,
            **{f"{n}_ms": m for n, m in zip(names, medians, strict=False)}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", default="2,16")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=2, metavar=("CONDITION", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]), args.seconds)))
        return 0
    rng = random.Random(0)
    batches = [int(b) for b in args.batch.split(",")]
    conditions = args.conditions.split(",")
    rows: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        todo = [(c, b) for b in batches for c in conditions]
        rng.shuffle(todo)
        for condition, batch in todo:
            proc = subprocess.run([sys.executable, __file__, "--seconds", str(args.seconds),
                                   "--child", condition, str(batch)],
                                  capture_output=True, text=True, check=True)
            row = json.loads(proc.stdout.strip().splitlines()[-1]) | {"repeat": repeat}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    table: dict[tuple[int, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        for side in ("eager_ms", "candidate_ms"):
            if side in row:
                table[(row["batch"], row["condition"])][side].append(row[side])
    print("\n| batch | condition | eager ms (each process) | candidate ms (each process) |")
    print("|---|---|---|---|")
    for (batch, condition), sides in sorted(table.items()):
        cells = [" / ".join(f"{v:.1f}" for v in sides.get(s, [])) or "-"
                 for s in ("eager_ms", "candidate_ms")]
        print(f"| {batch} | {condition} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
