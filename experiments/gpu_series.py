"""A real measured series for the change-point detector: one GPU cell run again and again,
its weights turned from constants into tensors half-way (the Torch-TensorRT 2.7 story, told
with torch.compile: frozen weights are constants, unfrozen ones tensors).

Each point is one `speedwatch bench` run of ResNet50 fp16 bs1 inductor with CUDA graphs, in
processes of its own, as a worker measures a cell; its speedup over eager and its 95%
interval are the series point, as the store keeps them. Then `detect_change_points` reads
the series with and without the intervals: it must find the one step, at the first tensor
point, and nothing among the runs before or after it. The runs before the step also say how
the corpus's tight ("gpu") intervals and scatter compare with a real GPU (issue 16 asks for
intervals drawn as the product measures them).

    bash scripts/gpu_wheelhouse       # here, once
    bash scripts/gpu_run python3 experiments/gpu_series.py --out /tmp/series --points 8
    python3 experiments/gpu_series.py --out /tmp/series --points 3 --device cpu --width 8 \\
        --image-size 32 --backend onnxruntime --precision fp32    # the plumbing, on a CPU

Writes OUT/point-NN.json (bench's result documents), OUT/series.json (the `speedwatch
detect` input), OUT/summary.md, and prints the summary.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.detection.changepoints import detect_change_points  # noqa: E402
from app.detection.series_noise import noise_scale  # noqa: E402


def measure(i: int, weights: str, args: argparse.Namespace) -> dict[str, Any]:
    path = args.out / f"point-{i:02d}.json"
    command = [sys.executable, "-m", "cli", "bench", "--model", "resnet50",
               "--backend", args.backend, "--weights", weights, "--precision", args.precision,
               "--batch", "1", "--device", args.device, "--width", args.width,
               "--image-size", args.image_size, "--processes", str(args.processes),
               "--max-processes", str(args.processes), "--compile-cache", args.compile_cache,
               "--json", str(path)]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if not path.is_file():
        raise SystemExit(f"point {i}: bench wrote nothing (exit {proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(path.read_text())[0]
    result["_seconds"] = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--points", type=int, default=8, help="points on each side of the step")
    parser.add_argument("--processes", type=int, default=3, help="processes per point")
    parser.add_argument("--compile-cache", default="process")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--width", default="64")
    parser.add_argument("--image-size", default="224")
    parser.add_argument("--from-points", action="store_true",
                        help="measure nothing: summarise the OUT/point-NN.json already there "
                             "(a run the machine's hold cut short)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_points:
        device = "(read from the result documents)"
        torch_version = "-"
        measured_at = "-"
        done = sorted(args.out.glob("point-*.json"))
    else:
        import torch

        device = (torch.cuda.get_device_name(0) if torch.cuda.is_available()
                  else f"CPU ({platform.machine()})")
        torch_version = str(torch.__version__)
        measured_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    points = []
    for i in range(len(done) if args.from_points else 2 * args.points):
        weights = "constant" if i < args.points else "tensor"
        if args.from_points:
            r = json.loads(done[i].read_text())[0]
            r["_seconds"] = r.get("duration_seconds") or float("nan")
            fp = r.get("fingerprint") or {}
            device = str(fp.get("gpu") or device)
            torch_version = str((fp.get("packages") or {}).get("torch") or torch_version)
            if i == 0:
                measured_at = str(r.get("started_at") or "")[:16].replace("T", " ") + " UTC"
        else:
            r = measure(i, weights, args)
        sp = r["speedup"]
        points.append({"weights": weights, "value": sp["value"], "ci_low": sp["ci_low"],
                       "ci_high": sp["ci_high"], "seconds": r["_seconds"],
                       "processes": (r.get("evidence") or {}).get("adaptive", {}).get(
                           "processes")})
        print(f"point {i:2d} {weights:8s} {sp['value']:.4f}x [{sp['ci_low']:.4f}, "
              f"{sp['ci_high']:.4f}] ({r['_seconds']:.0f} s)", flush=True)
    values = [p["value"] for p in points]
    lo = [p["ci_low"] for p in points]
    hi = [p["ci_high"] for p in points]
    (args.out / "series.json").write_text(json.dumps({"series": [{
        "id": "resnet50/inductor/fp16/bs1/cuda", "values": values, "higher_is_better": True,
        "ci_low": lo, "ci_high": hi}]}, indent=1))
    lines = [f"Measured on {device}, torch {torch_version}, from {measured_at}; {args.processes} "
             f"processes per point, compile cache {args.compile_cache!r}.", "",
             "| point | weights | speedup | 95% CI | half-width | seconds |",
             "|---|---|---|---|---|---|"]
    for i, p in enumerate(points):
        half = (math.log(p["ci_high"]) - math.log(p["ci_low"])) / 2
        lines.append(f"| {i} | {p['weights']} | {p['value']:.4f}x | [{p['ci_low']:.4f}, "
                     f"{p['ci_high']:.4f}] | {100 * half:.3f}% | {p['seconds']:.0f} |")
    for side, sl in (("constant", slice(0, args.points)), ("tensor", slice(args.points, None))):
        x = [math.log(v) for v in values[sl]]
        if len(x) < 2:
            continue
        halves = sorted((math.log(h) - math.log(lo_)) / 2 for lo_, h in zip(lo[sl], hi[sl],
                                                                             strict=True))
        var = [(h / 1.96) ** 2 for h in ((math.log(h_) - math.log(l_)) / 2
                                         for l_, h_ in zip(lo[sl], hi[sl], strict=True))]
        mean = sum(x) / len(x)
        sd = math.sqrt(sum((v - mean) ** 2 for v in x) / (len(x) - 1))
        lines.append(f"\n{side}: {len(x)} points, scatter (sd of log speedups) {100 * sd:.3f}%, "
                     f"half-widths {100 * halves[0]:.3f}-{100 * halves[-1]:.3f}% (median "
                     f"{100 * halves[len(halves) // 2]:.3f}%), scatter beyond the intervals "
                     f"(noise_scale) {100 * noise_scale(x, var):.3f}%")
    for label, kw in (("with intervals", {"ci_low": lo, "ci_high": hi}), ("values only", {})):
        found = detect_change_points(values, **kw)  # type: ignore[arg-type]
        lines.append(f"\ndetect_change_points, {label}: " + ("; ".join(
            f"index {c.index} {c.direction} {100 * c.relative_change:+.2f}% [95% CI "
            f"{100 * (c.ci_low or 0):+.2f}%, {100 * (c.ci_high or 0):+.2f}%] "
            f"p {c.p_value or 0:.2g}"
            for c in found) or "no change point"))
        for n in range(args.points + 3, len(values) + 1):
            # online: the first prefix that reports the step
            pre = detect_change_points(values[:n], **{k: v[:n] for k, v in kw.items()})  # type: ignore[arg-type]
            if any(c.index == args.points for c in pre):
                lines.append(f"  first reported with {n - args.points} tensor points measured")
                break
    text = "\n".join(lines)
    (args.out / "summary.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
