"""What got slower, on a GPU: profiles of ResNet50 fp16 under inductor, diffed.

1. The custom-op break: `resnet50` against `resnet50-customop` (the opaque op after stage
   2), constant weights, batch 1 and 32: does the candidate's kernel diff name the op's
   kernels and the neighbours whose fusion it broke, and do its rows account for at least
   80% of the profile's change?
2. Constant against tensor weights of one commit (batch 32): which kernels the frozen graph
   fused away.
3. Profiling costs no measured time: the same cell (constant, batch 32) timed with
   profiling on and off, alternating, `--pairs` times each, one process each, sharing the
   host's compile cache (the build is not what is compared).

Each cell runs as `speedwatch bench` runs it (benchmarks.isolation, a child process per
measurement). Writes OUT/<cell>.json (the result documents), OUT/diffs.json and
OUT/summary.md.

    bash scripts/gpu_run python3 scripts/gpu_profiles.py --out /tmp/gpu-profiles
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.isolation import run_isolated  # noqa: E402
from benchmarks.profile_diff import diff  # noqa: E402
from benchmarks.result import BenchResult  # noqa: E402
from benchmarks.spec import BenchSpec  # noqa: E402
from benchmarks.timing_policy import default_timing  # noqa: E402


def spec(model: str, weights: str, batch: int, device: str, *, profile: bool = True,
         cache: str = "process", image_size: int = 224, width: int = 64) -> BenchSpec:
    timing = replace(default_timing(device), processes=1, max_processes=0,
                     compile_cache=cache, profile=profile)
    precision = "fp16" if device == "cuda" else "fp32"
    options: dict[str, Any] = {} if device == "cuda" else {"threads": 1}
    return BenchSpec(model=model, backend="inductor", weights=weights, precision=precision,
                     batch_size=batch, device=device, image_size=image_size, width=width,
                     options=options, timing=timing)


def measure(name: str, s: BenchSpec, out: Path) -> BenchResult:
    started = time.monotonic()
    result = run_isolated(s, timeout_s=1200)
    if not name.startswith("profiling-"):  # their figures go into diffs.json
        (out / f"{name}.json").write_text(result.to_json(indent=1) + "\n")
    sp = result.speedup
    print(f"{name}: {result.status} {sp.value if sp else None} "
          f"[{sp.ci_low if sp else None}, {sp.ci_high if sp else None}] "
          f"{time.monotonic() - started:.0f} s {result.reason or ''}", flush=True)
    return result


def side_diff(base: BenchResult, head: BenchResult, side: str) -> dict[str, Any]:
    b = (base.evidence.get("profile") or {}).get(side)
    h = (head.evidence.get("profile") or {}).get(side)
    if not b or not h:
        return {"error": f"no {side} profile: {base.evidence.get('profile_error')} "
                         f"{head.evidence.get('profile_error')}"}
    return diff(b, h, max_rows=15)


def table(d: dict[str, Any]) -> str:
    if "error" in d:
        return d["error"] + "\n"
    lines = [f"profile {d['base_total_us']:.1f} -> {d['head_total_us']:.1f} us per inference "
             f"({d['change_us']:+.1f} us), matched by {d['matched_by']}, the rows below "
             f"account for {d['explained']:.0%} of the change" if d["explained"] is not None
             else "no change", "",
             "| kernel | change | before us | after us | delta us | share | calls |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in d["rows"]:
        share = f"{r['share']:.0%}" if r["share"] is not None else ""
        lines.append(f"| `{r['name'][:90]}` | {r['change']} | {r['base_us']:.1f} | "
                     f"{r['head_us']:.1f} | {r['delta_us']:+.1f} | {share} | "
                     f"{r['base_calls']:g} -> {r['head_calls']:g} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev, size, width = args.device, args.image_size, args.width
    batches = [int(b) for b in args.batches.split(",")]
    diffs: dict[str, Any] = {}
    summary = ["# What got slower: inductor ResNet50 profiles", ""]

    for batch in batches:
        base = measure(f"resnet50-constant-bs{batch}",
                       spec("resnet50", "constant", batch, dev, image_size=size, width=width),
                       args.out)
        head = measure(f"customop-constant-bs{batch}",
                       spec("resnet50-customop", "constant", batch, dev, image_size=size,
                            width=width), args.out)
        d = side_diff(base, head, "candidate")
        diffs[f"customop-bs{batch}"] = d
        summary += [f"## The custom op, batch {batch} (candidate: inductor, constant)", "",
                    table(d)]
        if batch == batches[-1]:
            tensor = measure(f"resnet50-tensor-bs{batch}",
                             spec("resnet50", "tensor", batch, dev, image_size=size,
                                  width=width), args.out)
            d = side_diff(base, tensor, "candidate")
            diffs[f"constant-vs-tensor-bs{batch}"] = d
            summary += [f"## Constant against tensor weights, batch {batch}", "", table(d)]

    batch = batches[-1]
    pairs: list[dict[str, Any]] = []
    for i in range(args.pairs):
        for profile in (True, False):
            r = measure(f"profiling-{'on' if profile else 'off'}-{i + 1}",
                        spec("resnet50", "constant", batch, dev, profile=profile,
                             cache="host", image_size=size, width=width), args.out)
            sp = r.speedup
            pairs.append({"profile": profile, "speedup": sp.value if sp else None,
                          "ci": [sp.ci_low, sp.ci_high] if sp else None,
                          "candidate_median_ms": r.candidate.median_ms if r.candidate else None,
                          "profile_seconds": ((r.evidence.get("profile") or {}).get(
                              "candidate") or {}).get("seconds")})
    diffs["profiling_on_off"] = pairs
    summary += [f"## Profiling on and off (constant, batch {batch}, alternating)", "",
                "| profile | speedup | 95% CI | candidate median ms | profile pass s |",
                "| --- | ---: | --- | ---: | ---: |"]
    for p in pairs:
        ci = f"[{p['ci'][0]:.4f}, {p['ci'][1]:.4f}]" if p["ci"] else "-"
        speedup = f"{p['speedup']:.4f}" if p["speedup"] else "-"
        median = f"{p['candidate_median_ms']:.4f}" if p["candidate_median_ms"] else "-"
        summary.append(f"| {'on' if p['profile'] else 'off'} | {speedup} | {ci} | {median} | "
                       f"{p['profile_seconds'] or '-'} |")
    (args.out / "diffs.json").write_text(json.dumps(diffs, indent=1) + "\n")
    (args.out / "summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
