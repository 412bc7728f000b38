"""Why does a frozen build loaded as its kept program time differently from a fresh one?

Side by side on one H200 (2026-11-29), ResNet50 fp16 constant weights: processes that
loaded the kept program (benchmarks.backends.inductor_program) timed the candidate 0.4%
slower at batch 1 and 0.25% faster at batch 32 than processes that compiled afresh, with
the same build fingerprint, each kind tight among its own. This probe times, in one
process, variants of the same compiled graph that differ in one thing each, interleaved
round by round under CUDA graphs (as the product times):

- `compiled`: the build as torch.compile made it (dynamo, AOTAutograd, the module);
- `program`: the kept program loaded back (constants through torch.save and torch.load);
- `same`: the module loaded again with the build's own constant tensors (another code path,
  the same memory);
- `cloned`: the module with the constants cloned on the device, in the build's order;
- `packed`: the module with the constants copied into one allocation.

`build` phases compile afresh (and keep the program for the `load` phases); `load` phases
load the program as a later process does (no `compiled` there).

    python -m experiments.program_level_probe --out /tmp/plp --device cuda
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments import fresh_phases

CELLS = [("constant", 1), ("constant", 32)]
PHASES = ("build", "load", "build", "load")
ROUNDS = 15


def _variants_of(module: Any, constants: dict[str, Any], x: Any) -> dict[str, Callable[[], Any]]:
    import torch
    from torch._inductor.codecache import PyCodeCache

    def loaded_with(attrs: dict[str, Any]) -> Callable[[], Any]:
        key, path = PyCodeCache.write(Path(str(module.__file__)).read_text())
        mod = PyCodeCache.load_by_key_path(key, path, attrs=attrs)
        return lambda: mod.call([x])[0]

    cloned = {k: v.clone(memory_format=torch.preserve_format) for k, v in constants.items()}
    total = sum(_aligned(v.untyped_storage().nbytes()) for v in constants.values())
    pool = torch.empty(total, dtype=torch.uint8, device=x.device)
    packed, offset = {}, 0
    for name, value in constants.items():
        size = value.untyped_storage().nbytes()
        storage = pool[offset:offset + size]
        view = torch.empty(0, dtype=value.dtype, device=x.device).set_(
            storage.untyped_storage(), storage.storage_offset() // value.element_size(),
            value.size(), value.stride())
        view.copy_(value)
        packed[name] = view
        offset += _aligned(size)
    return {"same": loaded_with(dict(constants)), "cloned": loaded_with(cloned),
            "packed": loaded_with(packed)}


def _aligned(n: int) -> int:
    return (n + 511) // 512 * 512


def _timed(variants: dict[str, Callable[[], Any]], iters: int) -> dict[str, Any]:
    """Each variant captured in a CUDA graph, then timed round by round, interleaved."""
    import torch

    from benchmarks.timing import capture_cuda_graph

    graphs = {name: capture_cuda_graph(fn) for name, fn in variants.items()}
    per: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(ROUNDS):
        for name, replay in graphs.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                replay()
            end.record()
            end.synchronize()
            per[name].append(start.elapsed_time(end) / iters)
    ref = statistics.median(per[next(iter(per))])
    return {name: {"median_ms": round(statistics.median(v), 5),
                   "vs_first_pct": round((statistics.median(v) / ref - 1) * 100, 3)}
            for name, v in per.items()}


def phase(kind: str, weights: str, batch: int, device: str, artifact: Path) -> dict[str, Any]:
    import torch

    from benchmarks.backends import inductor_program
    from benchmarks.backends.inductor import BACKEND, INDUCTOR_ARTIFACTS
    from benchmarks.models import build_model, example_input, model_dtype
    from benchmarks.spec import BenchSpec

    spec = BenchSpec(model="resnet50", backend="inductor", weights=weights, batch_size=batch,
                     device=device, precision="fp16" if device == "cuda" else "fp32")
    dtype = model_dtype(spec.precision)
    model = build_model(spec).to(device=device, dtype=dtype).eval().requires_grad_(False)
    x = example_input(spec).to(device=device, dtype=dtype)
    row: dict[str, Any] = {"phase": kind, "weights": weights, "batch": batch}
    program_path = artifact.with_name(f"program-{weights}-{batch}.pt")
    caches_path = artifact.with_name(f"caches-{weights}-{batch}.bin")
    t0 = time.perf_counter()
    variants: dict[str, Callable[[], Any]] = {}
    if kind == "build":
        compiled = BACKEND.compile_cached(model, x, spec, None)
        files = compiled.artifacts or {}
        program_path.write_bytes(files[inductor_program.PROGRAM_FILE])
        caches_path.write_bytes(files[INDUCTOR_ARTIFACTS])
        variants["compiled"] = lambda: compiled.run(x)
    else:
        torch.compiler.load_cache_artifacts(caches_path.read_bytes())
    torch._inductor.config.compile_threads = 1  # no compile workers beside the timing
    blob = program_path.read_bytes()
    run, _ = inductor_program.load(blob, x)
    variants["program"] = lambda: run(x)
    row["prepare_s"] = round(time.perf_counter() - t0, 2)
    module = inductor_program._graph_module() if kind == "load" else None
    if module is None:  # the build's own module: the one registered by the compile
        from torch._inductor.codecache import PyCodeCache

        module = next(m for m in PyCodeCache.modules if callable(getattr(m, "call", None)))
    constants = inductor_program._constants(module, inductor_program._source(module))
    with torch.inference_mode():
        variants.update(_variants_of(module, constants, x))
        outs = {name: fn() for name, fn in variants.items()}
        first = next(iter(outs.values()))
        row["equal_outputs"] = {name: bool(torch.equal(o, first)) for name, o in outs.items()}
        row["timed"] = _timed(variants, iters=200 if batch == 1 else 50)
    row["constants"] = len(constants)
    return row


def main() -> int:
    return fresh_phases.main("experiments.program_level_probe", phase, CELLS, PHASES)


if __name__ == "__main__":
    sys.exit(main())
