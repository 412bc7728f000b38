"""Write real result documents of every shape the product produces, for the schema's tests.

    python -m scripts.result_documents OUT_DIR [--device cuda]

The documents come from the real code paths, with a short timing policy so they stay
small: `run_spec` (one process, as `speedwatch bench --no-isolate` and every child write),
and `AdaptiveMeasurement` over several processes, paired and split (what a worker stores),
which adds `evidence.processes`, `evidence.sides` and `evidence.adaptive`. One difference
from a worker: the "child processes" run here, one after another in this process
(`split_sides.run_one` is replaced), because the parent's reader needs pydantic and this
script must run where only torch and the backends are installed (a GPU host without the
service). Each document is written as it would be stored, without being read back.
Failed and skipped documents are written too (an invalid spec; a backend not installed).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import adaptive, split_sides
from benchmarks.result import BenchResult
from benchmarks.runner import run_spec
from benchmarks.spec import BenchSpec
from benchmarks.stats import Reference
from benchmarks.timing_policy import TimingPolicy


def _in_process(spec: BenchSpec, **_kwargs: Any) -> BenchResult:
    return run_spec(spec)


def _timing(device: str, processes: int) -> TimingPolicy:
    return TimingPolicy(warmup_iters=3, rounds=12, iters_per_round=4, max_seconds=1.0,
                        min_rounds=3, warmup_seconds=0.0, bootstrap_resamples=300,
                        processes=processes, max_processes=processes + 1,
                        target_half_width=0.003 if device == "cuda" else 0.0)


def documents(device: str) -> dict[str, BenchResult]:
    """name -> document, for every shape worth checking on `device`."""
    base = BenchSpec(model="resnet18", width=16, image_size=64, batch_size=2, device=device,
                     options={"threads": 1} if device == "cpu" else {},
                     timing=_timing(device, 1))
    candidate = "inductor" if device == "cuda" else "onnxruntime"
    out: dict[str, BenchResult] = {}
    out["single"] = run_spec(replace(base, backend=candidate))
    if device == "cuda":
        out["single-nographs"] = run_spec(replace(
            base, backend=candidate, timing=replace(base.timing, cuda_graphs=False)))
    out["failed-invalid-spec"] = run_spec(replace(base, backend="eager", batch_size=0))
    out["skipped-not-installed"] = run_spec(replace(base, backend="torch_tensorrt"))
    split_sides.run_one = _in_process  # see the docstring
    for sides in ("paired", "split"):
        spec = replace(base, backend=candidate, options={**base.options, "sides": sides},
                       timing=_timing(device, 2))
        measurement = adaptive.AdaptiveMeasurement(
            spec, reference_for=lambda _first: Reference(0.03, 1.0, 0.002), timeout_s=600)
        while not measurement.done:
            measurement.step()
        out[f"adaptive-{sides}"] = measurement.result()
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Write real result documents.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, result in documents(args.device).items():
        path = args.out / f"{args.device}-{name}.json"
        path.write_text(result.to_json(indent=1) + "\n", encoding="utf-8")
        print(f"{path}: {result.status} {result.reason or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
