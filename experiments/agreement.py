"""Does a cell's CI predict what a second run says? Ten cell pairs, two runs, orders swapped.

`--via submit` (default): a scratch PostgreSQL database, `speedwatch serve` (Celery executor
on a private queue) and one real `speedwatch worker` on Redis; two `speedwatch submit --wait`
of the same ten-cell matrix, the second with every axis list reversed so each cell runs at
another position. `--via bench`: `speedwatch bench` twice, the second with lists reversed.
Default timing only (adaptive over processes); `--threads 1` as the demo uses.

Per cell pair it reports: the two speedups with their CIs, whether the CIs overlap, whether
each value lies inside the other's interval, and the processes and timing seconds each took.
Per run: the eager medians of the constant and tensor cells of one batch size (the same
eager model, measured at different positions in the run: the first-cell bias check).

    .venv/bin/python experiments/agreement.py --via submit --out /tmp/agree-submit
    .venv/bin/python experiments/agreement.py --via bench --out /tmp/agree-bench
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from devkit.api_server import start_server
from devkit.databases import create_database, drop_database

ROOT = Path(__file__).resolve().parent.parent
ADMIN_URL = os.environ.get("SPEEDWATCH_TEST_ADMIN_URL", "postgresql://127.0.0.1:5432/test")


def matrix_args(reverse: bool, args: argparse.Namespace, *, bench: bool = False) -> list[str]:
    def order(values: str) -> str:
        items = values.split(",")
        return ",".join(reversed(items) if reverse else items)

    return ["--model", args.model, "--backend", args.backend,
            "--weights", order("constant,tensor"), "--batch", order(args.batch),
            "--image-size", str(args.image_size),
            *(["--option", "threads=1"] if bench else ["--threads", "1"]),
            *(["--sides", args.sides] if args.sides else [])]


def speedwatch(*argv: str, env: dict[str, str], log: Path) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli", *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=7200)
    shown = ["***" if a.startswith("sw_") else a for a in argv]
    with log.open("a") as f:
        f.write(f"\n$ speedwatch {' '.join(shown)}\n(exit {proc.returncode}, "
                f"{time.monotonic() - started:.0f} s)\n{proc.stdout}{proc.stderr}\n")
    return proc


def cells_from_run(run: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for position, cell in enumerate(run["cells"]):
        r = cell.get("result") or {}
        ev = r.get("evidence") or {}
        out.append({"key": cell["series_key"], "position": position,
                    "weights": cell["spec"]["weights"], "batch": cell["spec"]["batch_size"],
                    "speedup": r.get("speedup"), "low": r.get("ci_low"), "high": r.get("ci_high"),
                    "eager_ms": r.get("baseline_median_ms"),
                    "processes": (ev.get("adaptive") or {}).get("processes"),
                    "timing_s": (ev.get("adaptive") or {}).get("timing_seconds"),
                    "verdict": (cell.get("judgement") or {}).get("verdict")})
    return out


def cells_from_bench(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for position, d in enumerate(docs):
        sp, ev = d.get("speedup") or {}, d.get("evidence") or {}
        out.append({"key": d["series_key"], "position": position,
                    "weights": d["spec"]["weights"], "batch": d["spec"]["batch_size"],
                    "speedup": sp.get("value"), "low": sp.get("ci_low"),
                    "high": sp.get("ci_high"),
                    "eager_ms": (d.get("baseline") or {}).get("median_ms"),
                    "processes": (ev.get("adaptive") or {}).get("processes"),
                    "timing_s": (ev.get("adaptive") or {}).get("timing_seconds"),
                    "verdict": None})
    return out


def via_submit(args: argparse.Namespace, log: Path) -> list[list[dict[str, Any]]]:
    name, dsn = create_database(ADMIN_URL, "speedwatch_agree")
    queue = f"agree-{secrets.token_hex(3)}"
    env = {**os.environ, "SPEEDWATCH_DATABASE_URL": dsn.replace("postgresql://",
                                                                 "postgresql+psycopg://"),
           "SPEEDWATCH_EXECUTOR": "celery", "SPEEDWATCH_CPU_QUEUE": queue,
           "SPEEDWATCH_GPU_QUEUES": json.dumps({"cuda": queue}),
           "SPEEDWATCH_ENVIRONMENT": "development", "SPEEDWATCH_PUBLIC_READS": "true"}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        speedwatch("migrate", env=env, log=log)
        token = speedwatch("token", "create", "--scope", "ci", env=env,
                           log=log).stdout.strip().splitlines()[-1]
        read = speedwatch("token", "create", "--scope", "read", env=env,
                          log=log).stdout.strip().splitlines()[-1]
        os.environ.update({k: v for k, v in env.items() if k.startswith("SPEEDWATCH_")})
        server, base = start_server(env["SPEEDWATCH_DATABASE_URL"], 1, queue,
                                    log.with_name("serve.log"))
        procs.append(server)
        worker_log = log.with_name("worker.log").open("w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "--queues", queue, "--concurrency", "1"],
            env=env, cwd=ROOT, stdout=worker_log, stderr=subprocess.STDOUT))
        runs = []
        for i, reverse in enumerate((False, True)):
            proc = speedwatch("submit", "--url", base, "--token", token, "--project", "agree",
                              "--revision", f"run{i + 1}", *matrix_args(reverse, args),
                              "--wait", "--timeout", "7200", "--poll", "5", env=env, log=log)
            run_id = int(proc.stderr.split("run ", 1)[1].split(" ", 1)[0])
            answer = httpx.get(f"{base}/api/v1/runs/{run_id}", timeout=30,
                               headers={"Authorization": f"Bearer {read}"})
            answer.raise_for_status()
            runs.append(answer.json())
        (log.parent / "runs.json").write_text(json.dumps(runs, indent=1))
        return [cells_from_run(r) for r in runs]
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=60)
        drop_database(ADMIN_URL, name)


def via_bench(args: argparse.Namespace, log: Path) -> list[list[dict[str, Any]]]:
    runs = []
    for i, reverse in enumerate((False, True)):
        out = log.parent / f"bench{i + 1}.json"
        speedwatch("bench", *matrix_args(reverse, args, bench=True), "--json", str(out),
                   env=dict(os.environ), log=log)
        runs.append(cells_from_bench(json.loads(out.read_text())))
    return runs


def report(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    first = {c["key"]: c for c in runs[0]}
    pairs, overlap, inside = [], 0, 0
    for c2 in runs[1]:
        c1 = first.get(c2["key"])
        if c1 is None or c1["speedup"] is None or c2["speedup"] is None:
            continue
        o = not (c1["high"] < c2["low"] or c2["high"] < c1["low"])
        i = c1["low"] <= c2["speedup"] <= c1["high"] and c2["low"] <= c1["speedup"] <= c2["high"]
        overlap += o
        inside += i
        pairs.append({"key": c2["key"], "run1": c1, "run2": c2, "overlap": o, "inside": i,
                      "diff_pct": (c2["speedup"] / c1["speedup"] - 1) * 100})
    bias = []
    for n, cells in enumerate(runs, start=1):
        by_batch: dict[int, dict[str, dict[str, Any]]] = {}
        for c in cells:
            by_batch.setdefault(c["batch"], {})[c["weights"]] = c
        for batch, sides in sorted(by_batch.items()):
            if {"constant", "tensor"} <= set(sides) and all(s["eager_ms"] for s in sides.values()):
                a, b = sides["constant"], sides["tensor"]
                bias.append({"run": n, "batch": batch, "constant_eager_ms": a["eager_ms"],
                             "tensor_eager_ms": b["eager_ms"],
                             "first": "constant" if a["position"] < b["position"] else "tensor",
                             "diff_pct": (a["eager_ms"] / b["eager_ms"] - 1) * 100})
    return {"pairs": pairs, "overlap": overlap, "inside": inside, "n": len(pairs),
            "eager_bias": bias}


def markdown(result: dict[str, Any], via: str) -> str:
    lines = [f"{via}: {result['n']} cell pairs; CIs overlap in {result['overlap']}; each value "
             f"inside the other's CI in {result['inside']}", "",
             "| series | run 1 (position) | run 2 (position) | diff | overlap | proc | "
             "timing s |", "|---|---|---|---|---|---|---|"]
    for p in result["pairs"]:
        a, b = p["run1"], p["run2"]
        first = f"{a['speedup']:.3f} [{a['low']:.3f}, {a['high']:.3f}] ({a['position']})"
        second = f"{b['speedup']:.3f} [{b['low']:.3f}, {b['high']:.3f}] ({b['position']})"
        seconds = f"{a['timing_s'] or 0:.0f}/{b['timing_s'] or 0:.0f}"
        lines.append(
            f"| {p['key']} | {first} | {second} | {p['diff_pct']:+.1f}% | "
            f"{'yes' if p['overlap'] else 'NO'} | {a['processes']}/{b['processes']} | "
            f"{seconds} |")
    lines += ["", "| run | batch | eager ms, constant cell | eager ms, tensor cell | first | "
              "diff |", "|---|---|---|---|---|---|"]
    for b in result["eager_bias"]:
        lines.append(f"| {b['run']} | {b['batch']} | {b['constant_eager_ms']:.2f} | "
                     f"{b['tensor_eager_ms']:.2f} | {b['first']} | {b['diff_pct']:+.1f}% |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--via", choices=("submit", "bench"), default="submit")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--batch", default="1,2,4,8,16")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--sides", choices=("paired", "split"), default=None,
                        help="how each cell times its two sides (default: the device's)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "cli.log"
    started = time.monotonic()
    runs = via_submit(args, log) if args.via == "submit" else via_bench(args, log)
    result = report(runs)
    result["wall_s"] = time.monotonic() - started
    (args.out / "agreement.json").write_text(json.dumps(result, indent=1))
    text = markdown(result, args.via) + f"\nwall time {result['wall_s']:.0f} s\n"
    (args.out / "agreement.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
