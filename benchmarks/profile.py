"""What each side spends its time on, per inference: device kernels on a GPU, operators on
the CPU, ONNX Runtime's nodes, TensorRT's layers.

Taken in a pass of its own after the timing, never timed: a profiler slows what it watches,
so the profile explains where the time goes, and the timed figures say how much there is.
A profile is a JSON document small enough to store with its result (the `MAX_ENTRIES`
costliest rows, the rest summed as one "(other)" row):

    {"source": "torch.profiler" | "onnxruntime" | "tensorrt", "unit": "us",
     "what": "kernels" | "operators" | "nodes" | "layers", "inferences": 5,
     "total_us": 812.4,                       # per inference, every row's time
     "entries": [{"name": ..., "group": ..., "calls": 1.0, "us": 40.1}, ...]}

`calls` and `us` are per inference; `group` is what a row is an instance of (an operator
type for ONNX Runtime nodes and TensorRT layers, a kernel family for GPU kernels), which is
what a profile diff matches when a new build renames its kernels (benchmarks.profile_diff).
"""

from __future__ import annotations

import json
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MAX_ENTRIES = 60
OTHER = "(other)"
GPU_INFERENCES = 5
CPU_INFERENCES = 3
# Profiler bookkeeping, not work of the model.
_BOOKKEEPING = ("ProfilerStep", "[memory]", "cudaDeviceSynchronize", "cudaStreamSynchronize",
                "Torch-Compiled Region", "CompiledFunction")


def kernel_family(name: str) -> str:
    """What a kernel is an instance of, stable across builds that rename it: Triton's
    numbered kernels lose their number (`triton_poi_fused_add_relu_12` ->
    `triton_poi_fused_add_relu`), templated C++ kernels their template arguments, and
    library kernels their tile-size suffixes."""
    base = re.sub(r"_\d+$", "", name.strip())
    base = re.sub(r"<.*>", "<>", base)  # C++ template arguments
    base = re.sub(r"\(.*\)$", "", base)  # argument lists
    base = re.sub(r"_(tilesize|warpgroupsize|stages?|cluster)[0-9x_]*", "", base)
    return base[:200]


def document(source: str, what: str, inferences: int,
             rows: Iterable[tuple[str, str, float, float]]) -> dict[str, Any]:
    """A profile from (name, group, total calls, total us) over `inferences` inferences:
    per inference, costliest first, bounded to MAX_ENTRIES rows."""
    merged: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, group, calls, us in rows:
        cell = merged[(name[:300], group[:200])]
        cell[0] += calls
        cell[1] += us
    rows_per_inference = sorted(((n, g, c / inferences, u / inferences)
                                 for (n, g), (c, u) in merged.items()), key=lambda r: -r[3])
    total = sum(r[3] for r in rows_per_inference)
    kept, rest = rows_per_inference[:MAX_ENTRIES], rows_per_inference[MAX_ENTRIES:]
    if rest:
        kept.append((OTHER, OTHER, sum(r[2] for r in rest), sum(r[3] for r in rest)))
    entries = [{"name": n, "group": g, "calls": round(c, 3), "us": round(u, 3)}
               for n, g, c, u in kept]
    return {"source": source, "unit": "us", "what": what, "inferences": inferences,
            "total_us": round(total, 3), "entries": entries}


# device events that are not kernels: copies and fills (in a profile, as time the model
# spends; never in a count of kernels launched)
NOT_KERNELS = ("Memcpy", "Memset")


def torch_profile(fn: Callable[[], Any], *, on_cuda: bool,
                  inferences: int | None = None) -> dict[str, Any]:
    """torch.profiler over `inferences` calls of `fn` after one untimed call: the device's
    kernels on a GPU (memcpy and memset included: they are time the model spends), the
    operators' own CPU time on the CPU (self time: the rows add up to the whole)."""
    return torch_profile_and_kernels(fn, on_cuda=on_cuda, inferences=inferences)[0]


def torch_profile_and_kernels(fn: Callable[[], Any], *, on_cuda: bool,
                              inferences: int | None = None
                              ) -> tuple[dict[str, Any], float | None]:
    """`torch_profile`, and on a GPU the kernels launched per inference read from the same
    events (`NOT_KERNELS` left out, as benchmarks.after_timing.count_kernels counts them):
    a first process then runs the profiler once per side, not twice (on an H200 each pass
    cost a cell's first process 0.5-1.5 s)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    n = inferences or (GPU_INFERENCES if on_cuda else CPU_INFERENCES)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn()
        if on_cuda:
            torch.cuda.synchronize()
        with profile(activities=activities) as prof:
            for _ in range(n):
                fn()
            if on_cuda:
                torch.cuda.synchronize()
    if on_cuda:
        events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
        rows = [(e.name, kernel_family(e.name), 1.0, float(_device_us(e))) for e in events]
        kernels = sum(1 for e in events if not e.name.startswith(NOT_KERNELS)) / n
        return document("torch.profiler", "kernels", n, rows), kernels
    rows = [(a.key, a.key, float(a.count), float(a.self_cpu_time_total))
            for a in prof.key_averages()
            if a.self_cpu_time_total > 0 and not a.key.startswith(_BOOKKEEPING)]
    return document("torch.profiler", "operators", n, rows), None


def _device_us(event: Any) -> float:
    for attr in ("device_time", "cuda_time"):  # renamed in torch 2.4
        value = getattr(event, attr, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.0


def onnxruntime_profile(trace: Path, inferences: int) -> dict[str, Any]:
    """ONNX Runtime's own profile (SessionOptions.enable_profiling): each node's kernel
    time in the last `inferences` runs of the session (earlier runs warmed it up)."""
    events = json.loads(trace.read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(runs) < inferences:
        raise ValueError(f"the ONNX Runtime profile holds {len(runs)} runs, not {inferences}")
    start = runs[-inferences][0]
    rows = []
    for e in events:
        if e.get("cat") != "Node" or e.get("ts", 0) < start:
            continue
        name = str(e.get("name", ""))
        if not name.endswith("_kernel_time"):
            continue
        args = e.get("args") or {}
        rows.append((name.removesuffix("_kernel_time"), str(args.get("op_name", "?")),
                     1.0, float(e.get("dur", 0))))
    return document("onnxruntime", "nodes", inferences, rows)


def tensorrt_profile(layers: Iterable[tuple[str, str, float]], inferences: int
                     ) -> dict[str, Any]:
    """TensorRT's IProfiler rows (layer name, layer type from the engine inspector, ms
    summed over the profiled runs, one report per layer and run) as a profile."""
    return document("tensorrt", "layers", inferences,
                    ((name, kind, float(inferences), ms * 1000.0) for name, kind, ms in layers))


def timed(profile: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a profiler; its own cost goes into the document (`seconds`), never into a
    timed figure."""
    started = time.monotonic()
    doc = profile()
    doc["seconds"] = round(time.monotonic() - started, 3)
    return doc
