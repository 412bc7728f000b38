"""The GPU fleet through the product path, on one host with several GPUs.

Starts Redis (carried: scripts/fleet_redis), `speedwatch serve` on an SQLite file with the
Celery executor, then runs phases, each through `speedwatch worker --gpus SELECTION` (one
pinned worker per GPU, each on its share of the host's cores) and `speedwatch submit --wait`:

- one-gpu, two-gpus, four-gpus (any "<n>-gpus" up to the host's count): the same matrix
  (ResNet50, inductor, `--weights` x `--batches` x `--precisions`, CUDA graphs,
  `--processes` per cell, 0 for the product's own adaptive default) on n workers; wall time
  from submit to verdict. Each phase starts with cold caches of its own
  (SPEEDWATCH_TUNING_CACHE_DIR, which holds the host's Triton cache, and
  SPEEDWATCH_BUILD_CACHE_DIR, the built-once builds), so no phase reuses an earlier phase's
  kernels or builds. `--confine two-gpus=32` keeps a phase's workers
  to the host's first 32 cores (a two-GPU host of 32 cores, measured on a larger one).
- foreign: on the last phase's workers, four cells, and a matmul loop started by this
  script (outside every worker's process tree) on GPU 1 while they measure: the cell on
  GPU 1 must be caught, not stored, and measured again; the others stored clean.
- regression: on those workers, revision v1 and then v2 of a pipeline whose copy of the
  inductor backend never freezes weights (as Torch-TensorRT 2.7 stopped folding them): the
  drop is confirmed on `SPEEDWATCH_CONFIRM_GPUS` GPUs, and the alert (webhook body, API) and
  the run page say on how many it reproduces.

Writes OUT/summary.json and OUT/summary.md, each phase's submit JSON, stored results and
logs, and the workers page as served during the widest phase (OUT/pages/).

    bash scripts/fleet_redis && bash scripts/gpu_wheelhouse      # here, once
    bash scripts/gpu_run python3 scripts/gpu_fleet.py --out /tmp/fleet   # on the GPU host

`--cpu N` rehearses the orchestration on a machine without a GPU (N CPU workers, a tiny
ONNX Runtime matrix, the local Redis unless --broker names another): no figure of it
says anything about GPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import launch_pin  # noqa: E402
from benchmarks.result import Speedup  # noqa: E402
from benchmarks.stats import log_half_width  # noqa: E402

INDUCTOR_SWITCH = 'freezing = spec.weights == "constant"'
ORT_SWITCH = 'if spec.weights == "tensor":'


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
        except (httpx.HTTPError, OSError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"gpu_fleet: timed out waiting for {what}")


def start(argv: list[str], env: dict[str, str], log: Path,
          cores: list[int] | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 (lives with the process)

    def keep_to_cores() -> None:
        if cores:
            os.sched_setaffinity(0, cores)

    return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=keep_to_cores if cores else None)


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


def pipeline_v2(root: Path, switch: str, replacement: str, backend_file: str) -> Path:
    """An interpreter whose `benchmarks` is a copy with one line of a backend changed."""
    copy = root / "pipeline-v2"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(REPO / "benchmarks", copy / "benchmarks",
                    ignore=shutil.ignore_patterns("results", "__pycache__"))
    backend = copy / "benchmarks" / "backends" / backend_file
    source = backend.read_text()
    if source.count(switch) != 1:
        raise SystemExit(f"gpu_fleet: {backend_file} changed; the v2 switch is not there once")
    backend.write_text(source.replace(switch, replacement))
    wrapper = root / "python-v2"
    wrapper.write_text(f'#!/bin/sh\nexport PYTHONSAFEPATH=1 PYTHONPATH="{copy}:$PYTHONPATH"\n'
                       f'exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


class Receiver:
    """A webhook receiver on a free port: the alert's body as Speedwatch posts it."""

    def __init__(self) -> None:
        bodies: list[Any] = []
        self.bodies = bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    bodies.append(json.loads(self.rfile.read(length) or b"null"))
                except ValueError:
                    bodies.append(None)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Fleet:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        (self.out / "data").mkdir(parents=True, exist_ok=True)
        (self.out / "pages").mkdir(exist_ok=True)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.summary: dict[str, Any] = {"phases": {}, "host": {}}
        self.receiver = Receiver()
        self.api_port = free_port()
        self.base = f"http://127.0.0.1:{self.api_port}"
        self.allowed = sorted(os.sched_getaffinity(0))
        self.gpu_count = 0 if args.cpu else _gpu_count()
        self.env = dict(os.environ)

    # ---- set-up --------------------------------------------------------------------------
    def up(self) -> None:
        args, out = self.args, self.out
        if args.cpu:
            broker = args.broker or "redis://127.0.0.1:6379/15"
        else:
            redis_port = free_port()
            fleet = REPO / ".fleet"
            redis = start([str(fleet / "redis-server"), "--port", str(redis_port), "--save", "",
                           "--appendonly", "no", "--bind", "127.0.0.1"],
                          {**os.environ, "LD_LIBRARY_PATH": str(fleet / "lib")},
                          out / "redis.log")
            self.procs.append(redis)
            wait(lambda: _redis_ping(redis_port, redis, out), 15, "redis-server")
            broker = f"redis://127.0.0.1:{redis_port}/0"
        if args.cpu:
            v2 = pipeline_v2(out / "data", ORT_SWITCH,
                             "if True:  # v2 pipeline: weights always graph inputs",
                             "onnxruntime.py")
        else:
            v2 = pipeline_v2(out / "data", INDUCTOR_SWITCH,
                             "freezing = False  # v2 pipeline: weights never folded",
                             "inductor.py")
        self.env.update({
            "SPEEDWATCH_DATABASE_URL": f"sqlite:///{out}/data/speedwatch.db",
            "SPEEDWATCH_EXECUTOR": "celery", "SPEEDWATCH_BROKER_URL": broker,
            "SPEEDWATCH_PUBLIC_READS": "true", "SPEEDWATCH_WORKER_HEARTBEAT_SECONDS": "2",
            "SPEEDWATCH_VENV_CACHE_DIR": str(out / "data" / "venvs"),
            "SPEEDWATCH_INTERPRETERS": json.dumps({"pipeline-v1": sys.executable,
                                                   "pipeline-v2": str(v2)}),
            "SPEEDWATCH_WEBHOOKS": json.dumps([{"url": self.receiver.url, "kind": "json"}]),
        })
        if args.cpu:  # a private queue set on the shared Redis
            self.env["SPEEDWATCH_CPU_QUEUE"] = f"fleet-rehearsal-{os.getpid()}"
        subprocess.run(cli("migrate"), env=self.env, check=True, capture_output=True)
        made = subprocess.run(cli("token", "create", "--scope", "ci", "--name", "fleet"),
                              env=self.env, check=True, capture_output=True, text=True)
        self.token = next(w for w in made.stdout.split() if w.startswith("sw_"))
        self.procs.append(start(cli("serve", "--port", str(self.api_port), "--no-migrate"),
                                self.env, out / "serve.log"))
        wait(lambda: httpx.get(f"{self.base}/livez", timeout=2).status_code == 200, 120,
             "serve")
        self.summary["host"] = {"cores": len(self.allowed), "gpus": self.gpu_count,
                                "topology": _topology() if not args.cpu else None}

    def down(self) -> None:
        for proc in reversed(self.workers + self.procs):
            stop(proc)
        self.receiver.server.shutdown()

    # ---- workers -------------------------------------------------------------------------
    def alive(self) -> list[dict[str, Any]]:
        workers = httpx.get(f"{self.base}/api/v1/workers", timeout=5).json()["workers"]
        return [w for w in workers if w["state"] == "alive" and w["kind"] == "celery"]

    def start_workers(self, n: int, phase: str, cores: list[int] | None) -> None:
        """n benchmark workers (one per GPU, or n CPU workers), plus the webhook worker."""
        self.stop_workers()
        caches = self.out / "data" / f"cache-{phase}"
        env = {**self.env, "SPEEDWATCH_TUNING_CACHE_DIR": str(caches / "tuning"),
               "SPEEDWATCH_BUILD_CACHE_DIR": str(caches / "builds")}
        log = self.out / f"worker-{phase}.log"
        if self.args.cpu:
            queue = self.env["SPEEDWATCH_CPU_QUEUE"]
            for i in range(n):
                self.workers.append(start(cli("worker", "--queues", queue, "--hostname",
                                              f"rehearsal{i}@{socket.gethostname()}"),
                                          env, log, cores))
        else:
            selection = "all" if n == self.gpu_count else ",".join(str(i) for i in range(n))
            self.workers.append(start(cli("worker", "--gpus", selection), env, log, cores))
        self.workers.append(start(cli("worker", "--queues", "webhooks,maintenance",
                                      "--hostname", f"hooks@{socket.gethostname()}"),
                                  self.env, self.out / f"hooks-{phase}.log"))
        wait(lambda: len(self.alive()) >= n + 1, 240, f"{n} worker(s) of phase {phase}")

    def stop_workers(self) -> None:
        for proc in self.workers:
            stop(proc)
        self.workers = []
        if self.args.cpu:
            return
        wait(lambda: not self.alive(), 120, "the workers to stop")

    # ---- submitting ----------------------------------------------------------------------
    def matrix(self, weights: str, batches: str) -> list[str]:
        if self.args.cpu:
            return ["--device", "cpu", "--model", "resnet18", "--width", "8", "--image-size",
                    "32", "--backend", "onnxruntime", "--threads", "1", "--weights", weights,
                    "--batch", batches, "--rounds", "12", "--iters-per-round", "5",
                    "--warmup", "3"]
        return ["--device", "cuda", "--model", "resnet50", "--backend", "inductor",
                "--precision", self.args.precisions, "--weights", weights, "--batch", batches]

    def submit(self, name: str, project: str, revision: str, matrix: list[str],
               extra: list[str], background: bool = False
               ) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
        argv = cli("submit", "--url", self.base, "--token", self.token, "--project", project,
                   "--revision", revision, "--branch", "main", *matrix, *extra, "--wait",
                   "--timeout", "3000", "--poll", "2", "--json", str(self.out / f"{name}.json"))
        if background:
            return subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        # written as it goes: `tail` shows a long phase's progress while it runs
        with (self.out / f"submit-{name}.log").open("w") as log:
            return subprocess.run(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                  text=True)

    def results(self, name: str) -> list[dict[str, Any]]:
        return stored_cells(self.out / "data" / "speedwatch.db", name)

    # ---- phases --------------------------------------------------------------------------
    def throughput(self, phase: str, n: int) -> None:
        cores = None
        confine = dict(item.split("=") for item in self.args.confine.split(",") if item)
        if phase in confine and int(confine[phase]) < len(self.allowed):
            cores = self.allowed[:int(confine[phase])]
        self.start_workers(n, phase, cores)
        snap = None
        if n == max(self.args.widths):
            snap = threading.Thread(target=self.snapshot_workers, args=(phase,), daemon=True)
            snap.start()
        began = time.monotonic()
        # a project per phase: no phase is judged against another (that would queue
        # confirmations inside the phase's wall time); the summary compares them instead
        done = self.submit(phase, f"fleet-{phase}", phase,
                           self.matrix(self.args.weights, self.args.batches),
                           [*(["--processes", str(self.args.processes),
                               "--max-processes", str(self.args.processes)]
                              if self.args.processes else []),
                            *(["--compile-cache", self.args.compile_cache]
                              if self.args.compile_cache else [])])
        wall = time.monotonic() - began
        if snap is not None:
            snap.join(timeout=5)
        cells = self.results(phase)
        assert isinstance(done, subprocess.CompletedProcess)
        self.summary["phases"][phase] = {
            "workers": n, "wall_s": round(wall, 1), "exit": done.returncode,
            "cores": f"{cores[0]}-{cores[-1]}" if cores else f"all {len(self.allowed)}",
            "cells": cells}
        print(f"{phase}: exit {done.returncode}, {wall:.0f} s, {len(cells)} cells", flush=True)
        self.write()

    def snapshot_workers(self, phase: str) -> None:
        """The workers page while every worker measures (for the screenshot)."""
        def busy() -> bool:
            alive = [w for w in self.alive() if w["gpus"] or self.args.cpu]
            gpus = [g for w in alive for g in w["gpus"]]
            return bool(gpus) and all((g.get("processes") or 0) > 0 for g in gpus) \
                if not self.args.cpu else len(alive) > 0

        with contextlib.suppress(SystemExit):
            wait(busy, 300, "every GPU busy")
        page = httpx.get(f"{self.base}/workers", timeout=10)
        (self.out / "pages" / f"workers-{phase}.html").write_text(page.text)
        (self.out / "pages" / f"workers-{phase}.json").write_text(
            json.dumps(httpx.get(f"{self.base}/api/v1/workers", timeout=10).json(), indent=1))
        css = httpx.get(f"{self.base}/static/dashboard.css", timeout=10)
        (self.out / "pages" / "dashboard.css").write_text(css.text)

    def foreign(self) -> None:
        """Four cells on the running workers; a matmul loop on GPU 1 while they measure."""
        began = time.monotonic()
        proc = self.submit("foreign", "fleet-foreign", "foreign",
                           self.matrix("constant,tensor", "8,16"),
                           ["--processes", "1", "--max-processes", "1"], background=True)
        assert isinstance(proc, subprocess.Popen)
        load: dict[str, Any] = {}
        if not self.args.cpu:
            def gpu1_busy() -> bool:
                return any(g.get("index") == 1 and (g.get("processes") or 0) > 0
                           for w in self.alive() for g in w["gpus"])

            wait(gpu1_busy, 240, "a cell on GPU 1")
            time.sleep(self.args.foreign_after)
            code = ("import time, torch\n"
                    "a = torch.randn(8192, 8192, device='cuda', dtype=torch.float16)\n"
                    f"end = time.time() + {self.args.foreign_seconds}\n"
                    "while time.time() < end:\n    a @ a\n    torch.cuda.synchronize()\n")
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
            loader = start([sys.executable, "-c", code], env, self.out / "foreign-load.log")
            load = {"pid": loader.pid, "gpu": 1, "started_s": round(time.monotonic() - began, 1),
                    "seconds": self.args.foreign_seconds}
            loader.wait()
        stdout, _ = proc.communicate()
        (self.out / "submit-foreign.log").write_text(stdout)
        self.summary["phases"]["foreign"] = {
            "exit": proc.returncode, "wall_s": round(time.monotonic() - began, 1),
            "load": load, "cells": self.results("foreign")}
        print(f"foreign: exit {proc.returncode}", flush=True)
        self.write()

    def regression(self) -> None:
        """v1, then v2 whose pipeline stopped folding weights: confirmed on several GPUs."""
        matrix = self.matrix("constant", "1" if self.args.cpu else "32")
        extra = ["--processes", "1", "--max-processes", "2"]
        v1 = self.submit("regression-v1", "fleet-regression", "v1", matrix,
                         [*extra, "--interpreter", "pipeline-v1"])
        v2 = self.submit("regression-v2", "fleet-regression", "v2", matrix,
                         [*extra, "--interpreter", "pipeline-v2"])
        assert isinstance(v1, subprocess.CompletedProcess)
        assert isinstance(v2, subprocess.CompletedProcess)
        regressions = httpx.get(f"{self.base}/api/v1/regressions",
                                params={"project": "fleet-regression"}, timeout=10).json()
        runs = httpx.get(f"{self.base}/api/v1/runs", params={"project": "fleet-regression"},
                         timeout=10).json()
        confirm_cells = []
        for run in runs.get("items", []):
            if run.get("kind") == "confirm":
                full = httpx.get(f"{self.base}/api/v1/runs/{run['id']}", timeout=10).json()
                for cell in full.get("cells", []):
                    result = cell.get("result") or {}
                    confirm_cells.append({"run": run["id"], "revision": run.get("revision"),
                                          "status": cell.get("status"),
                                          "queue": cell.get("queue"),
                                          "speedup": result.get("speedup"),
                                          "gpu_index": (result.get("fingerprint") or {})
                                          .get("gpu_index")})
        v2_run = json.loads((self.out / "regression-v2.json").read_text()) \
            if (self.out / "regression-v2.json").exists() else {}
        if v2_run.get("id"):
            page = httpx.get(f"{self.base}/runs/{v2_run['id']}", timeout=10)
            (self.out / "pages" / "run-v2.html").write_text(page.text)
        items = regressions.get("items", [])
        if items:
            page = httpx.get(f"{self.base}/regressions/{items[0]['id']}", timeout=10)
            (self.out / "pages" / "regression.html").write_text(page.text)
        with contextlib.suppress(SystemExit):
            wait(lambda: self.receiver.bodies, 60, "the webhook")
        self.summary["phases"]["regression"] = {
            "exit": [v1.returncode, v2.returncode], "regressions": items,
            "v2_reasons": v2_run.get("reasons"), "confirm_cells": confirm_cells,
            "webhooks": self.receiver.bodies}
        print(f"regression: exits {v1.returncode}, {v2.returncode}; "
              f"{len(items)} regression(s)", flush=True)
        self.write()

    # ---- report --------------------------------------------------------------------------
    def write(self) -> None:
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1) + "\n")
        (self.out / "summary.md").write_text(report(self.summary) + "\n")


def stored_cells(db_path: Path, revision: str) -> list[dict[str, Any]]:
    """A phase's cells as the store holds them (the triggered run of that revision): each
    cell's result with the GPU and host that measured it and what the guard saw."""
    import sqlite3

    if not db_path.exists():
        return []
    db = sqlite3.connect(db_path)
    try:
        rows = db.execute(
            "SELECT c.series_key, c.status, c.error, c.attempts, r.speedup, r.ci_low, "
            "r.ci_high, r.fingerprint, r.evidence, r.started_at, r.finished_at, "
            "r.duration_seconds, r.compile_seconds FROM cells c JOIN runs ON runs.id = c.run_id "
            "LEFT JOIN results r ON r.cell_id = c.id "
            "WHERE runs.revision = ? AND runs.kind = 'triggered' ORDER BY c.id",
            (revision,)).fetchall()
    finally:
        db.close()
    cells = []
    for key, status, error, attempts, speedup, low, high, fp, ev, began, ended, dur, comp in rows:
        fingerprint = json.loads(fp) if fp else {}
        evidence = json.loads(ev) if ev else {}
        states = evidence.get("launch_states") or {}
        aside = states.get("set_aside_processes") or []
        processes = [*(evidence.get("processes") or []), *aside]
        phased = [p["phases"] for p in processes if isinstance(p.get("phases"), dict)]
        gate = [float(ph["launch_gate"]) for ph in phased if "launch_gate" in ph]
        exits = [float(ph["exit_gate"]) for ph in phased if "exit_gate" in ph]
        pins = [p["launch_pin"] for p in processes if isinstance(p.get("launch_pin"), dict)]
        cells.append({"series_key": key, "status": status, "error": error,
                      "attempts": attempts, "speedup": speedup, "ci": [low, high],
                      "gpu_index": fingerprint.get("gpu_index"),
                      "hostname": fingerprint.get("hostname"), "started_at": began,
                      "finished_at": ended, "duration_s": dur, "compile_s": comp,
                      "exclusivity": evidence.get("exclusivity"),
                      "processes": len(processes),
                      "set_aside": len(aside),
                      "changed_while_timing": len(states.get("changed_while_timing") or []),
                      "launch_gate_waits": gate, "exit_gate_waits": exits,
                      "pinned": sum(1 for pin in pins if launch_pin.held(pin)),
                      "pins_moved": sum(1 for pin in pins if pin.get("moved")),
                      "pins_failed": sum(1 for pin in pins if pin.get("error"))})
    return cells


CAPTURE_WAITS = ("capture waiting at the launch gate", "captures waiting at the launch gate")
END_WAITS = ("end waiting for a timing", "ends waiting for a timing")


def launch_state_line(cells: list[dict[str, Any]]) -> str:
    """A phase's processes, those set aside by launch state, and the gate's waits: captures
    that waited for an ending process, and ending processes that waited for a timing."""
    def waits(key: str, what: str, whats: str) -> str:
        found = sorted(w for c in cells for w in c.get(key) or [])
        return (f"{len(found)} {what if len(found) == 1 else whats} (median "
                f"{found[len(found) // 2]:.2f} s, longest {found[-1]:.2f} s)" if found
                else f"no {what}")
    return (f"processes: {sum(c.get('processes') or 0 for c in cells)}; set aside by launch "
            f"state: {sum(c.get('set_aside') or 0 for c in cells)} (changed while timing: "
            f"{sum(c.get('changed_while_timing') or 0 for c in cells)}); "
            f"{waits('launch_gate_waits', *CAPTURE_WAITS)}; "
            f"{waits('exit_gate_waits', *END_WAITS)}"
            f"{pinned(cells)}")


def pinned(cells: list[dict[str, Any]]) -> str:
    """The processes that pinned their launch state (benchmarks.launch_pin), where any did."""
    done, moved, failed = (sum(c.get(k) or 0 for c in cells)
                           for k in ("pinned", "pins_moved", "pins_failed"))
    if not done and not failed:
        return ""
    return (f"; launch pin: {done} pinned ({moved} moved into the faster state)"
            f"{f', {failed} failed' if failed else ''}")


def _redis_ping(port: int, redis: subprocess.Popen[bytes], out: Path) -> bool:
    if redis.poll() is not None:
        raise SystemExit("gpu_fleet: redis-server exited: "
                         + (out / "redis.log").read_text()[-2000:])
    with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(16).startswith(b"+PONG")


def _gpu_count() -> int:
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([line for line in listed.stdout.splitlines() if line.startswith("GPU ")])


def _topology() -> str:
    got = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True)
    return got.stdout[-4000:]


def report(summary: dict[str, Any]) -> str:
    """The phases side by side: wall times, their ratios, each cell in every phase."""
    phases = summary["phases"]
    widths = {name: p for name, p in phases.items() if "workers" in p}
    lines = ["# GPU fleet through serve + worker --gpus + submit", "",
             f"host: {summary['host'].get('cores')} cores, {summary['host'].get('gpus')} GPUs",
             "", "| phase | workers | cores | wall s | one-worker wall / this | cells ok |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    one = next((p["wall_s"] for p in widths.values() if p["workers"] == 1), None)
    for name, p in widths.items():
        target = max(p["workers"] / 1.15, 1.8 if p["workers"] == 2 else 0.0)
        ratio = f"{one / p['wall_s']:.2f}x (target >= {target:.2f}x)" \
            if one and p["wall_s"] and p["workers"] > 1 else "-"
        ok = sum(1 for c in p["cells"] if c["speedup"])
        lines.append(f"| {name} | {p['workers']} | {p['cores']} | {p['wall_s']} | {ratio} | "
                     f"{ok}/{len(p['cells'])} |")
    lines.append("")
    lines += [f"- {name}: {launch_state_line(p['cells'])}" for name, p in widths.items()]
    base = next((p for p in widths.values() if p["workers"] == 1), None)
    if base:
        by_key = {c["series_key"]: c for c in base["cells"]}
        for name, p in widths.items():
            if p is base:
                continue
            same: list[float] = []
            other: list[float] = []
            overlap = within = compared = 0
            rows = []
            for c in sorted(p["cells"], key=lambda c: c["series_key"] or ""):
                b = by_key.get(c["series_key"], {})
                change, agree = "-", "-"
                if c["speedup"] and b.get("speedup"):
                    ratio = c["speedup"] / b["speedup"] - 1
                    (same if c["gpu_index"] == b.get("gpu_index") else other).append(abs(ratio))
                    change = f"{ratio:+.2%}"
                    overlaps = not (c["ci"][1] < b["ci"][0] or b["ci"][1] < c["ci"][0])
                    # the stricter reading: the difference's own 95% interval (the two
                    # half-widths in quadrature, log scale) holds zero
                    inside = abs(math.log(c["speedup"] / b["speedup"])) <= math.hypot(
                        log_half_width(Speedup(c["speedup"], *c["ci"])),
                        log_half_width(Speedup(b["speedup"], *b["ci"])))
                    compared += 1
                    overlap += overlaps
                    within += inside
                    agree = f"{'yes' if overlaps else 'no'} / {'yes' if inside else 'no'}"
                ex = c.get("exclusivity") or {}
                alone = (f"{'yes' if not ex.get('foreign') else 'NO'} ({ex.get('samples')})"
                         if ex else "-")
                rows.append(f"| `{c['series_key']}` | {_cell(c)} | {_cell(b)} | {change} | "
                            f"{agree} | {alone} |")
            lines += ["", f"## {name} against one worker", ""]
            lines += [f"{label}: {len(changes)} cells, |change| median "
                      f"{sorted(changes)[len(changes) // 2]:.2%}, largest {max(changes):.2%}; "
                      for label, changes in (("same GPU", same), ("other GPU", other))
                      if changes]
            lines += [f"agreement: intervals overlap for {overlap} of {compared} cells; the "
                      f"difference's interval holds zero for {within} of {compared}", ""]
            lines += ["| series | this phase [95% CI] (GPU) | one worker (GPU) | change | "
                      "overlap / difference | alone (looks) |",
                      "| --- | --- | --- | ---: | --- | --- |", *rows]
    for name, p in phases.items():
        if "broke" in p:
            lines += ["", f"**{name} broke:** {p['broke']}"]
    if "foreign" in phases:
        f = phases["foreign"]
        lines += ["", "## foreign load", "", f"load: {json.dumps(f.get('load'))}", "",
                  "| series | status | attempts | GPU | speedup | note |",
                  "| --- | --- | ---: | --- | --- | --- |"]
        for c in f.get("cells", []):
            lines.append(f"| `{c['series_key']}` | {c['status']} | {c['attempts']} | "
                         f"{c['gpu_index']} | {_cell(c)} | {c.get('error') or ''} |")
    if "regression" in phases:
        r = phases["regression"]
        lines += ["", "## regression confirmed on the fleet", "",
                  f"submit exits (v1, v2): {r.get('exit')}", ""]
        for item in r.get("regressions", []):
            lines.append(f"- regression {item.get('id')} ({item.get('status')}): "
                         + " / ".join(item.get("reasons") or []))
        for c in r.get("confirm_cells", []):
            lines.append(f"- confirm run {c['run']} ({c['revision']}): {c['status']} on GPU "
                         f"{c['gpu_index']}, queue {c['queue']}, speedup {c['speedup']}")
        for body in r.get("webhooks", []):
            reg = (body or {}).get("regression") or {}
            lines.append(f"- webhook {(body or {}).get('event')}: "
                         + " / ".join(reg.get("reasons") or []))
    return "\n".join(lines)


def _cell(c: dict[str, Any]) -> str:
    if not c or not c.get("speedup"):
        return f"- ({(c or {}).get('status')})"
    return (f"{c['speedup']:.4f} [{c['ci'][0]:.4f}, {c['ci'][1]:.4f}] "
            f"(GPU {c.get('gpu_index')})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--weights", default="constant,tensor")
    parser.add_argument("--phases", default="one-gpu,two-gpus,four-gpus,foreign,regression")
    parser.add_argument("--confine", default="",
                        help="PHASE=CORES,...: keep a phase's workers to the first CORES "
                        "cores (two-gpus=32: a two-GPU host of 32 cores on a larger one)")
    parser.add_argument("--foreign-after", type=float, default=4.0)
    parser.add_argument("--foreign-seconds", type=float, default=20.0)
    parser.add_argument("--precisions", default="fp16", help="e.g. fp16,bf16")
    parser.add_argument("--processes", type=int, default=1,
                        help="processes per cell in the throughput phases; 0: the product's "
                        "adaptive default (at least 3 on a GPU: each cell's interval then "
                        "carries the process-to-process spread that one process cannot see)")
    parser.add_argument("--compile-cache", default="", choices=["", "process", "host"],
                        help="the cells' timing.compile_cache (benchmarks.spec: 'host' "
                        "shares the worker's compile cache between a cell's processes)")
    parser.add_argument("--cpu", type=int, default=0, help="rehearse on N CPU workers")
    parser.add_argument("--broker", default="")
    parser.add_argument("--report", action="store_true",
                        help="write OUT's summary again from its summary.json and store")
    args = parser.parse_args()
    if args.report:
        summary = json.loads((args.out / "summary.json").read_text())
        for name, phase in summary["phases"].items():
            if "cells" in phase:
                phase["cells"] = stored_cells(args.out / "data" / "speedwatch.db", name)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (args.out / "summary.md").write_text(report(summary) + "\n")
        print(report(summary))
        return
    names = [p for p in args.phases.split(",") if p]
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "eight": 8}
    widths = {}
    for name in names:
        match = re.fullmatch(r"(\w+)-gpus?(?:-\d+)?", name)  # two-gpus-2: a repeat
        if match:
            widths[name] = int(words.get(match.group(1), match.group(1)))
    args.widths = list(widths.values()) or [0]
    fleet = Fleet(args)
    try:
        fleet.up()
        for name in names:
            try:  # a phase that breaks is reported; the next still runs
                if name in widths:
                    n = widths[name]
                    if not args.cpu and n > fleet.gpu_count:
                        print(f"{name}: skipped, the host has {fleet.gpu_count} GPUs",
                              flush=True)
                        continue
                    fleet.throughput(name, n if not args.cpu else min(n, args.cpu))
                elif name == "foreign":
                    fleet.foreign()
                elif name == "regression":
                    fleet.regression()
            except (Exception, SystemExit) as exc:
                fleet.summary["phases"].setdefault(name, {})["broke"] = repr(exc)
                print(f"{name}: broke: {exc!r}", flush=True)
                fleet.write()
        print(report(fleet.summary), flush=True)
    finally:
        fleet.write()
        fleet.down()


if __name__ == "__main__":
    main()
