"""Verdicts through the product path with defaults only, on whatever device this host has.

What a CI user gets, measured: `speedwatch demo --device cuda` (run 1), then `speedwatch
serve` on the same SQLite file and two `speedwatch submit --wait` against it:

- run 2: the same matrix, same environment (ResNet50 fp16, inductor constant/tensor, batch
  1 and 32, default timing: CUDA graphs, adaptive over processes). Expect pass; its cells
  agree with run 1's within their CIs.
- run 3: constant weights in an environment whose pipeline inserts the project's opaque
  custom op into ResNet50 after stage 2 (a copy of `benchmarks` with one line changed,
  behind a named interpreter, as a worker is configured with one per toolchain): the same
  series, a fusion break of about 2% (bs1) and 4.5% (bs32) on an H100. Expect a regression,
  confirmed by an interleaved re-measure, evidence naming one more kernel per inference.

The project's threshold is set to 1% first (`speedwatch policy set`), since the bs1 break
is smaller than the default 3%.

Writes OUT/summary.json and OUT/summary.md, the runs as the API returns them, and logs.

    python3 scripts/gpu_verdicts.py --out /tmp/gpu-exp                  # on a GPU host
    python3 scripts/gpu_verdicts.py --out /tmp/cpu-exp --device cpu \\
        --backend eager --width 8 --image-size 32 --batch 1               # plumbing, here
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from devkit.api_server import wait_until_up

# tokens in what a command printed stay out of the logged output (it is kept with results)
SECRET = re.compile(r"sw_[A-Za-z0-9_-]{20,}")

REPO = Path(__file__).resolve().parent.parent
SWITCH = 'break_after_stage=2 if spec.model == "resnet50-customop" else None,'


def pipeline_with_custom_op(root: Path) -> Path:
    """A named interpreter whose `benchmarks` inserts the opaque op into every ResNet."""
    copy = root / "pipeline-customop"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(REPO / "benchmarks", copy / "benchmarks",
                    ignore=shutil.ignore_patterns("results", "__pycache__"))
    models = copy / "benchmarks" / "models.py"
    source = models.read_text()
    if source.count(SWITCH) != 1:
        raise SystemExit("benchmarks/models.py changed: update SWITCH in this script")
    models.write_text(source.replace(
        SWITCH, "break_after_stage=2,  # this pipeline: the opaque op, as a plugin makes"))
    wrapper = root / "python-customop"
    wrapper.write_text(f'#!/bin/sh\nexport PYTHONSAFEPATH=1 PYTHONPATH="{copy}:$PYTHONPATH"\n'
                       f'exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def cli(*args: str, env: dict[str, str], log: Path, timeout: float = 3600) -> tuple[int, str]:
    """Run `speedwatch ARGS`; returns the exit code and its stdout (both streams are logged,
    with secrets left out of the logged command line). It runs in the output folder, outside
    any git checkout, so `submit` files its runs under no branch, as the demo does: the
    same series history, the demo's result its baseline."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli", *args], env=env, cwd=log.parent,
                          capture_output=True, text=True, timeout=timeout, check=False)
    shown = ["***" if a.startswith("sw_") else a for a in args]
    with log.open("a") as f:
        f.write(f"\n$ speedwatch {' '.join(shown)}\n(exit {proc.returncode}, "
                f"{time.monotonic() - started:.0f} s)\n"
                f"{SECRET.sub('sw_***', proc.stdout + proc.stderr)}\n")
    return proc.returncode, proc.stdout


def token(env: dict[str, str], scope: str, log: Path) -> str:
    code, text = cli("token", "create", "--scope", scope, "--name", f"gpu-{scope}", env=env,
                     log=log)
    if code != 0:
        raise SystemExit(f"token create failed: {text[-300:]}")
    return text.strip().splitlines()[-1].strip()


def cell_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for cell in run["cells"]:
        r = cell.get("result") or {}
        ev = r.get("evidence") or {}
        adaptive, timing = ev.get("adaptive") or {}, ev.get("timing") or {}
        kernels = ev.get("kernels_per_inference") or {}
        speedup = r.get("speedup")
        half = ((r["ci_high"] - r["ci_low"]) / 2 / speedup * 100) if speedup else None
        rows.append({
            "series_key": cell["series_key"], "status": cell["status"],
            "error": cell.get("error"), "speedup": speedup, "ci_low": r.get("ci_low"),
            "ci_high": r.get("ci_high"), "half_width_pct": half,
            "ci_method": r.get("ci_method"), "timing_mode": timing.get("mode"),
            "fallback": ev.get("cuda_graphs_fallback"),
            "processes": adaptive.get("processes"),
            "timing_seconds": adaptive.get("timing_seconds"),
            "decision": adaptive.get("outcome"), "stopped_by": adaptive.get("stopped_by"),
            "eager_ms": r.get("baseline_median_ms"), "candidate_ms": r.get("candidate_median_ms"),
            "kernels": kernels,
            "verdict": (cell.get("judgement") or {}).get("verdict"),
            "comparison": (cell.get("judgement") or {}).get("comparison"),
            "build_fingerprint": ev.get("build_fingerprint"),
            "build": ev.get("build"),
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--batch", default="1,32")
    parser.add_argument("--width", default=None)
    parser.add_argument("--image-size", default=None)
    parser.add_argument("--threshold", default="0.01")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--skip-demo", action="store_true",
                        help="run 1 through submit too (demo needs a free port)")
    parser.add_argument("--skip-custom-op", action="store_true",
                        help="runs 1 and 2 only (precision and agreement, no regression run)")
    args = parser.parse_args()

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir()
    log = out / "cli.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update({
        "SPEEDWATCH_DATABASE_URL": f"sqlite:///{data / 'speedwatch.db'}",
        "SPEEDWATCH_EXECUTOR": "local", "SPEEDWATCH_ENVIRONMENT": "development",
        "SPEEDWATCH_VENV_CACHE_DIR": str(data / "venvs"),
        "SPEEDWATCH_INTERPRETERS": json.dumps(
            {"pipeline-customop": str(pipeline_with_custom_op(data))}),
        "PYTHONUNBUFFERED": "1",
    })
    shape = [*(["--width", args.width] if args.width else []),
             *(["--image-size", args.image_size] if args.image_size else [])]
    precision = args.precision or ("fp16" if args.device == "cuda" else "fp32")
    matrix = ["--model", "resnet50", "--backend", args.backend, "--precision", precision,
              "--batch", args.batch, "--device", args.device, *shape,
              # the demo's CPU default; on a GPU both leave threads to the library
              *(["--threads", "1"] if args.device == "cpu" else [])]
    summary: dict[str, Any] = {"device": args.device, "runs": {}, "started": time.time()}

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(summary, indent=1))

    # run 1: the demo, defaults only
    t0 = time.monotonic()
    if args.skip_demo:
        cli("migrate", env=env, log=log)
    else:
        code, _ = cli("demo", "--device", args.device, "--exit-when-done", "--port",
                         str(args.port + 1), "--data-dir", str(data), "--backend", args.backend,
                         "--precision", precision, "--batch", args.batch, *shape, env=env,
                         log=log)
        summary["runs"]["1-demo"] = {"exit": code, "wall_s": time.monotonic() - t0}
        save()
    ci, admin = token(env, "ci", log), token(env, "admin", log)
    serve_log = (out / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--port", str(args.port)], env=env,
        stdout=serve_log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{args.port}"
    try:
        wait_until_up(url, server, timeout_s=60)
        code, _ = cli("policy", "set", "--url", url, "--token", admin, "--project", "demo",
                      "--threshold", args.threshold, env=env, log=log)
        summary["threshold"] = float(args.threshold)
        submit = ["submit", "--url", url, "--token", ci, "--project", "demo", "--wait",
                  "--timeout", "7200", "--poll", "5"]
        plan = [("2-same-env", ["--revision", "same-env", "--weights", "constant,tensor"]),
                ("3-custom-op", ["--revision", "custom-op", "--weights", "constant",
                                 "--interpreter", "pipeline-customop"])]
        if args.skip_custom_op:
            plan = plan[:1]
        if args.skip_demo:
            plan.insert(0, ("1-first", ["--revision", "first", "--weights", "constant,tensor"]))
        for name, extra in plan:
            t0 = time.monotonic()
            code, _ = cli(*submit, *matrix, *extra, env=env, log=log)
            summary["runs"][name] = {"exit": code, "wall_s": time.monotonic() - t0}
            collect(url, summary, out)  # after each run: a host taken away keeps what was done
            save()
            write_markdown(summary, out / "summary.md")
    finally:
        server.terminate()
        server.wait(timeout=30)
        serve_log.close()
    summary["wall_s"] = time.time() - summary["started"]
    save()
    write_markdown(summary, out / "summary.md")
    print((out / "summary.md").read_text())
    return 0


def collect(url: str, summary: dict[str, Any], out: Path) -> None:
    """Every run and regression as the API returns them, into OUT/runs.json and the summary."""
    runs = httpx.get(f"{url}/api/v1/runs", params={"limit": 50}, timeout=30).json()["items"]
    details = {}
    for item in runs:
        detail = httpx.get(f"{url}/api/v1/runs/{item['id']}", timeout=30).json()
        details[item["id"]] = detail
        summary.setdefault("all_runs", {})[item["id"]] = {
            "kind": detail["kind"], "revision": detail["revision"],
            "verdict": detail["verdict"], "reasons": detail["reasons"],
            "cells": cell_rows(detail)}
    (out / "runs.json").write_text(json.dumps(details, indent=1))
    regressions = httpx.get(f"{url}/api/v1/regressions", timeout=30).json()["items"]
    summary["regressions"] = [{k: r[k] for k in ("series_key", "status", "magnitude",
                                                   "evidence", "reasons")}
                              for r in regressions]


def _comparison(comparison: dict[str, Any] | None) -> str:
    """The ratio to the baseline's speedup as a change in percent with its interval."""
    if not comparison or comparison.get("ratio") is None:
        return "-"
    return (f"{(comparison['ratio'] - 1) * 100:+.2f}% [{(comparison['ci_low'] - 1) * 100:+.2f}, "
            f"{(comparison['ci_high'] - 1) * 100:+.2f}]")


def write_markdown(summary: dict[str, Any], path: Path) -> None:
    lines = [f"device {summary['device']}, threshold {summary.get('threshold')}, "
             f"total {summary.get('wall_s', 0):.0f} s", ""]
    for name, run in summary["runs"].items():
        lines.append(f"- {name}: exit {run['exit']}, {run['wall_s']:.0f} s")
    lines += ["", "| run | kind | revision | series | speedup [CI] | +-% | mode | proc | "
              "timing s | decision | verdict | kernels (eager/cand) | vs baseline [CI] | "
              "build |", "|" + "---|" * 14]
    for run_id, run in sorted((summary.get("all_runs") or {}).items(), key=lambda x: int(x[0])):
        for c in run["cells"]:
            sp = (f"{c['speedup']:.4f} [{c['ci_low']:.4f}, {c['ci_high']:.4f}]"
                  if c["speedup"] else c["status"])
            k = c["kernels"] or {}
            lines.append(
                f"| {run_id} | {run['kind']} | {run['revision']} | {c['series_key']} | {sp} | "
                f"{c['half_width_pct'] or 0:.3f} | {c['timing_mode']} | {c['processes']} | "
                f"{c['timing_seconds'] or 0:.1f} | {c['decision']} | {c['verdict']} | "
                f"{k.get('baseline', '-')}/{k.get('candidate', '-')} | "
                f"{_comparison(c.get('comparison'))} | {c.get('build_fingerprint') or '-'} |")
        lines.append(f"| {run_id} | verdict **{run['verdict']}** | | " +
                     " / ".join(run["reasons"][:2]).replace("|", "/")[:400] +
                     " | | | | | | | | | | |")
    lines += ["", "Regressions:"]
    for r in summary.get("regressions") or []:
        lines.append(f"- {r['series_key']}: {r['status']}, magnitude {r['magnitude']}, "
                     f"evidence: {r['evidence']}")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
