"""Run a probe's phases each in a fresh process with inductor and Triton caches of its own.

A build probe asks what a later process gets from an earlier one's saved build, so every
phase must start as on a fresh host as far as compile caches go: its own temporary
TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR. The probe module is run again with
`--phase KIND --weights W --batch B` and prints one JSON row as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def run_phases(module: str, out: Path, device: str, cells: Sequence[tuple[str, int]],
               kinds: Sequence[str]) -> list[dict[str, Any]]:
    """Each (weights, batch) cell's phases in order; each row gets the process's wall
    seconds, or the end of its stderr when it failed. Rows are printed as they come and
    written to OUT/probe.json."""
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for weights, batch in cells:
        for kind in kinds:
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor",
                           TRITON_CACHE_DIR=f"{tmp}/triton")
                t0 = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", module, "--out", str(out), "--device", device,
                     "--phase", kind, "--weights", weights, "--batch", str(batch)],
                    env=env, capture_output=True, text=True, check=False)
                wall = time.perf_counter() - t0
            if done.returncode != 0:
                row = {"phase": kind, "weights": weights, "batch": batch,
                       "error": done.stderr[-2500:]}
            else:
                row = json.loads(done.stdout.strip().splitlines()[-1])
                row["process_wall_s"] = round(wall, 2)
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
    (out / "probe.json").write_text(json.dumps(rows, indent=1, default=str))
    return rows


Phase = Callable[[str, str, int, str, Path], dict[str, Any]]


def main(module: str, phase: Phase, cells: Sequence[tuple[str, int]], kinds: Sequence[str],
         artifact_prefix: str = "") -> int:
    """A probe's command line, both sides of the protocol `run_phases` speaks: with
    `--phase` one phase in this process (`phase(kind, weights, batch, device, artifact)`,
    its row printed as JSON); without, every cell's `--phases` (default `kinds`) each in
    a fresh process. The artifact a build leaves for later phases is
    OUT/<prefix><weights>-<batch>.bin."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--phase", default="")
    parser.add_argument("--weights", default="constant")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--phases", default=",".join(kinds),
                        help="the phases to run, in order, comma-separated")
    args = parser.parse_args()
    if args.phase:
        artifact = args.out / f"{artifact_prefix}{args.weights}-{args.batch}.bin"
        print(json.dumps(phase(args.phase, args.weights, args.batch, args.device, artifact),
                         default=str))
        return 0
    run_phases(module, args.out, args.device, cells, args.phases.split(","))
    return 0
