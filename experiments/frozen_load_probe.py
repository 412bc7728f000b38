"""Where does a loaded constant-weight (frozen) inductor build spend its seconds?

A loaded tensor-weight build takes 3-4 s on an H200, a loaded constant-weight one 11-18 s:
inductor's AOTAutograd cache is bypassed for a frozen graph, so tracing, the joint-graph
passes and freezing run again in every process before the FX graph cache answers. This
probe times those stages one by one in fresh processes with caches of their own
(experiments.fresh_phases): `build` compiles and saves inductor's cache artifacts; `load`
loads them and compiles again with each stage's wall time summed (wrappers around the
functions named in STAGES); `warm` first runs the pattern matcher's one-time set-ups
(the lazy inits a server could run once before forking) and times them apart, then loads;
`profile` loads under cProfile and prints the functions with the most cumulative time;
`modules` does so and lists the modules the compile imported, which `tuned` imports before
the model (as a server could) and then loads. By default (`--phases`) it compares the
product's loads side by side: `fixed` as the product loads now (bytecode kept,
benchmarks.bytecode; short tensor reprs while compiling), `plain` without either.

    python -m experiments.frozen_load_probe --out /tmp/flp --device cuda
    python -m experiments.frozen_load_probe --out /tmp/flp --device cuda \
        --phases build,load,warm,profile
"""

from __future__ import annotations

import cProfile
import importlib
import io
import json
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments import fresh_phases

CELLS = [("constant", 1)]
PHASES = ("build", "fixed", "plain", "fixed", "plain", "fixed")

# module, attribute path: each wrapped so its calls' wall seconds add up under its name
STAGES = [
    ("torch._dynamo.convert_frame", "ConvertFrameAssert.__call__"),
    ("torch._dynamo.backends.common", "aot_module_simplified"),
    ("torch._inductor.compile_fx", "_recursive_joint_graph_passes"),
    ("torch._inductor.compile_fx", "fake_tensor_prop"),
    ("torch._inductor.freezing", "freeze"),
    ("torch._inductor.freezing", "convert_conv_weights_to_channels_last"),
    ("torch._inductor.fx_passes.freezing_patterns", "freezing_passes"),
    ("torch._inductor.constant_folding", "constant_fold"),
    ("torch._inductor.compile_fx", "_compile_fx_inner"),
    ("torch._inductor.compile_fx", "fx_codegen_and_compile"),
    ("torch._dynamo.guards", "CheckFunctionManager.__init__"),
]

# the pattern matcher's one-time set-ups that a process pays on its first frozen compile
LAZY_INITS = [
    ("torch._inductor.fx_passes.joint_graph", "lazy_init"),
    ("torch._inductor.fx_passes.freezing_patterns", "lazy_init"),
    ("torch._inductor.fx_passes.post_grad", "lazy_init"),
]


def _wrap(spent: dict[str, float], counts: dict[str, int]) -> list[str]:
    missing = []
    for module_name, path in STAGES + LAZY_INITS:
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            missing.append(f"{module_name}.{path}")
            continue
        *parents, attr = path.split(".")
        for part in parents:
            owner = getattr(owner, part, None)
        original = getattr(owner, attr, None) if owner is not None else None
        if original is None:
            missing.append(f"{module_name}.{path}")
            continue
        name = f"{module_name.rsplit('.', 1)[-1]}.{path}"

        def timed(*args: Any, __original: Callable[..., Any] = original,
                  __name: str = name, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                spent[__name] += time.perf_counter() - t0
                counts[__name] += 1

        setattr(owner, attr, timed)
    return missing


def _lazy_inits(device: str) -> dict[str, Any]:
    """Each lazy init's seconds, and whether CUDA was initialised after it (a server that
    forks may not initialise CUDA)."""
    import torch

    inits: dict[str, Any] = {}
    for module_name, attr in LAZY_INITS:
        name = f"{module_name.rsplit('.', 1)[-1]}.{attr}"
        fn = getattr(importlib.import_module(module_name), attr)
        t0 = time.perf_counter()
        try:
            if attr == "lazy_init" and module_name.endswith("joint_graph"):
                fn(torch.device(device, 0) if device == "cuda" else torch.device(device))
            else:
                fn()
            inits[name] = round(time.perf_counter() - t0, 3)
        except Exception as exc:
            inits[name] = f"{type(exc).__name__}: {exc}"[:300]
        inits[f"{name}.cuda_initialized"] = bool(torch.cuda.is_initialized())
    return inits


def _preimport(listing: Path) -> dict[str, Any]:
    """Import the modules a compile imported in the `modules` phase (as a server could before
    it forks), with the seconds it took and the names that failed."""
    failed = []
    t0 = time.perf_counter()
    names = json.loads(listing.read_text()) if listing.exists() else []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
    return {"modules": len(names), "seconds": round(time.perf_counter() - t0, 3),
            "failed": failed[:20], "cuda_initialized": _cuda_initialized()}


def _cuda_initialized() -> bool:
    import torch

    return bool(torch.cuda.is_initialized())


def _bytecode_state() -> dict[str, Any]:
    """Whether this interpreter can keep compiled bytecode for torch's modules."""
    import os

    import torch

    root = Path(torch.__file__).parent
    return {"dont_write_bytecode": sys.dont_write_bytecode,
            "pycache_prefix": sys.pycache_prefix,
            "torch_dir_writable": os.access(root / "_inductor", os.W_OK),
            "inductor_pycache": (root / "_inductor" / "__pycache__").is_dir(),
            "pyc_files_in_inductor": len(list((root / "_inductor").glob("__pycache__/*.pyc")))}


def phase(kind: str, weights: str, batch: int, device: str, artifact: Path) -> dict[str, Any]:
    # `fixed` loads as the product does now: bytecode kept (benchmarks.bytecode) and short
    # tensor reprs while compiling; `plain` without either, as before
    if kind in ("build", "fixed"):
        from benchmarks.bytecode import keep_bytecode

        keep_bytecode()
    import torch

    if kind == "plain":
        import contextlib

        import benchmarks.backends.inductor as inductor_backend

        inductor_backend.short_tensor_reprs = contextlib.nullcontext  # type: ignore[assignment]

    from benchmarks import build
    from benchmarks.backends.inductor import BACKEND
    from benchmarks.models import build_model, example_input, model_dtype
    from benchmarks.spec import BenchSpec

    spec = BenchSpec(model="resnet50", backend="inductor", weights=weights, batch_size=batch,
                     device=device, precision="fp16" if device == "cuda" else "fp32")
    row: dict[str, Any] = {"phase": kind, "weights": weights, "batch": batch}
    if kind == "warm":
        # before anything touches the device, as a server would before it forks
        row["lazy_inits_before"] = _lazy_inits(device)
    if kind == "tuned":
        # before anything touches the device, as a server would before it forks
        row["preimport"] = _preimport(artifact.parent / "modules.json")
    dtype = model_dtype(spec.precision)
    model = build_model(spec).to(device=device, dtype=dtype)
    x = example_input(spec).to(device=device, dtype=dtype)
    spent: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    before = set(sys.modules)
    if kind not in ("profile", "modules"):
        row["not_wrapped"] = _wrap(spent, counts)
    if kind != "build" and artifact.exists():  # a CPU's frozen build keeps none
        t0 = time.perf_counter()
        torch.compiler.load_cache_artifacts(artifact.read_bytes())
        row["load_artifacts_s"] = round(time.perf_counter() - t0, 3)
    profiler = cProfile.Profile() if kind in ("profile", "modules") else None
    t0 = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    if kind == "tuned":
        # a tensor's repr prints at most two values a dimension while dynamo builds guards
        torch.set_printoptions(threshold=4, edgeitems=1)
    compiled = BACKEND.compile(model, x, spec)
    torch.set_printoptions(profile="default")
    if profiler is not None:
        profiler.disable()
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    imported = sorted(set(sys.modules) - before)
    row["imported_during_compile"] = len(imported)
    if kind == "modules":
        (artifact.parent / "modules.json").write_text(json.dumps(imported))
        row["bytecode"] = _bytecode_state()
    if kind == "build":
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            artifact.write_bytes(saved[0])
            row["saved_bytes"] = len(saved[0])
    row["stages_s"] = {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}
    row["stage_calls"] = dict(counts)
    row["compile_times"] = torch._dynamo.utils.compile_times(repr="str")[-2500:]
    row["fingerprint"] = build.fingerprint(compiled.build_choices)
    row["counters"] = {k: dict(v) for k, v in torch._dynamo.utils.counters.items()
                       if k in ("inductor", "aot_autograd")}
    if profiler is not None:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(60)
        stats.sort_stats("tottime").print_stats(30)
        stats.print_callers(r"__repr__|time.sleep|library.py:\d+\(define\)|id_match")
        row["profile"] = text.getvalue()[-14000:]
    return row


def main() -> int:
    return fresh_phases.main("experiments.frozen_load_probe", phase, CELLS, PHASES)


if __name__ == "__main__":
    sys.exit(main())
