"""Can a whole torch.compile build be saved and loaded, skipping dynamo, freezing and inductor?

The build cache (benchmarks.build_cache) hands a later process inductor's cache artifacts,
but that process still traces the model, runs AOTAutograd and, for constant weights,
freezing again (AOTAutograd's cache is bypassed for a frozen graph): 10-14 s of a loaded
constant-weight build on an H200. torch's precompile API (`OptimizedModule._aot_compile`,
`_save_aot_compiled_module`, `_load_aot_compiled_module`, behind
`torch._dynamo.config.enable_aot_compile`; experimental and private) serialises the
compiled forward itself. Each phase is a fresh process with inductor and Triton caches of
its own: `build` compiles with the product's settings (benchmarks.backends.inductor:
freezing for constant weights, pinned choices) and saves; `load` loads the saved forward.
Each prints its seconds, the build fingerprint and the median of timed calls, so it shows
whether the loaded build is the built one and what loading costs.

    python -m experiments.precompile_probe --out /tmp/probe --device cuda
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from experiments import fresh_phases

CELLS = [("constant", 32), ("tensor", 32), ("constant", 1)]


def phase(kind: str, weights: str, batch: int, device: str, artifact: Path) -> dict[str, Any]:
    import torch
    from torch._dynamo.aot_compile import ModelInput
    from torch._inductor import list_mode_options

    from benchmarks import build
    from benchmarks.backends.inductor import build_choices, pin_choices
    from benchmarks.models import build_model, example_input, model_dtype
    from benchmarks.spec import BenchSpec

    spec = BenchSpec(model="resnet50", backend="inductor", weights=weights, batch_size=batch,
                     device=device, precision="fp16" if device == "cuda" else "fp32")
    dtype = model_dtype(spec.precision)
    model = build_model(spec).to(device=device, dtype=dtype).eval()
    x = example_input(spec).to(device=device, dtype=dtype)
    torch._dynamo.config.enable_aot_compile = True
    torch._inductor.config.freezing = weights == "constant"
    pin_choices(spec, "default")
    # the precompile methods are private to OptimizedModule: typed loosely on purpose
    compiled: Any = torch.compile(model, backend="inductor", fullgraph=True,
                             options=dict(list_mode_options("default", False)))
    t0 = time.perf_counter()
    saved = None
    if kind == "build":
        compiled._aot_compile([ModelInput(args=(x,), kwargs={},
                                          contexts=[torch.inference_mode()])])
        saved = len(compiled._save_aot_compiled_module(str(artifact)))
    else:
        compiled._load_aot_compiled_module(artifact.read_bytes())
    t_build = time.perf_counter() - t0
    guard_note = None
    try:
        with torch.inference_mode():
            compiled(x)
    except RuntimeError as exc:  # guards serialised with another grad mode
        guard_note = str(exc)[:400]
        for result in compiled.forward.compiled_results:
            result.disable_guard_check()
    t0 = time.perf_counter()
    with torch.inference_mode():
        y = compiled(x)
        ref = model(x)
    t_first = time.perf_counter() - t0
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    with torch.inference_mode():
        for _ in range(30):
            compiled(x)
        sync()
        for _ in range(300 if device == "cuda" else 20):
            t = time.perf_counter()
            compiled(x)
            sync()
            times.append(time.perf_counter() - t)
    times.sort()
    return {"phase": kind, "weights": weights, "batch": batch, "torch": torch.__version__,
            "build_or_load_s": round(t_build, 2), "first_call_s": round(t_first, 3),
            "saved_bytes": saved, "guard_note": guard_note,
            "max_abs_diff_vs_eager": float((y.float() - ref.float()).abs().max()),
            "fingerprint": build.fingerprint(build_choices()),
            "median_ms": round(1000 * times[len(times) // 2], 4)}


def main() -> int:
    return fresh_phases.main("experiments.precompile_probe", phase, CELLS,
                             ("build", "load", "load"), artifact_prefix="pc-")


if __name__ == "__main__":
    sys.exit(main())
