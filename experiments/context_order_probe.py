"""Which other CUDA processes move a process's replay times: older ones, or newer ones?

`experiments.host_activity_probe` found that a process's CUDA-graph replays of eager
ResNet50 ran 0.12 ms faster (batch 1: 1.011 to 0.893 ms) once another process had made a
CUDA context on the same GPU, and stayed so after that process ended; what the host's CPUs
did changed nothing. Here a timing process is started after `--before` other processes
already hold contexts (waiting, not stopped), times its replays, then one more process
makes a context and it times again. This process never touches CUDA itself.

    bash scripts/gpu_run python3 -m experiments.context_order_probe --out /tmp/cop.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from experiments.host_activity_probe import CONTEXT, _models, _time


def _holder() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", CONTEXT], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


def _timer(batches: list[int], seconds: float, blocks: int) -> None:
    """The timing process: times, says so, waits for a word, times again."""
    models = _models(batches)
    for label in ("first", "after-newer"):
        rows = [_time(models, seconds) for _ in range(blocks)]
        print(json.dumps({"label": label, "medians_ms": rows}), flush=True)
        if label == "first":
            sys.stdin.readline()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--before", default="0,1,3")
    parser.add_argument("--batch", default="1,32")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--timer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    if args.timer:
        _timer(batches, args.seconds, args.blocks)
        return
    report: list[dict[str, Any]] = []
    for before in (int(n) for n in args.before.split(",")):
        holders = [_holder() for _ in range(before)]
        timer = subprocess.Popen(
            [sys.executable, "-m", "experiments.context_order_probe", "--timer", "--out", "-",
             "--batch", args.batch, "--seconds", str(args.seconds), "--blocks",
             str(args.blocks)], text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert timer.stdout is not None and timer.stdin is not None
        first = json.loads(timer.stdout.readline())
        holders.append(_holder())  # a newer context than the timer's
        timer.stdin.write("go\n")
        timer.stdin.flush()
        after = json.loads(timer.stdout.readline())
        timer.wait()
        for holder in holders:
            holder.kill()
            holder.wait()
        row = {"older_contexts": before, "first": first["medians_ms"],
               "after_newer": after["medians_ms"]}
        report.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
