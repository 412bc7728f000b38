"""One build per GPU cell, measured through the product path (`speedwatch demo`, `submit`).

On a fresh GPU host, defaults only (the host's build cache in OUT/builds, empty at first),
the demo's four GPU cells (`--batch 1,32`: constant and tensor weights, batch 1 and 32):

1. `first`: `speedwatch demo --device cuda --batch 1,32 --exit-when-done` on a new data
   dir: every cell builds its candidate once and its other processes load it, prepared
   while another process times.
2. `again`: the same demo again on the same data dir: the same software, every build
   loaded from the cache.
3. `fresh`: the demo on another new data dir as before builds were kept: the build cache
   off (`SPEEDWATCH_BUILD_CACHE_DIR=off`, every process compiles afresh) and one process
   at a time (`SPEEDWATCH_PREPARE_AHEAD=0`); its speedups beside run 1's, cell by cell.
4. `custom-op`: `serve` on run 1's data dir and one `submit --wait` of the constant-weights
   batch-32 cell in an environment whose pipeline inserts the project's opaque op
   (scripts/gpu_verdicts.py's named interpreter), with the cache warm: the changed
   pipeline must miss the cache and the regression must be caught at the default
   threshold.
5. `custom-op-bs1`: the project's threshold set to 0.5%, then the batch-1 cell the same
   way (its break is smaller).

Writes OUT/summary.json (with every process's build, phases and timing window),
OUT/runs.json (every run as the API returns it), OUT/cli.log. `--steps` picks steps
(default all, in order).

    bash scripts/gpu_run python3 scripts/gpu_builds.py --out /tmp/builds     # on a GPU host
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpu_verdicts import cell_rows, cli, pipeline_with_custom_op, token

from devkit.api_server import wait_until_up


def env_for(data: Path, builds: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    env.update({
        "SPEEDWATCH_DATABASE_URL": f"sqlite:///{data / 'speedwatch.db'}",
        "SPEEDWATCH_EXECUTOR": "local", "SPEEDWATCH_ENVIRONMENT": "development",
        "SPEEDWATCH_VENV_CACHE_DIR": str(data / "venvs"),
        "SPEEDWATCH_BUILD_CACHE_DIR": builds, "PYTHONUNBUFFERED": "1",
        **(extra or {}),
    })
    return env


def serve(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    server = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--port", str(port)],
                              env=env, stdout=log.open("a"), stderr=subprocess.STDOUT)
    if wait_until_up(f"http://127.0.0.1:{port}", server, timeout_s=120):
        return server
    server.kill()
    raise SystemExit("serve did not come up")


def runs_of(env: dict[str, str], port: int, out: Path) -> list[dict[str, Any]]:
    """Every run of a data dir as the API returns it (a server started for the read)."""
    server = serve(env, port, out / "serve.log")
    try:
        read = token(env, "read", out / "cli.log")
        headers = {"Authorization": f"Bearer {read}"}
        url = f"http://127.0.0.1:{port}/api/v1/runs"
        listed = httpx.get(url, headers=headers, params={"limit": 50}, timeout=30).json()
        items = listed.get("items", listed) if isinstance(listed, dict) else listed
        return [httpx.get(f"{url}/{r['id']}", headers=headers, timeout=30).json()
                for r in sorted(items, key=lambda r: r["id"])]
    finally:
        server.terminate()
        server.wait(timeout=30)


# --plumbing: the same steps on a CPU with a tiny model, to check the script, not the GPU
PLUMBING = ["--device", "cpu", "--backend", "onnxruntime", "--width", "8", "--image-size", "32",
            "--batch", "1", "--precision", "fp32"]
GPU = ["--device", "cuda"]


def process_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Each cell's processes: built or loaded, where their seconds went, when they timed."""
    rows = []
    for cell in run["cells"]:
        evidence = (cell.get("result") or {}).get("evidence") or {}
        rows.append({"series_key": cell["series_key"], "processes": [
            {"build": (p.get("build") or {}).get("source"),
             "build_seconds": (p.get("build") or {}).get("seconds"),
             "phases": p.get("phases"), "timing_window": p.get("timing_window"),
             "prepared_ahead": p.get("prepared_ahead"), "speedup": p.get("speedup")}
            for p in evidence.get("processes") or []]})
    return rows


def demo(env: dict[str, str], data: Path, port: int, log: Path,
         matrix: list[str]) -> dict[str, Any]:
    t0 = time.monotonic()
    code, _ = cli("demo", *matrix, "--exit-when-done", "--port", str(port),
                  "--data-dir", str(data), env=env, log=log)
    return {"exit": code, "wall_s": round(time.monotonic() - t0, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", default="first,again,fresh,custom-op,custom-op-bs1")
    parser.add_argument("--port", type=int, default=8795)
    parser.add_argument("--batch", default="1,32",
                        help="the demo's batch sizes (1,32: the four cells of the GPU demo)")
    parser.add_argument("--plumbing", action="store_true",
                        help="a tiny model on the CPU: checks the script, measures nothing")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "cli.log"
    builds = out / "builds"
    cached, uncached = out / "data-cached", out / "data-fresh"
    steps = args.steps.split(",")
    matrix = PLUMBING if args.plumbing else [*GPU, "--batch", args.batch]
    submit_matrix = ["--model", "resnet50", *(
        ["--backend", "onnxruntime", "--precision", "fp32", "--device", "cpu",
         "--width", "8", "--image-size", "32"] if args.plumbing else
        ["--backend", "inductor", "--precision", "fp16", "--device", "cuda"])]
    # the custom-op regression: batch 32 at the default threshold, batch 1 (a smaller
    # break) at 0.5%
    custom_op_plan = [("custom-op", "1" if args.plumbing else "32", None),
                      ("custom-op-bs1", "1", "0.005")]
    if "first" in steps:
        for path in (builds, cached):
            shutil.rmtree(path, ignore_errors=True)
        cached.mkdir(parents=True)
    summary: dict[str, Any] = {"started": time.time(), "steps": {}}

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))

    for step in steps:
        if step in ("first", "again"):
            summary["steps"][step] = demo(env_for(cached, str(builds)), cached, args.port, log,
                                         matrix)
        elif step == "fresh":
            # as before builds were kept: every process compiles, one process at a time
            shutil.rmtree(uncached, ignore_errors=True)
            uncached.mkdir(parents=True)
            summary["steps"][step] = demo(
                env_for(uncached, "off", {"SPEEDWATCH_PREPARE_AHEAD": "0"}), uncached,
                args.port, log, matrix)
        elif step.startswith("custom-op"):
            _, batch, threshold = next(p for p in custom_op_plan if p[0] == step)
            env = env_for(cached, str(builds), {"SPEEDWATCH_INTERPRETERS": json.dumps(
                {"pipeline-customop": str(pipeline_with_custom_op(cached))})})
            url = f"http://127.0.0.1:{args.port + 1}"
            server = serve(env, args.port + 1, out / "serve.log")
            try:
                ci = token(env, "ci", log)
                if threshold is not None:
                    admin = token(env, "admin", log)
                    cli("policy", "set", "--url", url, "--token", admin, "--project", "demo",
                        "--threshold", threshold, env=env, log=log)
                t0 = time.monotonic()
                code, _ = cli("submit", "--url", url,
                              "--token", ci, "--project", "demo", "--wait", "--timeout",
                              "3600", "--poll", "5", *submit_matrix, "--batch", batch,
                              "--weights", "constant", "--revision", step,
                              "--interpreter", "pipeline-customop", env=env, log=log)
                summary["steps"][step] = {"exit": code, "threshold": threshold or "default",
                                          "wall_s": round(time.monotonic() - t0, 1)}
            finally:
                server.terminate()
                server.wait(timeout=30)
        save()
        print(step, summary["steps"].get(step), flush=True)
    runs: dict[str, Any] = {}
    for name, data in (("cached", cached), ("fresh", uncached)):
        if (data / "speedwatch.db").exists():
            runs[name] = runs_of(env_for(data, "off"), args.port + 2, out)
    (out / "runs.json").write_text(json.dumps(runs, indent=1, default=str))
    summary["cells"] = {name: [{"run": r["id"], "revision": r.get("revision"),
                                "verdict": r.get("verdict"), "cells": cell_rows(r)}
                               for r in items] for name, items in runs.items()}
    summary["processes"] = {name: [{"run": r["id"], "cells": process_rows(r)} for r in items]
                            for name, items in runs.items()}
    summary["wall_s"] = round(time.time() - summary["started"], 1)
    save()
    print(json.dumps(summary["steps"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
