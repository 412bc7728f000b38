"""Where a GPU process's start goes, and could an AOTInductor package replace a reload?

A loaded torch.compile build still traces, runs AOTAutograd and re-runs freezing in every
process (an H100 build of ResNet50 fp16 bs32: 20.7 s built, 15.2 s loaded from inductor's
cache artifacts), and a process spends about 9 s starting. This probe times, each phase in
a fresh process with caches of its own:

- `start`: `import torch`, the harness's imports, CUDA's first context, the model build;
- `build`: `torch.export` + `aoti_compile_and_package` (freezing for constant weights), the
  package's size, and the median call of the package against torch.compile's frozen build
  in the same process (is it the same code's speed?);
- `load`: `aoti_load_package` in a new process, its first call, its median call, with and
  without a CUDA graph around it.

    python -m experiments.aoti_probe --out /tmp/aoti --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class _Echo(dict[str, Any]):
    """A row that writes each entry to stderr as it is set: a crash keeps what came before."""

    def __setitem__(self, key: str, value: Any) -> None:
        print(json.dumps({key: value}), file=sys.stderr, flush=True)
        super().__setitem__(key, value)


def _median_ms(fn: Any, x: Any, n: int) -> float:
    import torch

    for _ in range(20):
        fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn(x)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    times.sort()
    return round(1000 * times[len(times) // 2], 4)


def _graphed(fn: Any, x: Any) -> Any:
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(x)
    return lambda _x: graph.replay()


def phase(kind: str, weights: str, batch: int, package: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    import torch
    t_torch = time.perf_counter() - t0
    t0 = time.perf_counter()
    from benchmarks.backends.inductor import BACKEND
    from benchmarks.models import build_model, example_input, model_dtype
    from benchmarks.spec import BenchSpec
    t_harness = time.perf_counter() - t0
    t0 = time.perf_counter()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    t_cuda = time.perf_counter() - t0
    spec = BenchSpec(model="resnet50", backend="inductor", weights=weights, batch_size=batch,
                     device="cuda", precision="fp16")
    dtype = model_dtype(spec.precision)
    t0 = time.perf_counter()
    model = build_model(spec).to(device="cuda", dtype=dtype).eval()
    x = example_input(spec).to(device="cuda", dtype=dtype)
    t_model = time.perf_counter() - t0
    row: dict[str, Any] = _Echo({"phase": kind, "weights": weights, "batch": batch,
                           "import_torch_s": round(t_torch, 2),
                           "import_harness_s": round(t_harness, 2),
                           "cuda_init_s": round(t_cuda, 2), "model_s": round(t_model, 2)})
    if kind == "start":
        return row
    if kind == "build":
        from torch._inductor import aoti_compile_and_package
        t0 = time.perf_counter()
        with torch.no_grad():
            exported = torch.export.export(model, (x,))
            path = aoti_compile_and_package(
                exported, package_path=str(package),
                inductor_configs={"freezing": weights == "constant"})
        row["aoti_build_s"] = round(time.perf_counter() - t0, 2)
        row["package_bytes"] = os.path.getsize(path)
        t0 = time.perf_counter()
        compiled = BACKEND.compile(model, x, spec)
        row["torch_compile_s"] = round(time.perf_counter() - t0, 2)
        with torch.no_grad():
            row["torch_compile_ms"] = _median_ms(compiled.run, x, 300)
            row["torch_compile_graphed_ms"] = _median_ms(_graphed(compiled.run, x), x, 300)
            row["eager_graphed_ms"] = _median_ms(_graphed(model, x), x, 300)
    from torch._inductor import aoti_load_package
    t0 = time.perf_counter()
    runner = aoti_load_package(str(package))
    row["aoti_load_s"] = round(time.perf_counter() - t0, 2)
    with torch.no_grad():
        t0 = time.perf_counter()
        runner(x)
        torch.cuda.synchronize()
        row["aoti_first_call_s"] = round(time.perf_counter() - t0, 2)
        row["aoti_ms"] = _median_ms(runner, x, 300)
        try:
            row["aoti_graphed_ms"] = _median_ms(_graphed(runner, x), x, 300)
        except Exception as exc:
            row["aoti_graphed_error"] = repr(exc)[:300]
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phase", default="")
    parser.add_argument("--weights", default="constant")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--cells", default="constant:32,tensor:1")
    parser.add_argument("--phases", default="start,build,load,load")
    args = parser.parse_args()
    if args.phase:
        row = phase(args.phase, args.weights, args.batch,
                    args.out / f"{args.weights}-{args.batch}.pt2")
        print(json.dumps(row, default=str))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    cells = [(w, int(b)) for w, b in (c.split(":") for c in args.cells.split(","))]
    for weights, batch in cells:
        for kind in args.phases.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor",
                           TRITON_CACHE_DIR=f"{tmp}/triton")
                t0 = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "experiments.aoti_probe", "--out", str(args.out),
                     "--phase", kind, "--weights", weights, "--batch", str(batch)],
                    env=env, capture_output=True, text=True, check=False)
                wall = time.perf_counter() - t0
            if done.returncode != 0:
                rows.append({"phase": kind, "weights": weights, "batch": batch,
                             "returncode": done.returncode, "error": done.stderr[-3000:],
                             "stdout": done.stdout[-1000:], "process_wall_s": round(wall, 2)})
            else:
                rows.append({**json.loads(done.stdout.strip().splitlines()[-1]),
                             "process_wall_s": round(wall, 2)})
            print(json.dumps(rows[-1], default=str), flush=True)
            (args.out / "probe.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
