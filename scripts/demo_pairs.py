"""Does the verdict hold still? The README's demo run twice on unchanged code, on one data
directory, several times over, optionally beside busy co-tenant processes started here.

For each pair: `speedwatch demo --exit-when-done` twice on a fresh data directory (the second
run's baseline is the first run), then `speedwatch serve` on that directory to read both runs
through the API. Co-tenants are processes that keep one core busy each (`while True: pass`),
running for the whole campaign, as other jobs on a shared CI runner would.

    python scripts/demo_pairs.py --out results/cpu-demo-pairs-loaded --pairs 5 --co-tenants 2
    python scripts/demo_pairs.py --out results/cpu-demo-pairs-quiet --pairs 5

Writes OUT/summary.json and OUT/summary.md (per demo: exit code, verdict, wall time; per
cell: speedup, half-width, units, timing seconds, host load, the comparison with the first
run and the reasons), OUT/pair-N/cli.log, and `uptime` before and after in OUT/load.txt.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

BUSY = "while True: pass"


def speedwatch(*args: str, env: dict[str, str], log: Path, cwd: Path,
               timeout: float = 3600) -> tuple[int, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.monotonic() - started
    with log.open("a") as f:
        f.write(f"\n$ speedwatch {' '.join(args)}\n(exit {proc.returncode}, {seconds:.0f} s)\n"
                f"{proc.stdout}{proc.stderr}\n")
    return proc.returncode, seconds


def read_runs(data: Path, port: int, env: dict[str, str], log: Path) -> list[dict[str, Any]]:
    """Both runs of a pair as the API returns them (a server on the pair's SQLite file)."""
    serve_env = {**env, "SPEEDWATCH_DATABASE_URL": f"sqlite:///{data / 'speedwatch.db'}",
                 "SPEEDWATCH_EXECUTOR": "none", "SPEEDWATCH_ENVIRONMENT": "development"}
    with log.open("a") as out:
        server = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--port", str(port)],
                                  env=serve_env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        items = httpx.get(f"{url}/api/v1/runs", params={"limit": 10}, timeout=30).json()["items"]
        return [httpx.get(f"{url}/api/v1/runs/{item['id']}", timeout=30).json()
                for item in sorted(items, key=lambda i: i["id"])]
    finally:
        server.terminate()
        server.wait(timeout=30)


def cell_row(cell: dict[str, Any]) -> dict[str, Any]:
    r = cell.get("result") or {}
    ev = r.get("evidence") or {}
    adaptive = ev.get("adaptive") or {}
    judgement = cell.get("judgement") or {}
    speedup = r.get("speedup")
    half = math.expm1(max(math.log(r["ci_high"] / speedup), math.log(speedup / r["ci_low"]))) \
        if speedup else None
    return {"weights": cell["spec"]["weights"], "speedup": speedup, "ci_low": r.get("ci_low"),
            "ci_high": r.get("ci_high"), "half_width": half,
            "units": adaptive.get("processes"), "timing_seconds": adaptive.get("timing_seconds"),
            "stopped_by": adaptive.get("stopped_by"),
            "clock": (ev.get("timing") or {}).get("clock"),
            "verdict": judgement.get("verdict"), "comparison": judgement.get("comparison"),
            "host_load": (r.get("fingerprint") or {}).get("host_load"),
            "build_fingerprint": ev.get("build_fingerprint"),
            "software": ((r.get("fingerprint") or {}).get("software") or {}).get("digest"),
            "same_software": any("same software" in str(x)
                                 for x in judgement.get("reasons") or []),
            "host_drift": bool(judgement.get("host_drift")),
            "resolvable": adaptive.get("resolvable"),
            "reasons": judgement.get("reasons")}


def unit_spread(out: Path) -> str:
    """How far apart the processes (units) of each stored cell landed: the standard
    deviation of their speedups relative to their mean, read from each pair's SQLite store
    (`evidence.processes`). This bounds the half-width a cell can reach in its budget."""
    import sqlite3
    import statistics

    lines = ["| pair | result | series | units | unit speedups' SD |", "|---|---|---|---|---|"]
    spreads = []
    for db in sorted(out.glob("pair-*/data/speedwatch.db")):
        with sqlite3.connect(db) as conn:
            rows = conn.execute("select r.id, s.key, r.evidence from results r "
                                "join series s on s.id = r.series_id order by r.id").fetchall()
        for result_id, key, evidence in rows:
            speedups = [p["speedup"] for p in json.loads(evidence).get("processes") or []
                        if isinstance(p.get("speedup"), (int, float))]
            if len(speedups) >= 3:
                sd = statistics.stdev(speedups) / statistics.mean(speedups)
                spreads.append(sd)
                lines.append(f"| {db.parts[-3]} | {result_id} | {key} | {len(speedups)} | "
                             f"{sd:.2%} |")
    if spreads:
        lines.append(f"\n{len(spreads)} results: {min(spreads):.2%} to {max(spreads):.2%}, "
                     f"median {statistics.median(spreads):.2%}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--co-tenants", type=int, default=0)
    parser.add_argument("--port", type=int, default=8795)
    parser.add_argument("--unit-spread", action="store_true",
                        help="only write OUT/unit-spread.md from a finished campaign's stores")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    if args.unit_spread:
        (out / "unit-spread.md").write_text(unit_spread(out))
        print((out / "unit-spread.md").read_text())
        return 0
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("SPEEDWATCH_MAX_HOST_LOAD", None)  # the guard as a user gets it
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    (out / "load.txt").write_text(f"before: {uptime}")
    tenants = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.co_tenants)]
    summary: dict[str, Any] = {"co_tenants": args.co_tenants, "started": time.time(),
                               "pairs": []}
    try:
        for n in range(1, args.pairs + 1):
            pair_dir = out / f"pair-{n}"
            data = pair_dir / "data"
            data.mkdir(parents=True, exist_ok=True)
            log = pair_dir / "cli.log"
            demos = []
            for _ in range(2):
                code, seconds = speedwatch("demo", "--exit-when-done", "--port", str(args.port),
                                           "--data-dir", str(data), env=env, log=log,
                                           cwd=pair_dir)
                demos.append({"exit": code, "wall_s": seconds})
            runs = read_runs(data, args.port + 1, env, log)
            for demo, run in zip(demos, runs, strict=False):
                demo.update(verdict=run["verdict"], revision=run["revision"],
                            cells=[cell_row(c) for c in run["cells"]])
            summary["pairs"].append({"pair": n, "demos": demos})
            (out / "summary.json").write_text(json.dumps(summary, indent=1))
            write_markdown(summary, out / "summary.md")
    finally:
        for tenant in tenants:
            tenant.kill()
            tenant.wait()
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
        with (out / "load.txt").open("a") as f:
            f.write(f"after: {uptime}")
    summary["wall_s"] = time.time() - summary["started"]
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    write_markdown(summary, out / "summary.md")
    print((out / "summary.md").read_text())
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def write_markdown(summary: dict[str, Any], path: Path) -> None:
    lines = [f"co-tenants: {summary['co_tenants']}", "",
             "| pair | demo | exit | verdict | wall s | weights | speedup [95% CI] | +-% | "
             "units | timing s | stopped by | host load (cores) | vs run 1 [95% CI] | "
             "same software |",
             "|" + "---|" * 14]
    for pair in summary["pairs"]:
        for i, demo in enumerate(pair["demos"], 1):
            for cell in demo.get("cells") or [{}]:
                sp = (f"{cell['speedup']:.4f} [{cell['ci_low']:.4f}, {cell['ci_high']:.4f}]"
                      if cell.get("speedup") else "-")
                cmp = cell.get("comparison")
                vs = (f"{(cmp['ratio'] - 1) * 100:+.2f}% [{(cmp['ci_low'] - 1) * 100:+.2f}, "
                      f"{(cmp['ci_high'] - 1) * 100:+.2f}]" if cmp else "-")
                load = cell.get("host_load") or {}
                cores = (f"{load['other_cores']:.2f}{' (loaded)' if load.get('loaded') else ''}"
                         if "other_cores" in load else "-")
                lines.append(
                    f"| {pair['pair']} | {i} | {demo['exit']} | {demo.get('verdict')} | "
                    f"{demo['wall_s']:.0f} | {cell.get('weights', '-')} | {sp} | "
                    f"{_pct(cell.get('half_width'))} | {cell.get('units')} | "
                    f"{(cell.get('timing_seconds') or 0):.0f} | {cell.get('stopped_by')} | "
                    f"{cores} | {vs} | {'yes' if cell.get('same_software') else 'no'}"
                    f"{' (host drift)' if cell.get('host_drift') else ''} |")
    seconds = [p["demos"][1] for p in summary["pairs"] if len(p["demos"]) > 1]
    if seconds:
        named = sum(1 for d in seconds if d.get("cells") and all(
            c.get("same_software") for c in d["cells"]))
        lines.append(f"\nsecond runs: {sum(1 for d in seconds if d['exit'] == 0)} of "
                     f"{len(seconds)} exit 0; {named} of {len(seconds)} name the same software "
                     "in every cell")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
