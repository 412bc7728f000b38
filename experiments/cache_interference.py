"""Eager's latency next to three candidates in one process: a deep copy of itself (the eager
backend: its own weights), ONNX Runtime constant (its own folded copy of the weights), and
ONNX Runtime tensor (reads eager's own weight tensors). One process per measurement, three
repeats, ResNet18 at 128x128, batch 16, one thread.

Why: on this project's CPU (32 MiB L3) eager measured next to ONNX Runtime constant runs
slower than next to ONNX Runtime tensor, which inflates the constant speedup (README,
"The first-cell bias"). If two copies of the weights in one process are the cause, eager
next to its own deep copy is slow too.

    PYTHONPATH=. .venv/bin/python experiments/cache_interference.py
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.isolation import run_isolated
from benchmarks.spec import BenchSpec
from benchmarks.timing_policy import default_timing

CANDIDATES = (("onnxruntime", "tensor"), ("onnxruntime", "constant"), ("eager", "constant"))


def main() -> None:
    timing = replace(default_timing("cpu"), processes=1, max_processes=0)
    base = BenchSpec(model="resnet18", image_size=128, batch_size=16, options={"threads": 1},
                     timing=timing)
    for repeat in range(3):
        for backend, weights in CANDIDATES:
            result = run_isolated(replace(base, backend=backend, weights=weights), timeout_s=300)
            if result.baseline is None or result.candidate is None:
                print(repeat, backend, weights, result.status, result.reason)
                continue
            print(f"{repeat} {backend:11} {weights:8} eager {result.baseline.median_ms:6.1f} ms"
                  f"  candidate {result.candidate.median_ms:6.1f} ms", flush=True)


if __name__ == "__main__":
    main()
