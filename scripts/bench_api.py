"""Benchmark the API on PostgreSQL with a realistic history: ingest and series queries.

Fills a fresh database with `--results` stored results spread over `--series` series (bulk
COPY, not the API, so the fill takes seconds), starts the API with uvicorn in a subprocess,
and measures with httpx from this process:

- ingest:        POST /api/v1/results (new documents, 10 per revision as a CI job posts them)
- series points: GET /api/v1/series/{key}/points (default limit: the newest 500 of ~1000)
- series list:   GET /api/v1/series (100 series, each with its latest point)
- with --changes: GET /api/v1/series/{key}/changes (change points of the newest 500)

It prints p50/p95/p99 latency and requests per second for each, sequentially (one client)
and with `--concurrency` clients. Client and server share this machine's cores, so the
figures are an upper bound on latency for a dedicated server.

    .venv/bin/python scripts/bench_api.py [--results 100000] [--series 100] [--requests 500]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.db import session_scope, upgrade  # noqa: E402
from app.services.tokens import create_token  # noqa: E402
from benchmarks.result import Accuracy, BenchResult, LatencySummary, Speedup  # noqa: E402
from benchmarks.spec import SERIES_KEY_FIELDS, BenchSpec, parse_series_key  # noqa: E402
from devkit.databases import create_database, drop_database  # noqa: E402
from devkit.ports import free_port  # noqa: E402

MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet50-customop")
BACKENDS = ("eager", "inductor", "onnxruntime", "tensorrt", "torch_tensorrt")
DEVICE_CLASS = "nvidia-h100"
FILL_PROJECT = "bench"  # the project of the bulk-filled history (its series' project)


def series_specs(count: int) -> list[BenchSpec]:
    specs = []
    for batch in (1, 8, 32, 64):
        for weights in ("constant", "tensor"):
            for model in MODELS:
                for backend in BACKENDS:
                    specs.append(BenchSpec(model=model, backend=backend, weights=weights,
                                           batch_size=batch, device="cuda"))
    if count > len(specs):
        raise SystemExit(f"--series at most {len(specs)}")
    return specs[:count]


def document(spec: BenchSpec, rng: random.Random) -> BenchResult:
    base = rng.uniform(2.0, 20.0)
    speedup = rng.uniform(1.1, 3.0)
    cand = base / speedup
    samples_b = [[round(base * rng.uniform(0.98, 1.05), 4) for _ in range(5)] for _ in range(3)]
    samples_c = [[round(cand * rng.uniform(0.98, 1.05), 4) for _ in range(5)] for _ in range(3)]
    return BenchResult(
        series_key=spec.series_key(DEVICE_CLASS), spec=spec.to_dict(), status="ok",
        baseline_samples_ms=samples_b, candidate_samples_ms=samples_c,
        baseline=LatencySummary(15, base, base * 0.02, base * 0.98, base * 1.04, base),
        candidate=LatencySummary(15, cand, cand * 0.02, cand * 0.98, cand * 1.04, cand),
        speedup=Speedup(speedup, speedup * 0.97, speedup * 1.03),
        accuracy=Accuracy(1e-5, 1e-4, 1e-3, True),
        fingerprint={"device_class": DEVICE_CLASS, "gpu": "NVIDIA H100 80GB HBM3",
                     "packages": {"torch": "2.7.0", "tensorrt": "10.9.0"}},
    )


# ---- fill ---------------------------------------------------------------------------------

def _copy(cursor: psycopg.Cursor[Any], table: str, columns: list[str],
          rows: Iterator[tuple[Any, ...]]) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def fill(dsn: str, specs: list[BenchSpec], total: int) -> float:
    """Bulk-load `total` results round-robin over the series, as runs of one cell per series."""
    started = time.perf_counter()
    rng = random.Random(0)
    runs = (total + len(specs) - 1) // len(specs)
    now = datetime.now(timezone.utc)
    spec_json = [json.dumps(s.to_dict()) for s in specs]
    spec_hash = [hashlib.sha256(j.encode()).hexdigest() for j in spec_json]
    keys = [s.series_key(DEVICE_CLASS) for s in specs]
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO projects (id, name, created_at) VALUES (1, %s, now())",
                    (FILL_PROJECT,))
        cur.execute("INSERT INTO environments (id, content_hash, pins, interpreter, installed, "
                    "created_at) VALUES (1, 'bench', '[]', 'bench', '{}', now())")
        axes = [parse_series_key(key) for key in keys]
        _copy(cur, "series", ["id", "project_id", "key", *SERIES_KEY_FIELDS, "created_at"],
              ((i + 1, 1, keys[i], *(axes[i][f] for f in SERIES_KEY_FIELDS), now)
               for i in range(len(specs))))
        run_time = [now - timedelta(hours=runs - r) for r in range(runs)]
        _copy(cur, "runs", ["id", "project_id", "environment_id", "kind", "revision", "branch",
                            "trigger", "status", "verdict", "reasons", "idempotency_key",
                            "request_hash", "matrix", "created_at", "started_at",
                            "finished_at", "updated_at"],
              ((r + 1, 1, 1, "triggered", f"rev-{r}", "main", "ci", "done", "pass", "[]",
                f"bench-{r}", f"bench-{r}", "{}", t, t, t, t)
               for r, t in enumerate(run_time)))

        def cell_rows() -> Iterator[tuple[Any, ...]]:
            for n in range(total):
                r, s = divmod(n, len(specs))
                t = run_time[r]
                yield (n + 1, r + 1, spec_json[s], spec_hash[s], keys[s], "gpu", "done", 1,
                       t, t, t, t, t)

        _copy(cur, "cells", ["id", "run_id", "spec", "spec_hash", "series_key", "queue",
                             "status", "attempts", "created_at", "updated_at", "enqueued_at",
                             "started_at", "finished_at"], cell_rows())

        def result_rows() -> Iterator[tuple[Any, ...]]:
            for n in range(total):
                r, s = divmod(n, len(specs))
                doc = document(specs[s], rng)
                b, c, sp = doc.baseline, doc.candidate, doc.speedup
                assert b and c and sp
                yield (n + 1, n + 1, r + 1, s + 1, "ok", 1, secrets.token_hex(8),
                       json.dumps(doc.baseline_samples_ms), json.dumps(doc.candidate_samples_ms),
                       15, b.median_ms, b.iqr_ms, b.p05_ms, b.p95_ms, b.mean_ms,
                       c.median_ms, c.iqr_ms, c.p05_ms, c.p95_ms, c.mean_ms,
                       sp.value, sp.ci_low, sp.ci_high, 0.95, sp.method,
                       1e-5, 1e-4, 1e-3, True, "{}", "{}", json.dumps(doc.fingerprint),
                       json.dumps(doc.fingerprint["packages"]), run_time[r])

        _copy(cur, "results", [
            "id", "cell_id", "run_id", "series_id", "status", "schema_version", "document_hash",
            "baseline_samples_ms", "candidate_samples_ms", "samples_per_side",
            "baseline_median_ms", "baseline_iqr_ms", "baseline_p05_ms", "baseline_p95_ms",
            "baseline_mean_ms", "candidate_median_ms", "candidate_iqr_ms", "candidate_p05_ms",
            "candidate_p95_ms", "candidate_mean_ms", "speedup", "ci_low", "ci_high",
            "ci_confidence", "ci_method", "accuracy_rel_l2", "accuracy_max_abs",
            "accuracy_tolerance", "accuracy_passed", "peak_memory_bytes", "evidence",
            "fingerprint", "installed_versions", "created_at"], result_rows())
        for table in ("projects", "environments", "series", "runs", "cells", "results"):
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                        f"(SELECT max(id) FROM {table}))")
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


# ---- server and measurement ---------------------------------------------------------------

@contextmanager
def api_server(database_url: str) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "SPEEDWATCH_DATABASE_URL": database_url,
           "SPEEDWATCH_EXECUTOR": "none", "SPEEDWATCH_PUBLIC_READS": "false"}
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app.main:create_served_app", "--factory", "--host",
         "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=ROOT, env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("the API did not come up")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=10)


def measure(name: str, calls: list[Callable[[httpx.Client], httpx.Response]],
            base: str, headers: dict[str, str], concurrency: int) -> dict[str, Any]:
    """Run `calls` split over `concurrency` clients; latency per call and overall rate."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    chunks = [calls[i::concurrency] for i in range(concurrency)]

    def client_loop(chunk: list[Callable[[httpx.Client], httpx.Response]]) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            for call in chunk:
                t0 = time.perf_counter()
                response = call(client)
                elapsed = time.perf_counter() - t0
                with lock:
                    latencies.append(elapsed)
                    if response.status_code >= 300:
                        failures.append(f"{response.status_code} {response.text[:200]}")

    started = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{name}: {len(failures)} failed requests, first: {failures[0]}")
    ms = sorted(x * 1000 for x in latencies)
    q = statistics.quantiles(ms, n=100)
    return {"name": name, "concurrency": concurrency, "requests": len(ms),
            "p50_ms": round(q[49], 1), "p95_ms": round(q[94], 1), "p99_ms": round(q[98], 1),
            "req_per_s": round(len(ms) / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--changes", action="store_true",
                        help="also measure GET /api/v1/series/{key}/changes")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    name, dsn = create_database(args.admin_url, "speedwatch_bench")
    try:
        upgrade(dsn)
        specs = series_specs(args.series)
        fill_s = fill(dsn, specs, args.results)
        print(f"filled {args.results} results over {len(specs)} series in {fill_s:.1f} s")
        settings = Settings(database_url=dsn)
        with session_scope(settings) as session:
            _, token = create_token(session, "ci", "bench")
        headers = {"Authorization": f"Bearer {token}"}
        rng = random.Random(1)
        keys = [s.series_key(DEVICE_CLASS) for s in specs]

        Call = Callable[[httpx.Client], httpx.Response]

        def post(body: dict[str, Any]) -> Call:
            return lambda client: client.post("/api/v1/results", json=body)

        def get(path: str) -> Call:
            return lambda client: client.get(path)

        def ingest_calls(prefix: str, n: int) -> list[Call]:
            return [post({"project": "bench", "revision": f"{prefix}-{i // 10}",
                          "environment": {"interpreter": "bench"},
                          "result": document(specs[i % len(specs)], rng).to_dict()})
                    for i in range(n)]

        def points_calls(n: int) -> list[Call]:
            return [get(f"/api/v1/series/{rng.choice(keys)}/points") for _ in range(n)]

        def changes_calls(n: int) -> list[Call]:
            return [get(f"/api/v1/series/{rng.choice(keys)}/changes") for _ in range(n)]

        def list_calls(n: int) -> list[Call]:
            return [get("/api/v1/series?limit=100") for _ in range(n)]

        figures = []
        with api_server(dsn) as base:
            measure("warm-up", ingest_calls("warm", 20) + points_calls(20) + list_calls(5),
                    base, headers, 1)
            for concurrency in (1, args.concurrency):
                figures.append(measure("ingest POST /api/v1/results",
                                       ingest_calls(f"c{concurrency}", args.requests),
                                       base, headers, concurrency))
                figures.append(measure("series GET /api/v1/series/{key}/points",
                                       points_calls(args.requests), base, headers, concurrency))
                if args.changes:
                    figures.append(measure("changes GET /api/v1/series/{key}/changes",
                                           changes_calls(args.requests), base, headers,
                                           concurrency))
                figures.append(measure("series GET /api/v1/series?limit=100",
                                       list_calls(max(20, args.requests // 5)), base, headers,
                                       concurrency))
        print(f"\n{'endpoint':42} {'clients':>7} {'n':>5} {'p50 ms':>7} {'p95 ms':>7} "
              f"{'p99 ms':>7} {'req/s':>7}")
        for f in figures:
            print(f"{f['name']:42} {f['concurrency']:>7} {f['requests']:>5} {f['p50_ms']:>7} "
                  f"{f['p95_ms']:>7} {f['p99_ms']:>7} {f['req_per_s']:>7}")
        if args.json:
            args.json.write_text(json.dumps({"results": args.results, "series": len(specs),
                                             "figures": figures}, indent=2))
    finally:
        if not args.keep:
            drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
