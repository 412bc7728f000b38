"""What a forked GPU process still spends before it times, and what a warm server could
take off it.

A GPU child forked from the harness's server (benchmarks.forkserver) starts with torch,
scipy and the runner imported, yet its `start` phase is still 4-7 s on an H200 and a loaded
build 6-20 s. This probe measures, each in a fresh process:

- `imports`: after the server's own import (benchmarks.runner), the seconds of each module
  a child imports next (dynamo, inductor, Triton, the backends), and after each whether the
  CUDA driver has been initialised (`cuDeviceGetCount` answers CUDA_ERROR_NOT_INITIALIZED
  until someone calls cuInit; a server must not fork after that); then CUDA's first
  context;
- `build`: a cell compiled from scratch, its cache artifacts saved (as the build cache
  does);
- `load`: the artifacts loaded and the cell compiled again, under cProfile (the 40
  costliest calls by cumulative time), with inductor's compile workers (the default) or
  in-process (`TORCHINDUCTOR_COMPILE_THREADS=1`), each with its fingerprint, so a variant
  that loads a different build shows.

    bash scripts/gpu_run python3 -m experiments.warm_start_probe --out /tmp/wsp
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PRELOAD = ["torch._dynamo", "torch._inductor.config", "torch._inductor.compile_fx",
           "torch._inductor.codecache", "torch._inductor.runtime.triton_heuristics",
           "triton", "triton.compiler.compiler", "benchmarks.backends.eager",
           "benchmarks.backends.inductor", "torch._inductor.async_compile",
           "torch._inductor.select_algorithm"]


def imports() -> dict[str, Any]:
    import importlib

    from benchmarks.forkserver import cuda_driver_initialised

    t0 = time.perf_counter()
    import benchmarks.runner  # noqa: F401

    row: dict[str, Any] = {"benchmarks.runner": round(time.perf_counter() - t0, 3),
                           "cuda_initialised_after_runner": cuda_driver_initialised()}
    for name in PRELOAD:
        t0 = time.perf_counter()
        try:
            importlib.import_module(name)
            row[name] = round(time.perf_counter() - t0, 3)
        except Exception as exc:
            row[name] = f"{type(exc).__name__}: {exc}"[:200]
        row[f"cuda_initialised_after_{name}"] = cuda_driver_initialised()
    import torch

    t0 = time.perf_counter()
    row["torch.cuda.is_available"] = torch.cuda.is_available()
    row["is_available_s"] = round(time.perf_counter() - t0, 3)
    row["cuda_initialised_after_is_available"] = cuda_driver_initialised()
    t0 = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    row["first_context_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    from torch.utils._triton import has_triton

    row["has_triton"] = has_triton()
    row["has_triton_s"] = round(time.perf_counter() - t0, 3)
    return row


def load_or_build(kind: str, weights: str, batch: int, artifact: Path,
                  profile: bool) -> dict[str, Any]:
    from experiments.build_reuse_probe import phase

    if not profile:
        return phase(kind, weights, batch, "cuda", artifact)
    prof = cProfile.Profile()
    prof.enable()
    row = phase(kind, weights, batch, "cuda", artifact)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    row["profile_top40"] = text.getvalue()[-9000:]
    return row


def _child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "experiments.warm_start_probe", *args],
                          env=env, capture_output=True, text=True, check=False)
    wall = round(time.perf_counter() - t0, 2)
    if done.returncode != 0:
        return {"args": args, "exit": done.returncode, "wall_s": wall,
                "stderr": done.stderr[-3000:]}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row.update(args=args, wall_s=wall)
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", default="constant:1,tensor:1")
    parser.add_argument("--child", default="")
    parser.add_argument("--weights", default="constant")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--artifact", type=Path)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.child == "imports":
        print(json.dumps(imports(), default=str))
        return 0
    if args.child in ("build", "load"):
        print(json.dumps(load_or_build(args.child, args.weights, args.batch, args.artifact,
                                       args.profile), default=str))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        brief = {k: v for k, v in row.items() if k not in ("profile_top40", "compile_times")}
        print(json.dumps(brief, default=str), flush=True)
        (args.out / "probe.json").write_text(json.dumps(rows, indent=1, default=str))

    keep(_child(["--out", str(args.out), "--child", "imports"], dict(os.environ)))
    for cell in args.cells.split(","):
        weights, batch = cell.split(":")
        artifact = args.out / f"{weights}-{batch}.bin"
        common = ["--out", str(args.out), "--weights", weights, "--batch", batch,
                  "--artifact", str(artifact)]
        variants = [("build", {}, False), ("load", {}, True),
                    ("load", {"TORCHINDUCTOR_COMPILE_THREADS": "1"}, True),
                    ("load", {}, False), ("load", {"TORCHINDUCTOR_COMPILE_THREADS": "1"}, False)]
        for kind, extra, profile in variants:
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor",
                           TRITON_CACHE_DIR=f"{tmp}/triton", **extra)
                row = _child(["--child", kind, *common] + (["--profile"] if profile else []),
                             env)
            row["extra_env"] = extra
            keep(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
