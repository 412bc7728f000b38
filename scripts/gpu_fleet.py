"""The GPU fleet through the product path, on one host with several GPUs.

Starts Redis (carried: scripts/fleet_redis), `speedwatch serve` on an SQLite file with the
Celery executor, then for each phase `speedwatch worker --gpus SELECTION` (one pinned
worker per GPU) and one `speedwatch submit --wait` of the same matrix (ResNet50 fp16,
inductor, `--weights` x `--batches`, CUDA graphs, `--processes` processes per cell):

- two-gpus: `--gpus all`
- one-gpu:  `--gpus 0`

and writes OUT/summary.md and OUT/summary.json: each phase's wall time (submit to verdict),
their ratio, every cell's speedup and interval in both phases with the GPU that measured it
(fingerprint.gpu_index), and whether the intervals agree.

    bash scripts/fleet_redis && bash scripts/gpu_wheelhouse      # here, once
    bash scripts/gpu_run python3 scripts/gpu_fleet.py --out /tmp/fleet   # on the GPU host
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(predicate: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"gpu_fleet: timed out waiting for {what}")


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 (lives with the process)
    return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--weights", default="constant,tensor")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--phases", default="two-gpus,one-gpu")
    args = parser.parse_args()
    out = args.out
    (out / "data").mkdir(parents=True, exist_ok=True)
    redis_port, api_port = free_port(), free_port()
    fleet = REPO / ".fleet"
    redis = start([str(fleet / "redis-server"), "--port", str(redis_port), "--save", "",
                   "--appendonly", "no", "--bind", "127.0.0.1"],
                  {**os.environ, "LD_LIBRARY_PATH": str(fleet / "lib")}, out / "redis.log")
    env = {**os.environ, "SPEEDWATCH_DATABASE_URL": f"sqlite:///{out}/data/speedwatch.db",
           "SPEEDWATCH_EXECUTOR": "celery",
           "SPEEDWATCH_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
           "SPEEDWATCH_PUBLIC_READS": "true", "SPEEDWATCH_WORKER_HEARTBEAT_SECONDS": "2",
           "SPEEDWATCH_VENV_CACHE_DIR": str(out / "data" / "venvs")}
    base = f"http://127.0.0.1:{api_port}"
    procs: list[subprocess.Popen[bytes]] = [redis]

    def redis_up() -> bool:
        if redis.poll() is not None:
            raise SystemExit("gpu_fleet: redis-server exited: "
                             + (out / "redis.log").read_text()[-2000:])
        with socket.create_connection(("127.0.0.1", redis_port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")

    wait(redis_up, 15, "redis-server")
    summary: dict[str, Any] = {"phases": {}}
    try:
        subprocess.run(cli("migrate"), env=env, check=True, capture_output=True)
        made = subprocess.run(cli("token", "create", "--scope", "ci", "--name", "fleet"),
                              env=env, check=True, capture_output=True, text=True)
        token = next(w for w in made.stdout.split() if w.startswith("sw_"))
        procs.append(start(cli("serve", "--port", str(api_port), "--no-migrate"), env,
                           out / "serve.log"))
        wait(lambda: httpx.get(f"{base}/livez", timeout=2).status_code == 200, 120, "serve")
        for phase in args.phases.split(","):
            gpus = "all" if phase == "two-gpus" else "0"
            worker = start(cli("worker", "--gpus", gpus), env, out / f"worker-{phase}.log")
            procs.append(worker)
            expected = 2 if gpus == "all" else 1

            def alive(expected: int = expected) -> bool:
                workers = httpx.get(f"{base}/api/v1/workers", timeout=5).json()["workers"]
                return sum(w["state"] == "alive" and w["kind"] == "celery"
                           for w in workers) >= expected

            wait(alive, 180, f"{expected} worker(s) of phase {phase}")
            started = time.monotonic()
            submitted = subprocess.run(
                cli("submit", "--url", base, "--token", token, "--project", "fleet",
                    "--revision", phase, "--branch", phase, "--device", "cuda",
                    "--model", "resnet50", "--backend", "inductor", "--precision", "fp16",
                    "--weights", args.weights, "--batch", args.batches,
                    "--processes", str(args.processes),
                    "--max-processes", str(args.processes), "--wait", "--timeout", "3000",
                    "--json", str(out / f"{phase}.json")),
                env=env, capture_output=True, text=True)
            wall = time.monotonic() - started
            (out / f"submit-{phase}.log").write_text(submitted.stdout + submitted.stderr)
            summary["phases"][phase] = {"wall_s": round(wall, 1), "exit": submitted.returncode}
            print(f"{phase}: exit {submitted.returncode}, {wall:.0f} s", flush=True)
            stop(worker)
            procs.remove(worker)
            wait(lambda: not alive(1), 120, "the phase's workers to stop")
        write_summary(out, summary)
    finally:
        for proc in reversed(procs):
            stop(proc)


def cells_of(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    run = json.loads(path.read_text())
    return {c["series_key"]: c for c in run.get("cells", [])}


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    two, one = cells_of(out / "two-gpus.json"), cells_of(out / "one-gpu.json")
    phases = summary["phases"]
    if "two-gpus" in phases and "one-gpu" in phases:
        summary["wall_ratio"] = round(phases["one-gpu"]["wall_s"] / phases["two-gpus"]["wall_s"],
                                      3)
    rows = []
    for key in sorted(set(two) | set(one)):
        row: dict[str, Any] = {"series_key": key}
        for name, cells in (("two", two), ("one", one)):
            r = (cells.get(key) or {}).get("result") or {}
            fp = r.get("fingerprint") or {}
            row[name] = {"speedup": r.get("speedup"), "ci": [r.get("ci_low"), r.get("ci_high")],
                         "gpu_index": fp.get("gpu_index"), "status": (cells.get(key) or {})
                         .get("status")}
        a, b = row["two"], row["one"]
        if a["speedup"] and b["speedup"]:
            row["change"] = round(a["speedup"] / b["speedup"] - 1, 5)
            row["agree"] = not (a["ci"][1] < b["ci"][0] or b["ci"][1] < a["ci"][0])
        rows.append(row)
    summary["cells"] = rows
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = ["# GPU fleet: two pinned workers against one", "",
             f"wall time: {json.dumps(phases)}; one/two = {summary.get('wall_ratio')}", "",
             "| series | two workers: speedup [95% CI] (GPU) | one worker (GPU) | change | "
             "intervals agree |", "| --- | --- | --- | ---: | --- |"]

    def cell(side: dict[str, Any]) -> str:
        if not side["speedup"]:
            return f"- ({side['status']})"
        return (f"{side['speedup']:.4f} [{side['ci'][0]:.4f}, {side['ci'][1]:.4f}] "
                f"(GPU {side['gpu_index']})")

    for row in rows:
        change = f"{row['change']:+.2%}" if "change" in row else "-"
        lines.append(f"| `{row['series_key']}` | {cell(row['two'])} | {cell(row['one'])} | "
                     f"{change} | {row.get('agree', '-')} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
