"""Do CPU comparisons of other software decide, and decide right? Through the product path:
`speedwatch serve` (SQLite, the in-process executor) and `speedwatch submit --wait`.

One baseline run (ResNet50, ONNX Runtime against eager, constant weights, batch 1, one
thread, the CPU defaults) in the server's own environment is pinned as the project's
baseline; then each comparison is one `submit` of the same matrix in another environment,
which the worker measures in turns with the baseline's environment in the same session:

- `same-speed`: the baseline's environment plus one unrelated package, installed by pip
  from the registry (`--pin tomli-w==1.0.0`): other software, the same code on the timed path;
- `slower`: a named interpreter whose candidate calls are each stretched by `--slowdown`
  (the harness's fault knob, a busy-wait of that share of each call: a real slowdown that
  the thread's CPU time counts);
- `aa`: the same matrix in the baseline's very environment, measured in turns with itself
  behind a named interpreter that asks the candidate for a slowdown of 0 (the identity
  counts the variable, the harness does nothing with 0, eager's side is untouched): how
  often the interval of a true ratio of 1 holds 1. The product's adaptive stopping, or
  `--aa-units` fixed units;
- `aa-whole`: the same, behind a variable eager reads too (`OMP_SPEEDWATCH_AA`), so that
  the whole speedups are compared rather than the candidate sides' own times.

`--kinds` takes `kind` or `kind=N` (N comparisons of that kind in every repeat).

Optionally beside co-tenant processes that keep one core busy each (`while True: pass`).

    python scripts/cpu_comparisons.py --out DIR --kinds same-speed,slower --repeats 5 \
        --co-tenants 2

Writes OUT/summary.json, OUT/summary.md, OUT/cli.log, OUT/serve.log, OUT/load.txt and the
store OUT/data/speedwatch.db.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sqlite3
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
BUSY = "while True: pass"
UNRELATED_PIN = "tomli-w==1.0.0"


def cli(*args: str, env: dict[str, str], log: Path, timeout: float = 7200) -> tuple[int, str]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli", *args], env=env, cwd=log.parent,
                          capture_output=True, text=True, timeout=timeout, check=False)
    shown = ["***" if a.startswith("sw_") else a for a in args]
    with log.open("a") as f:
        f.write(f"\n$ speedwatch {' '.join(shown)}\n(exit {proc.returncode}, "
                f"{time.monotonic() - started:.0f} s)\n"
                f"{SECRET.sub('sw_***', proc.stdout + proc.stderr)}\n")
    return proc.returncode, proc.stdout


def wrapper(path: Path, variables: dict[str, str]) -> str:
    exports = " ".join(f"{k}={v}" for k, v in variables.items())
    path.write_text(f'#!/bin/sh\nexport {exports}\nexec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return str(path)


RUN_URL = re.compile(r"/api/v1/runs/(\d+)")


def submitted_run(url: str, token: str, printed: str) -> dict[str, Any]:
    """The run `submit` made, from the address it printed: not the newest run, which is a
    re-measure when the comparison asked for one."""
    match = RUN_URL.search(printed)
    if match is None:
        raise SystemExit(f"submit printed no run address: {printed[-300:]}")
    run: dict[str, Any] = httpx.get(f"{url}/api/v1/runs/{match.group(1)}",
                                    headers={"Authorization": f"Bearer {token}"},
                                    timeout=30).json()
    return run


def resolve_open(url: str, token: str) -> None:
    """Resolve the regressions a comparison opened, so that the next one is judged as the
    first: an open regression of the series means no new one to open, and so no re-measure
    of a suspect drop, which would make later comparisons depend on earlier ones."""
    headers = {"Authorization": f"Bearer {token}"}
    items = httpx.get(f"{url}/api/v1/regressions", params={"status": "open"},
                      headers=headers, timeout=30).json()["items"]
    for item in items:
        httpx.post(f"{url}/api/v1/regressions/{item['id']}/resolve", headers=headers,
                   timeout=30).raise_for_status()


def row(kind: str, run: dict[str, Any], code: int, wall: float) -> dict[str, Any]:
    cell = run["cells"][0]
    result = cell.get("result") or {}
    evidence = result.get("evidence") or {}
    adaptive, comparison = evidence.get("adaptive") or {}, evidence.get("comparison") or {}
    judgement = cell.get("judgement") or {}
    ratio, ci = comparison.get("ratio"), comparison.get("ratio_ci") or [None, None]
    half = (math.log(ci[1]) - math.log(ci[0])) / 2 if ci[0] and ci[1] else None
    return {
        "kind": kind, "run": run["id"], "exit": code, "verdict": run["verdict"],
        "wall_s": wall, "mode": adaptive.get("mode"), "stopped_by": adaptive.get("stopped_by"),
        "units": adaptive.get("processes"), "timing_seconds": adaptive.get("timing_seconds"),
        "speedup": result.get("speedup"), "baseline_speedup": comparison.get("baseline_speedup"),
        "ratio": ratio, "ratio_ci": ci,
        "control_variate": comparison.get("control_variate"),
        "half_width": math.expm1(half) if half is not None else None,
        "resolvable": adaptive.get("resolvable"),
        "host_load": (result.get("fingerprint") or {}).get("host_load"),
        "reasons": judgement.get("reasons") or run.get("reasons"),
    }


def write_markdown(summary: dict[str, Any], path: Path) -> None:
    lines = [f"co-tenants: {summary['co_tenants']}; slowdown {summary['slowdown']:.1%}; "
             f"baseline run {summary.get('baseline_run')}", "",
             "| kind | run | exit | verdict | mode | units each | timing s | ratio [95% CI] | "
             "+-% | eager-adjusted | host load (cores) | wall s |", "|" + "---|" * 12]
    for r in summary["comparisons"]:
        ci = r["ratio_ci"]
        ratio = (f"{(r['ratio'] - 1) * 100:+.2f}% [{(ci[0] - 1) * 100:+.2f}, "
                 f"{(ci[1] - 1) * 100:+.2f}]" if r.get("ratio") and ci[0] else "-")
        load = r.get("host_load") or {}
        cores = f"{load['other_cores']:.2f}" if "other_cores" in load else "-"
        half = f"{r['half_width']:.2%}" if r.get("half_width") is not None else "-"
        lines.append(f"| {r['kind']} | {r['run']} | {r['exit']} | {r['verdict']} | {r['mode']} "
                     f"| {r['units']} | {(r['timing_seconds'] or 0):.0f} | {ratio} | {half} | "
                     f"{r.get('control_variate')} | {cores} | {r['wall_s']:.0f} |")
    for kind in dict.fromkeys(r["kind"] for r in summary["comparisons"]):
        rows = [r for r in summary["comparisons"] if r["kind"] == kind]
        verdicts = [r["verdict"] for r in rows]
        holds = sum(1 for r in rows if r.get("ratio") and r["ratio_ci"][0] is not None
                    and r["ratio_ci"][0] <= 1 <= r["ratio_ci"][1])
        lines.append(f"\n{kind}: {len(rows)} comparisons; verdicts "
                     + ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts)))
                     + f"; interval holds 0: {holds} of {len(rows)}")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kinds", default="same-speed,slower")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--co-tenants", type=int, default=0)
    parser.add_argument("--slowdown", type=float, default=0.045)
    parser.add_argument("--aa-units", type=int, default=0,
                        help="fixed units of each environment in an A/A comparison "
                             "(0: the product's adaptive stopping)")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="the cell's timing budget in seconds (0: the CPU default)")
    parser.add_argument("--port", type=int, default=8850)
    args = parser.parse_args()
    kinds: list[str] = []
    for part in args.kinds.split(","):
        kind, _, count = part.partition("=")
        kinds += [kind] * (int(count) if count else 1)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir()
    log = out / "cli.log"
    env = dict(os.environ)
    env.pop("SPEEDWATCH_MAX_HOST_LOAD", None)  # the guard as a user gets it
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    interpreters = {
        "slower": wrapper(data / "python-slower", {
            "SPEEDWATCH_ALLOW_FAULTS": "1",
            "SPEEDWATCH_FAULT_SLOW_CANDIDATE": str(args.slowdown)}),
        # a variable the identity counts (benchmarks.identity) and no library reads
        "same-again": wrapper(data / "python-same-again", {"OMP_SPEEDWATCH_AA": "1"}),
        # the candidate's own knob at 0: the candidate side's identity alone differs
        "candidate-again": wrapper(data / "python-candidate-again", {
            "SPEEDWATCH_ALLOW_FAULTS": "1", "SPEEDWATCH_FAULT_SLOW_CANDIDATE": "0"}),
    }
    env.update({
        "SPEEDWATCH_DATABASE_URL": f"sqlite:///{data / 'speedwatch.db'}",
        "SPEEDWATCH_EXECUTOR": "local", "SPEEDWATCH_ENVIRONMENT": "development",
        "SPEEDWATCH_VENV_CACHE_DIR": str(data / "venvs"),
        "SPEEDWATCH_INTERPRETERS": json.dumps(interpreters),
        "SPEEDWATCH_ENV_ALLOWLIST": json.dumps(["onnxruntime", "onnx", "tomli-w"]),
        "PYTHONUNBUFFERED": "1",
    })
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    (out / "load.txt").write_text(f"before: {uptime}")
    cli("migrate", env=env, log=log)
    tokens = {}
    for scope in ("ci", "admin", "read"):
        code, text = cli("token", "create", "--scope", scope, "--name", f"cmp-{scope}",
                         env=env, log=log)
        if code != 0:
            raise SystemExit(f"token create failed: {text[-300:]}")
        tokens[scope] = text.strip().splitlines()[-1].strip()
    server = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--port", str(args.port)],
                              env=env, stdout=(out / "serve.log").open("w"),
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{args.port}"
    tenants = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.co_tenants)]
    summary: dict[str, Any] = {"co_tenants": args.co_tenants, "slowdown": args.slowdown,
                               "started": time.time(), "comparisons": []}
    matrix = ["--model", "resnet50", "--backend", "onnxruntime", "--weights", "constant",
              "--batch", "1", "--threads", "1", "--device", "cpu"]
    submit = ["submit", "--url", url, "--token", tokens["ci"], "--project", "compare",
              "--branch", "main", "--wait", "--timeout", "7200", "--poll", "5", *matrix]
    try:
        wait_until_up(url, timeout_s=60)
        t0 = time.monotonic()
        code, printed = cli(*submit, "--revision", "baseline", env=env, log=log)
        base = submitted_run(url, tokens["read"], printed)
        summary["baseline_run"], summary["baseline_exit"] = base["id"], code
        summary["baseline_wall_s"] = time.monotonic() - t0
        cli("policy", "set", "--url", url, "--token", tokens["admin"], "--project", "compare",
            "--baseline", "pinned", "--pinned-run", str(base["id"]), env=env, log=log)
        budget = ["--budget", f"{args.budget:g}"] if args.budget else []
        n = 0
        for _ in range(args.repeats):
            for kind in kinds:
                n += 1
                extra = {"same-speed": ["--pin", UNRELATED_PIN],
                         "slower": ["--interpreter", "slower"],
                         "aa": ["--interpreter", "candidate-again"],
                         "aa-whole": ["--interpreter", "same-again"],
                         }[kind]
                if kind.startswith("aa") and args.aa_units:
                    extra += ["--processes", str(args.aa_units),
                              "--max-processes", str(args.aa_units)]
                t0 = time.monotonic()
                code, printed = cli(*submit, "--revision", f"{kind}-{n}", *extra, *budget,
                                    env=env, log=log)
                run = submitted_run(url, tokens["read"], printed)
                summary["comparisons"].append(row(kind, run, code, time.monotonic() - t0))
                resolve_open(url, tokens["ci"])
                (out / "summary.json").write_text(json.dumps(summary, indent=1))
                write_markdown(summary, out / "summary.md")
    finally:
        for tenant in tenants:
            tenant.kill()
            tenant.wait()
        server.terminate()
        server.wait(timeout=30)
        # the store travels with the results: its write-ahead log folded into the file
        with sqlite3.connect(data / "speedwatch.db") as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
        with (out / "load.txt").open("a") as f:
            f.write(f"after: {uptime}")
    summary["wall_s"] = time.time() - summary["started"]
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    write_markdown(summary, out / "summary.md")
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
