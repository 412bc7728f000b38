"""Does a torch.compile build made in one process load in another, and how fast?

Each phase is a fresh process with inductor and Triton caches of its own (a fresh host as
far as caches go): `build` compiles the cell from scratch and saves inductor's cache
artifacts (`torch.compiler.save_cache_artifacts`: FX graph, AOTAutograd, autotuning and
Triton entries) to a file; `load` loads them first (`torch.compiler.load_cache_artifacts`)
and then compiles the same cell; `fresh` compiles from scratch again. Each phase prints its
compile seconds, inductor's cache counters, the build fingerprint (benchmarks.build) and
the median of a few hundred timed calls, so it shows whether a loaded build is the built
one and what it saves.

    python -m experiments.build_reuse_probe --out /tmp/probe --device cuda
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from experiments import fresh_phases

CELLS = [("constant", 32), ("tensor", 1)]


def phase(kind: str, weights: str, batch: int, device: str, artifact: Path) -> dict[str, Any]:
    import torch
    from torch._dynamo.utils import counters

    from benchmarks import build
    from benchmarks.backends.inductor import BACKEND
    from benchmarks.models import build_model, example_input
    from benchmarks.spec import BenchSpec

    spec = BenchSpec(model="resnet50", backend="inductor", weights=weights, batch_size=batch,
                     device=device, precision="fp16" if device == "cuda" else "fp32")
    from benchmarks.models import model_dtype

    dtype = model_dtype(spec.precision)
    model = build_model(spec).to(device=device, dtype=dtype)
    x = example_input(spec).to(device=device, dtype=dtype)
    loaded: Any = None
    t0 = time.perf_counter()
    if kind == "load":
        info = torch.compiler.load_cache_artifacts(artifact.read_bytes())
        loaded = None if info is None else {k: len(v) for k, v in vars(info).items()
                                            if isinstance(v, list)}
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = BACKEND.compile(model, x, spec)
    t_compile = time.perf_counter() - t0
    saved = None
    if kind == "build":
        out = torch.compiler.save_cache_artifacts()
        if out is not None:
            artifact.write_bytes(out[0])
            saved = len(out[0])
    times = []
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(30):
        compiled.run(x)
    sync()
    for _ in range(200 if device == "cuda" else 20):
        t = time.perf_counter()
        compiled.run(x)
        sync()
        times.append(time.perf_counter() - t)
    times.sort()
    return {"phase": kind, "weights": weights, "batch": batch, "load_s": round(t_load, 3),
            "compile_s": round(t_compile, 2), "saved_bytes": saved, "loaded": loaded,
            "inductor_counters": dict(counters["inductor"]),
            "aot_autograd_counters": dict(counters["aot_autograd"]),
            "compile_times": torch._dynamo.utils.compile_times(repr="str")[-1500:],
            "fingerprint": build.fingerprint(compiled.build_choices),
            "median_ms": round(1000 * times[len(times) // 2], 4)}


def main() -> int:
    return fresh_phases.main("experiments.build_reuse_probe", phase, CELLS, ("build", "load"))


if __name__ == "__main__":
    sys.exit(main())
