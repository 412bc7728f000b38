"""Capacity as history grows: seed PostgreSQL with a long history, then measure one API
process (`speedwatch serve`, production-like settings) reading and taking uploads.

Users keep years of results, so what a page or an upload costs must not grow with the
number stored. This benchmark seeds a store with N results over S series and measures, on
one API process:

- uploads: real HTTP `POST /api/v1/results` (what the CI client's `Api.upload` sends),
  offered at fixed rates (open loop: a request's latency counts from when it was due, so a
  server that falls behind is not flattered by a client that waits for it), stepping the
  rate up until p95 passes the bound or a request fails; the rate held is the highest step
  with p95 <= `--p95-ms` and no error;
- reads, one client in turn: the overview page, the series page of a series with 10k
  points, a run page, `GET /api/v1/series`, and the CI verdict's read path
  (`GET /api/v1/runs/{id}`, what `submit --wait` polls and reports from, and
  `GET /api/v1/runs?project=&revision=`, how `speedwatch report` finds a revision's run).

Seeding (`seed`) goes through the product's own schema (Alembic) and rows: documents are
the real result documents of tests/benchmarks/documents (an adaptive CPU and an adaptive
H100 measurement), re-labelled per series (model, backend, weights, precision, batch,
shape, threads) with their latencies rescaled, and turned into `results` rows by the
product's `result_row`; the rows are bulk-loaded with COPY. Series come in matrices of 10
(one CI job), spread over 10 projects; each run is one revision of one matrix, on `main`,
judged "pass" against the previous result of each series. One more series (project
team-00) has 10,000 points: the series page measured. A few series have an open
regression.

`measure` starts the server from a source tree (`--tree`, default this checkout) on a
seeded database, measures, deletes what the uploads stored (so every measurement sees the
seeded history) and writes raw files and a summary to `--out`. `--migrate REV` first
upgrades or downgrades the database to REV (timed), so the code before a fix (`git
archive` of it into a folder) and after it can be measured in turns on one seeded store.

    .venv/bin/python scripts/capacity.py seed --db sw_capacity_100k --results 100000 --series 2500
    .venv/bin/python scripts/capacity.py measure --db sw_capacity_100k --label after \
        --out results/capacity-DATE/after-100k
    .venv/bin/python scripts/capacity.py table results/capacity-DATE/*/summary.json

Client and server share the machine; the summary records `uptime`'s load before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import functools
import hashlib
import json
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import JSON

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.db import session_scope  # noqa: E402
from app.models import Result  # noqa: E402
from app.services.common import canonical_hash, check_result_document, spec_hash  # noqa: E402
from app.services.runs import result_row  # noqa: E402
from app.services.tokens import create_token  # noqa: E402
from benchmarks.result import BenchResult, LatencySummary, Speedup  # noqa: E402
from benchmarks.spec import SERIES_KEY_FIELDS, BenchSpec, parse_series_key  # noqa: E402
from devkit.api_server import wait_until_up  # noqa: E402

SERVER = "postgresql://postgres@127.0.0.1:5432"
DOCUMENTS = ROOT / "tests" / "benchmarks" / "documents"
TEMPLATES = {"cuda": "cuda-adaptive-paired.json", "cpu": "cpu-adaptive-paired.json"}
PROJECTS = 10
MATRIX = 10  # series per CI job
LONG_POINTS = 10_000
LONG_PROJECT = "team-00"
VARIANTS = 4  # documents per series, used in turn (rescaled latencies, +-1% speedup)
HISTORY_DAYS = 3 * 365
START = datetime(2023, 11, 27, tzinfo=timezone.utc)
PINS = [["onnxruntime==1.20.1", "torch==2.5.1"], ["onnxruntime==1.21.0", "torch==2.6.0"],
        ["onnxruntime==1.22.0", "torch==2.7.0"], ["onnxruntime==1.22.0", "torch==2.8.0"]]
# A CI job's environment: its GPU and CPU jobs pin different builds (one environment row
# per pin set; a CPU and a GPU host report different installed versions, and mixing them
# under one environment would rewrite its `installed` on every upload)
UPLOAD_PINS = {"cuda": ["onnxruntime-gpu==1.22.0", "torch==2.8.0"],
               "cpu": ["onnxruntime==1.22.0", "torch==2.8.0"]}
UPLOAD_PREFIX = "capacity-upload-"  # revisions of uploads, deleted after each measurement


# ---- documents ------------------------------------------------------------------------------

@functools.cache
def _template(device: str) -> BenchResult:
    return BenchResult.from_json((DOCUMENTS / TEMPLATES[device]).read_text())


def series_specs(count: int) -> list[BenchSpec]:
    """`count` distinct valid specs (CPU and H100), in a fixed shuffled order."""
    out: list[BenchSpec] = []
    for width, image in ((64, 224), (32, 224), (64, 160), (16, 64), (48, 224), (64, 192),
                         (32, 160)):
        for model in ("resnet18", "resnet34", "resnet50", "resnet101"):
            for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256):
                for weights in ("constant", "tensor"):
                    for shape in ("static", "dynamic"):
                        for backend in ("inductor", "onnxruntime", "tensorrt", "torch_tensorrt"):
                            for precision in ("fp32", "fp16"):
                                out.append(BenchSpec(
                                    model=model, backend=backend, weights=weights,
                                    precision=precision, batch_size=batch, shape_mode=shape,
                                    device="cuda", width=width, image_size=image))
                        for backend, threads in (("onnxruntime", 1), ("onnxruntime", 2),
                                                 ("inductor", 1)):
                            out.append(BenchSpec(
                                model=model, backend=backend, weights=weights,
                                precision="fp32", batch_size=batch, shape_mode=shape,
                                device="cpu", width=width, image_size=image,
                                options={"threads": threads}))
    out.remove(long_spec())  # the series page's series has a history of its own
    random.Random(7).shuffle(out)
    if count > len(out):
        raise SystemExit(f"at most {len(out)} series")
    return out[:count]


def long_spec() -> BenchSpec:
    return BenchSpec(model="resnet50", backend="torch_tensorrt", weights="constant",
                     precision="fp16", batch_size=1, device="cuda")


def document(spec: BenchSpec, rng: random.Random, base_ms: float, speedup: float) -> BenchResult:
    """A real document of the spec's device, re-labelled with `spec` and rescaled so that its
    baseline median is `base_ms` and its speedup about `speedup` (raw samples, summaries,
    interval and per-process evidence alike)."""
    template = _template(spec.device)
    assert template.baseline and template.candidate and template.speedup
    cand_ms = base_ms / speedup * rng.uniform(0.99, 1.01)
    fb = base_ms / template.baseline.median_ms
    fc = cand_ms / template.candidate.median_ms
    ratio = fb / fc

    def summary(s: LatencySummary, f: float) -> LatencySummary:
        return LatencySummary(s.n, s.median_ms * f, s.iqr_ms * f, s.p05_ms * f, s.p95_ms * f,
                              s.mean_ms * f)

    evidence = json.loads(json.dumps(template.evidence))
    for p in evidence.get("processes") or []:
        for k in ("speedup", "ci_low", "ci_high"):
            p[k] *= ratio
        p["baseline_median_ms"] *= fb
        p["candidate_median_ms"] *= fc
    sp = template.speedup
    doc_spec = spec.to_dict()
    doc_spec["timing"] = template.spec["timing"]
    if spec.device == "cpu":
        doc_spec["options"] = {**spec.options, "sides": "paired"}
    else:
        doc_spec["options"] = {"sides": "paired"}
    doc = replace(
        template, spec=doc_spec,
        baseline_samples_ms=[[round(x * fb, 6) for x in r] for r in template.baseline_samples_ms],
        candidate_samples_ms=[[round(x * fc, 6) for x in r]
                              for r in template.candidate_samples_ms],
        baseline=summary(template.baseline, fb), candidate=summary(template.candidate, fc),
        speedup=Speedup(sp.value * ratio, sp.ci_low * ratio, sp.ci_high * ratio, sp.confidence,
                        sp.method),
        evidence=evidence)
    key = BenchSpec.from_dict(doc_spec).series_key(
        str(doc.fingerprint["device_class"]), doc.timing_mode())
    doc = replace(doc, series_key=key)
    check_result_document(doc)  # the store's own check: key, spec, numbers
    return doc


# ---- seeding ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """Who measures what: series, matrices of series, projects."""

    specs: list[BenchSpec]  # index = series id - 1; the last one is the long series
    keys: list[str]
    project_of: list[int]  # series index -> project id
    matrices: list[list[int]]  # series indexes per matrix; the last one is the long series'
    depth: int  # revisions per ordinary matrix


def plan(results: int, series: int) -> Plan:
    if series % MATRIX or results % series:
        raise SystemExit("--series must be a multiple of 10 and divide --results")
    specs = [*series_specs(series), long_spec()]
    keys = []
    for s in specs:
        keys.append(document(s, random.Random(0), 10.0, 2.0).series_key)
    if len(set(keys)) != len(keys):
        raise SystemExit("series keys collide")
    matrices = [list(range(i, i + MATRIX)) for i in range(0, series, MATRIX)]
    project_of = [1 + (i // MATRIX) % PROJECTS for i in range(series)] + [1]
    matrices.append([series])
    return Plan(specs, keys, project_of, matrices, results // series)


def _copy(cur: psycopg.Cursor[Any], table: str, columns: Sequence[str],
          rows: Iterator[Sequence[Any]]) -> int:
    n = 0
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


RESULT_COLUMNS = [c.name for c in Result.__table__.columns]
JSON_COLUMNS = {c.name for c in Result.__table__.columns if isinstance(c.type, JSON)}


def _row_values(doc: BenchResult) -> dict[str, Any]:
    """The `results` columns of a document as the product fills them (result_row), JSON
    columns as text for COPY."""
    row = result_row(doc)
    out = {}
    for name in RESULT_COLUMNS:
        value = getattr(row, name)
        out[name] = json.dumps(value, allow_nan=False) if name in JSON_COLUMNS else value
    return out


def seed(dsn: str, results: int, series: int) -> dict[str, Any]:
    """Bulk-load the plan into an empty, migrated database; returns counts and timings."""
    started = time.perf_counter()
    p = plan(results, series)
    rng = random.Random(1)
    variants: list[list[dict[str, Any]]] = []
    specs_json: list[str] = []
    spec_hashes: list[str] = []
    for s in p.specs:
        base = rng.uniform(0.5, 20.0)
        speedup = rng.uniform(1.1, 3.0)
        docs = [document(s, rng, base, speedup) for _ in range(VARIANTS)]
        variants.append([_row_values(d) for d in docs])
        spec = BenchSpec.from_dict(docs[0].spec)
        specs_json.append(json.dumps(docs[0].spec))
        spec_hashes.append(spec_hash(spec))
    built_s = time.perf_counter() - started

    # every run: (time, matrix, revision); ids follow time, as they would have
    span = timedelta(days=HISTORY_DAYS).total_seconds()
    schedule: list[tuple[float, int, int]] = []
    ordinary = len(p.matrices) - 1
    for r in range(p.depth):
        for m in range(ordinary):
            schedule.append(((r * ordinary + m + 0.5) / (p.depth * ordinary) * span, m, r))
    for r in range(LONG_POINTS):
        schedule.append(((r + 0.25) / LONG_POINTS * span, ordinary, r))
    schedule.sort()
    now = datetime.now(timezone.utc)
    counts: dict[str, int] = {}
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        counts["projects"] = _copy(cur, "projects", ["id", "name", "created_at"],
                                   ((i, f"team-{i - 1:02d}", START)
                                    for i in range(1, PROJECTS + 1)))
        counts["environments"] = _copy(
            cur, "environments", ["id", "content_hash", "pins", "installed", "created_at"],
            ((i + 1, canonical_hash({"pins": pins, "interpreter": None}), json.dumps(pins),
              json.dumps(dict(x.split("==") for x in pins)), START)
             for i, pins in enumerate(PINS)))
        axes = [parse_series_key(k) for k in p.keys]
        counts["series"] = _copy(
            cur, "series", ["id", "project_id", "key", *SERIES_KEY_FIELDS, "created_at"],
            ((i + 1, p.project_of[i], p.keys[i], *(axes[i][f] for f in SERIES_KEY_FIELDS), START)
             for i in range(len(p.keys))))

        def when(t: float) -> datetime:
            return START + timedelta(seconds=t)

        def run_rows() -> Iterator[tuple[Any, ...]]:
            for run_id, (t, m, r) in enumerate(schedule, start=1):
                first = p.matrices[m][0]
                matrix = {"models": sorted({p.specs[i].model for i in p.matrices[m]}),
                          "backends": sorted({p.specs[i].backend for i in p.matrices[m]}),
                          "device": p.specs[first].device}
                created = when(t)
                yield (run_id, p.project_of[first], 1 + (r * len(PINS)) // max(1, p.depth
                       if m < ordinary else LONG_POINTS) % len(PINS), "triggered",
                       f"rev-{m}-{r}", "main", "ci", "done", "pass", "[]",
                       f"seed-{run_id}", hashlib.sha256(f"seed-{run_id}".encode()).hexdigest(),
                       json.dumps(matrix), created, created, created + timedelta(minutes=9),
                       created + timedelta(minutes=9))

        counts["runs"] = _copy(cur, "runs", [
            "id", "project_id", "environment_id", "kind", "revision", "branch", "trigger",
            "status", "verdict", "reasons", "idempotency_key", "request_hash", "matrix",
            "created_at", "started_at", "finished_at", "updated_at"], run_rows())

        # results: ids in run order; the previous result of each series is its baseline
        def cells_and_results() -> Iterator[tuple[int, int, int, int, int | None, datetime]]:
            result_id = 0
            previous: dict[int, int] = {}
            for run_id, (t, m, r) in enumerate(schedule, start=1):
                for s in p.matrices[m]:
                    result_id += 1
                    yield result_id, run_id, s, r, previous.get(s), when(t) + timedelta(
                        minutes=1 + (result_id % 7))
                    previous[s] = result_id

        def cell_rows() -> Iterator[tuple[Any, ...]]:
            for rid, run_id, s, r, prev, created in cells_and_results():
                v = variants[s][r % VARIANTS]
                judgement: dict[str, Any] = {
                    "verdict": "pass", "suspect": False,
                    "reasons": [f"{p.keys[s]}: speedup {v['speedup']:.2f}x, within the "
                                f"threshold of the previous result"]}
                if prev is not None:
                    judgement["baseline_result_id"] = prev
                yield (rid, run_id, specs_json[s], spec_hashes[s], p.keys[s],
                       "cpu" if p.specs[s].device == "cpu" else "gpu", "done", 1, created,
                       created, created, created - timedelta(seconds=50), created,
                       json.dumps(judgement))

        counts["cells"] = _copy(cur, "cells", [
            "id", "run_id", "spec", "spec_hash", "series_key", "queue", "status", "attempts",
            "created_at", "updated_at", "enqueued_at", "started_at", "finished_at",
            "judgement"], cell_rows())

        last: dict[int, tuple[int, int, int | None]] = {}

        def result_rows() -> Iterator[list[Any]]:
            for rid, run_id, s, r, prev, created in cells_and_results():
                v = variants[s][r % VARIANTS]
                row = [v[name] for name in RESULT_COLUMNS]
                row[RESULT_COLUMNS.index("id")] = rid
                row[RESULT_COLUMNS.index("cell_id")] = rid
                row[RESULT_COLUMNS.index("run_id")] = run_id
                row[RESULT_COLUMNS.index("series_id")] = s + 1
                row[RESULT_COLUMNS.index("created_at")] = created
                last[s] = (rid, run_id, prev)
                yield row

        counts["results"] = _copy(cur, "results", RESULT_COLUMNS, result_rows())
        regressions: list[tuple[Any, ...]] = []
        for si in range(0, len(p.keys) - 1, 97):  # about 1% of series regressed, still open
            rid, run_id, prev = last[si]
            if prev is None:
                continue
            regressions.append((
                len(regressions) + 1, p.project_of[si], si + 1, run_id, rid, prev, "previous",
                "the previous result of the series", 2.0, 0.05, "open", -0.08,
                "kernels per inference 42 -> 58", json.dumps(["speedup fell 8%"]), now, now))
        counts["regressions"] = _copy(cur, "regressions", [
            "id", "project_id", "series_id", "opened_by_run_id", "opened_by_result_id",
            "baseline_result_id", "baseline_kind", "baseline_description", "baseline_speedup",
            "threshold", "status", "magnitude", "evidence", "reasons", "created_at",
            "updated_at"], iter(regressions))
        for table in ("projects", "environments", "series", "runs", "cells", "results",
                      "regressions"):
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                        f"(SELECT max(id) FROM {table}))")
        conn.commit()
    loaded_s = time.perf_counter() - started - built_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return {"counts": counts, "documents_s": round(built_s, 1), "copy_s": round(loaded_s, 1),
            "total_s": round(time.perf_counter() - started, 1),
            "long_series": p.keys[-1], "results_requested": results, "series_requested": series}


# ---- the server -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BROKER_PASSWORD = "capacity-bench"


def start_broker() -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server (a password, nothing on disk) for `--judging worker`: the API
    sends each upload's judging to it; no worker consumes it here, since a worker judges on
    other cores than the API's in production and this measures the API process alone."""
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--requirepass", BROKER_PASSWORD],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s, contextlib.suppress(OSError):
            s.connect(("127.0.0.1", port))
            return process, f"redis://:{BROKER_PASSWORD}@127.0.0.1:{port}/0"
        time.sleep(0.1)
    process.kill()
    raise SystemExit("the private redis-server did not start")


MAINTENANCE_QUEUE = "capacity-maintenance"
STAND_IN = "capacity-judge-stand-in"


def announce_judge(settings: Settings) -> None:
    """A worker row announcing the maintenance queue, with no process behind it: with
    `--judging worker` the API sends each run's judging there only while a live worker
    consumes the queue, as one would on other cores in production. Here nothing does (the
    judging is what is being taken off this machine), so the row stands in for it."""
    from app.services.workers import Announcement, heartbeat

    with session_scope(settings) as session:
        heartbeat(session, Announcement(name=STAND_IN, host=socket.gethostname(),
                                        pid=os.getpid(), queues=[MAINTENANCE_QUEUE]),
                  starting=True)


def retire_judge(settings: Settings) -> None:
    from app.services.workers import stopped

    with session_scope(settings) as session:
        stopped(session, STAND_IN, os.getpid())


def start_server(tree: Path, dsn: str, log: Path, judging: str = "api",
                 broker_url: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """`speedwatch serve` (one process, access log on) from `tree`, production settings;
    `judging` as SPEEDWATCH_INGEST_JUDGING (worker: the run ids go to `broker_url`)."""
    port = free_port()
    queue = f"capacity-{secrets.token_hex(3)}"
    # Production mode refuses URLs without a password. The PostgreSQL of this benchmark
    # trusts local connections and ignores the one given; with `--judging api` nothing here
    # reaches the broker (an upload enqueues nothing, and the broker does not decide
    # readiness).
    env = {**os.environ, "SPEEDWATCH_ENVIRONMENT": "production",
           "SPEEDWATCH_DATABASE_URL": dsn.replace("postgres@", "postgres:capacity-bench@", 1),
           "SPEEDWATCH_EXECUTOR": "celery",
           "SPEEDWATCH_BROKER_URL": broker_url
           or f"redis://:{BROKER_PASSWORD}@127.0.0.1:6379/0",
           "SPEEDWATCH_CPU_QUEUE": queue, "SPEEDWATCH_GPU_QUEUES": json.dumps({"cuda": queue}),
           "SPEEDWATCH_MAINTENANCE_QUEUE": MAINTENANCE_QUEUE,
           # the stand-in worker's one announcement (announce_judge) counts as alive
           "SPEEDWATCH_WORKER_LOST_AFTER_SECONDS": "86400",
           "SPEEDWATCH_INGEST_JUDGING": judging,
           "SPEEDWATCH_PUBLIC_READS": "false", "PYTHONPATH": str(tree)}
    where = subprocess.run([sys.executable, "-c", "import app; print(app.__file__)"], cwd=tree,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree):
        raise SystemExit(f"the server would import app from {where}, not from {tree}")
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--port", str(port), "--no-migrate"],
        cwd=tree, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    if not wait_until_up(base, process, path="/readyz", timeout_s=90):
        process.kill()
        raise SystemExit(f"the API did not come up; see {log}")
    return process, base


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


# ---- reads ------------------------------------------------------------------------------------

def measure_reads(base: str, read_token: str, targets: dict[str, list[str]], *, requests: int,
                  max_s: float, writer: Any) -> dict[str, dict[str, Any]]:
    """Each endpoint in turn, one client: `requests` GETs (fewer if `max_s` runs out, never
    under 20) after 3 warm-ups; p50/p95/max in ms."""
    out: dict[str, dict[str, Any]] = {}
    cookies = {"speedwatch_token": read_token}
    headers = {"Authorization": f"Bearer {read_token}"}
    with httpx.Client(base_url=base, timeout=60) as client:
        for name, paths in targets.items():
            page = not paths[0].startswith("/api/")
            kwargs: dict[str, Any] = {"cookies": cookies} if page else {"headers": headers}
            for path in paths[:3]:
                client.get(path, **kwargs)
            ms: list[float] = []
            errors = 0
            size = 0
            load_before = loadavg()
            began = time.monotonic()
            for i in range(requests):
                path = paths[i % len(paths)]
                t0 = time.perf_counter()
                response = client.get(path, **kwargs)
                elapsed = (time.perf_counter() - t0) * 1000
                ms.append(elapsed)
                size = max(size, len(response.content))
                errors += response.status_code != 200
                writer.writerow([name, i, round(elapsed, 2), response.status_code,
                                 len(response.content), path])
                if time.monotonic() - began > max_s and i >= 19:
                    break
            q = statistics.quantiles(ms, n=100, method="inclusive")
            out[name] = {"n": len(ms), "p50_ms": round(q[49], 1), "p95_ms": round(q[94], 1),
                         "max_ms": round(max(ms), 1), "errors": errors, "max_bytes": size,
                         "loadavg_before": load_before, "loadavg_after": loadavg()}
            print(f"  {name:28} n={len(ms):4} p50 {q[49]:8.1f} ms  p95 {q[94]:8.1f} ms  "
                  f"errors {errors}  load {loadavg()}", flush=True)
    return out


# ---- uploads ----------------------------------------------------------------------------------

@dataclass
class Upload:
    due: float  # seconds after the step's start
    request: bytes
    documents: int = 1  # a batch request (POST /api/v1/results/batch) carries a job's


async def _one_connection(host: str, port: int, queue: asyncio.Queue[Upload | None],
                          t0: float, done: list[tuple[float, float, int, int]]) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    while True:
        item = await queue.get()
        if item is None:
            break
        status = 0
        for _ in range(2):  # a connection the server closed is opened again once
            try:
                if writer is None or reader is None:
                    reader, writer = await asyncio.open_connection(host, port)
                writer.write(item.request)
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ")[1])
                length = 0
                close = False
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    elif name.lower() == "connection" and "close" in value.lower():
                        close = True
                await reader.readexactly(length)
                if close:
                    writer.close()
                    reader = writer = None
                break
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                    asyncio.LimitOverrunError):
                if writer is not None:
                    writer.close()
                reader = writer = None
                status = -1
        done.append((item.due, time.perf_counter() - t0 - item.due, status, item.documents))
    if writer is not None:
        writer.close()


async def _offer(host: str, port: int, uploads: list[Upload], connections: int,
                 tail_s: float) -> tuple[list[tuple[float, float, int, int]], int]:
    """Send each upload when it is due, over a pool of keep-alive connections; returns
    (due, latency from due, status, documents) per answered upload, and how many got no
    answer."""
    queue: asyncio.Queue[Upload | None] = asyncio.Queue()
    done: list[tuple[float, float, int, int]] = []
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(_one_connection(host, port, queue, t0, done))
             for _ in range(connections)]
    for u in uploads:
        wait = u.due - (time.perf_counter() - t0)
        if wait > 0:
            await asyncio.sleep(wait)
        queue.put_nowait(u)
    for _ in tasks:
        queue.put_nowait(None)
    _, pending = await asyncio.wait(tasks, timeout=tail_s)
    for task in pending:
        task.cancel()
    return done, len(uploads) - len(done)


def series_levels(dsn: str) -> dict[int, tuple[float, float]]:
    """Series index -> (baseline median ms, speedup) of its latest stored result, so that
    uploads continue each series' history (a random level would open a regression on most
    uploads, which is not what CI sends)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT s.id, r.baseline_median_ms, r.speedup FROM series s "
            "CROSS JOIN LATERAL (SELECT baseline_median_ms, speedup FROM results "
            "WHERE series_id = s.id ORDER BY id DESC LIMIT 1) r").fetchall()
    return {int(sid) - 1: (float(base), float(speedup)) for sid, base, speedup in rows}


def upload_requests(base: str, tokens: dict[int, str], p: Plan, rate: float, seconds: float,
                    tag: str, rng: random.Random,
                    levels: dict[int, tuple[float, float]], batch: bool = False) -> list[Upload]:
    """A CI job posts its matrix, one document per series, under a new revision: jobs of
    10 uploads each, every document new (its series' level, fresh noise of +-1%). With
    `batch` a job posts its documents in one request (POST /api/v1/results/batch), due
    when its first document would have been; `rate` still counts documents."""
    host = base.removeprefix("http://")
    out: list[Upload] = []
    n = int(rate * seconds)
    ordinary = len(p.matrices) - 1
    job = 0
    while len(out) < n:
        m = rng.randrange(ordinary)
        project = p.project_of[p.matrices[m][0]]
        revision = f"{UPLOAD_PREFIX}{tag}-{job}"
        job += 1
        docs: list[tuple[str, dict[str, Any]]] = []
        sent = sum(u.documents for u in out)
        for s in p.matrices[m]:
            if sent + len(docs) == n:
                break
            level_ms, level_speedup = levels[s]
            docs.append((p.specs[s].device,
                         document(p.specs[s], rng, level_ms, level_speedup).to_dict()))
        job_of = {"project": f"team-{project - 1:02d}", "revision": revision, "branch": "main"}
        where = {d: {**job_of, "environment": {"pins": UPLOAD_PINS[d]}} for d, _ in docs}
        requests: list[tuple[str, dict[str, Any], int]]
        if batch:  # one batch per device (its pins): a job's CPU and GPU documents are two runs
            by_device = {d: [doc for e, doc in docs if e == d] for d, _ in docs}
            requests = [("/api/v1/results/batch", {**where[d], "results": mine}, len(mine))
                        for d, mine in by_device.items()]
        else:
            requests = [("/api/v1/results", {**where[d], "result": doc}, 1) for d, doc in docs]
        due = sent / rate
        for path, payload, count in requests:
            body = json.dumps(payload, allow_nan=False).encode()
            head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
                    f"Authorization: Bearer {tokens[project]}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
            out.append(Upload(due, head.encode() + body, count))
            due += count / rate
        if sent + len(docs) >= n:
            break
    return out


def unjudged(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM cells c JOIN runs r ON r.id = c.run_id "
            "WHERE r.kind = 'ingest' AND r.revision LIKE %s AND c.judgement IS NULL",
            (UPLOAD_PREFIX + "%",)).fetchone()
    return int(row[0]) if row else 0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_uploads(base: str, dsn: str, tokens: dict[int, str], p: Plan, *,
                    rates: list[float], seconds: float, p95_ms: float, connections: int,
                    writer: Any, server_pid: int,
                    judged_here: bool = True, batch: bool = False) -> list[dict[str, Any]]:
    """Each rate in turn until one fails; per step also the server's CPU time per upload
    (its judging included, counted until the judging drained): a cost that co-tenants of
    the machine do not change, where the rate held depends on how much CPU they leave.
    With judging sent to a worker (`judged_here` False; none runs here) the step waits
    only for the last sends to the broker."""
    host, port = base.removeprefix("http://").split(":")
    rng = random.Random(11)
    levels = series_levels(dsn)
    steps = []
    for rate in rates:
        tag = f"{rate:g}-{secrets.token_hex(2)}"
        uploads = upload_requests(base, tokens, p, rate, seconds, tag, rng, levels, batch)
        load_before = loadavg()
        cpu_before = cpu_seconds(server_pid)
        done, lost = asyncio.run(_offer(host, int(port), uploads, connections, seconds + 60))
        load_after = loadavg()
        latencies = sorted(lat * 1000 for _, lat, _, _ in done)
        errors = lost + sum(1 for _, _, status, _ in done if status != 201)
        for due, lat, status, _ in done:
            writer.writerow([rate, round(due, 4), round(lat * 1000, 2), status])
        documents = sum(count for *_, count in done)
        q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 2 \
            else [float("nan")] * 99
        last_answer = max((d + lat for d, lat, _, _ in done), default=0.0)
        drain_started = time.monotonic()
        while judged_here and unjudged(dsn) and time.monotonic() - drain_started < 120:
            time.sleep(1.0)
        if not judged_here:
            time.sleep(2.0)  # the coalescer's window and its sends
        step: dict[str, Any] = {
                "rate": rate, "sent": len(uploads), "answered": len(done), "errors": errors,
                "statuses": {str(s): sum(1 for _, _, x, _ in done if x == s)
                             for s in sorted({x for _, _, x, _ in done})},
                "achieved_per_s": round(documents / max(seconds, last_answer), 1),
                "requests": len(done),
                "p50_ms": round(q[49], 1), "p95_ms": round(q[94], 1),
                "p99_ms": round(q[98], 1), "max_ms": round(latencies[-1], 1) if latencies else None,
                "judging_drained_s": round(time.monotonic() - drain_started, 1),
                "server_cpu_ms_per_upload": round(
                    (cpu_seconds(server_pid) - cpu_before) * 1000 / max(1, documents), 1),
                "left_unjudged": unjudged(dsn),
                "loadavg_before": load_before, "loadavg_after": load_after}
        steps.append(step)
        print(f"  uploads {rate:6g}/s: achieved {step['achieved_per_s']:6}/s  p50 "
              f"{step['p50_ms']:7} ms  p95 {step['p95_ms']:7} ms  errors {errors}  "
              f"judging drained in {step['judging_drained_s']} s  server CPU "
              f"{step['server_cpu_ms_per_upload']} ms/upload  load {load_after}",
              flush=True)
        if errors or step["p95_ms"] > max(1000.0, 3 * p95_ms):
            break
    return steps


def held_rate(steps: list[dict[str, Any]], p95_ms: float) -> dict[str, Any] | None:
    ok = [s for s in steps if s["errors"] == 0 and s["p95_ms"] <= p95_ms
          and s["achieved_per_s"] >= 0.95 * s["rate"]]
    return max(ok, key=lambda s: s["rate"]) if ok else None


def delete_uploads(dsn: str) -> int:
    """What the uploads stored goes, so every measurement sees the seeded history.

    results.confirms_result_id references results without an index: deleting a result
    checks it by a scan of every result (minutes for a few hundred on a million), so a
    partial index on it stands for the time of the delete."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE INDEX IF NOT EXISTS capacity_cleanup ON results "
                     "(confirms_result_id) WHERE confirms_result_id IS NOT NULL")
        cur = conn.execute("DELETE FROM runs WHERE kind = 'ingest' AND revision LIKE %s",
                           (UPLOAD_PREFIX + "%",))
        deleted = cur.rowcount
        conn.execute("DROP INDEX capacity_cleanup")
        conn.execute("DELETE FROM api_tokens WHERE name LIKE 'capacity-%'")
        for table in ("runs", "cells", "results"):  # statistics only: a VACUUM of a
            conn.execute(f"ANALYZE {table}")  # million results takes minutes
    return deleted


# ---- measure ----------------------------------------------------------------------------------

def database_revision(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(row[0]) if row else "?"


def migrate_to(dsn: str, revision: str) -> float:
    """Upgrade or downgrade to `revision` with this checkout's migrations; seconds taken."""
    from alembic.script import ScriptDirectory

    from app.db import alembic_config, downgrade, upgrade

    current = database_revision(dsn)
    if current == revision:
        return 0.0
    script = ScriptDirectory.from_config(alembic_config(dsn))
    ancestors = {r.revision for r in script.iterate_revisions(revision, "base")}
    started = time.perf_counter()
    if current in ancestors:
        upgrade(dsn, revision)
    else:
        downgrade(dsn, revision)
    return time.perf_counter() - started


def measure(args: argparse.Namespace) -> None:
    dsn = f"{SERVER}/{args.db}"
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    leftover = delete_uploads(dsn)  # a measurement that died keeps none of its uploads
    migrate_s = migrate_to(dsn, args.migrate) if args.migrate else None
    with psycopg.connect(dsn) as conn:
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
                  for t in ("series", "runs", "results")}
        long_key = conn.execute("SELECT key FROM series ORDER BY id DESC LIMIT 1").fetchone()[0]  # type: ignore[index]
        series_count = counts["series"] - 1
        results_count = counts["results"] - LONG_POINTS
    p = plan(results_count, series_count)
    with psycopg.connect(dsn) as conn:
        stored = [k for (k,) in conn.execute("SELECT key FROM series ORDER BY id")]
    if stored != p.keys or p.keys[-1] != long_key:
        raise SystemExit(f"{args.db} was seeded with another plan: seed it again")
    settings = Settings(database_url=dsn)
    tokens: dict[int, str] = {}
    with session_scope(settings) as session:
        _, read_token = create_token(session, "read", "capacity-read")
        for project in range(1, PROJECTS + 1):
            _, tokens[project] = create_token(session, "ci", f"capacity-ci-{project}",
                                              projects=[f"team-{project - 1:02d}"])
    rng = random.Random(5)
    runs = counts["runs"]
    # The runs read are CI jobs' runs (a matrix of 10 cells) at every size: the long
    # series' 10,000 one-cell runs are 91% of the 10k store's runs but 9% of the 1M
    # store's, so runs drawn from all of them compared one cell against ten.
    with psycopg.connect(dsn) as conn:
        matrix_runs = sorted(int(r) for (r,) in conn.execute(
            "SELECT run_id FROM cells GROUP BY run_id HAVING count(*) > 1"))
        run_ids = [rng.choice(matrix_runs) for _ in range(200)]
        revisions: list[tuple[str, str]] = []
        for i in run_ids[:50]:
            found = conn.execute("SELECT p.name, r.revision FROM runs r JOIN projects p ON "
                                 "p.id = r.project_id WHERE r.id = %s", (i,)).fetchone()
            if found is not None:
                revisions.append((str(found[0]), str(found[1])))
    targets = {
        "overview /": ["/"],
        "series page (10k points)": [f"/series/{long_key}?project={LONG_PROJECT}"],
        "run page /runs/{id}": [f"/runs/{i}" for i in run_ids],
        "GET /api/v1/series": ["/api/v1/series"],
        "CI: GET /api/v1/runs/{id}": [f"/api/v1/runs/{i}" for i in run_ids],
        "CI: runs of a revision": [f"/api/v1/runs?project={name}&revision={rev}&limit=50"
                                   for name, rev in revisions],
    }
    tree = Path(args.tree).resolve()
    summary: dict[str, Any] = {
        "label": args.label, "db": args.db, "tree": str(tree),
        "leftover_upload_runs_deleted": leftover,
        "schema_revision": database_revision(dsn), "migrate_s": migrate_s,
        "series": series_count + 1, "results": counts["results"], "runs": runs,
        "long_series_points": LONG_POINTS, "uptime_before": uptime(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "runs_read": f"200 drawn from the {len(matrix_runs)} runs of more than one cell",
    }
    print(f"{args.label}: {args.db} ({counts['results']} results, {series_count + 1} series), "
          f"code from {tree}, schema {summary['schema_revision']}", flush=True)
    broker, broker_url = start_broker() if args.judging == "worker" else (None, None)
    summary["judging"] = args.judging
    if args.judging == "worker":
        announce_judge(settings)
    server, base = start_server(tree, dsn, out / "serve.log", args.judging, broker_url)
    try:
        if args.requests:
            with (out / "reads.csv").open("w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["endpoint", "i", "ms", "status", "bytes", "path"])
                summary["reads"] = measure_reads(base, read_token, targets,
                                                 requests=args.requests,
                                                 max_s=args.read_seconds, writer=writer)
        if args.rates:
            with (out / "uploads.csv").open("w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["rate_per_s", "due_s", "latency_ms", "status"])
                steps = measure_uploads(base, dsn, tokens, p,
                                        rates=[float(r) for r in args.rates.split(",")],
                                        seconds=args.upload_seconds, p95_ms=args.p95_ms,
                                        connections=args.connections, writer=writer,
                                        server_pid=server.pid,
                                        judged_here=args.judging == "api",
                                        batch=args.batch)
            summary["upload_steps"] = steps
            summary["uploads_held"] = held_rate(steps, args.p95_ms)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        if broker is not None:
            broker.kill()
            retire_judge(settings)
        summary["uptime_after"] = uptime()
        summary["deleted_upload_runs"] = delete_uploads(dsn)
        log = (out / "serve.log").read_text(errors="replace").splitlines()
        (out / "serve-tail.log").write_text("\n".join(
            [ln for ln in log if "HTTP/1.1\" 2" not in ln][-300:]) + "\n")
        (out / "serve.log").unlink()
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    held = summary.get("uploads_held")
    print(f"uploads held at p95 <= {args.p95_ms:g} ms: "
          f"{held['rate'] if held else 'none'}/s; {summary['uptime_after']}")


def summarize(out: Path, label: str) -> None:
    """A summary from the raw files alone, for a measurement whose process died before
    writing one (its figures as `measure` computes them; no load or timing notes)."""
    summary: dict[str, Any] = {"label": label, "from_raw_files": True}
    reads: dict[str, list[float]] = {}
    with (out / "reads.csv").open() as f:
        for row in csv.DictReader(f):
            reads.setdefault(row["endpoint"], []).append(float(row["ms"]))
    summary["reads"] = {}
    for name, ms in reads.items():
        q = statistics.quantiles(ms, n=100, method="inclusive")
        summary["reads"][name] = {"n": len(ms), "p50_ms": round(q[49], 1),
                                  "p95_ms": round(q[94], 1), "max_ms": round(max(ms), 1)}
    steps: dict[float, list[tuple[float, float, int]]] = {}
    if (out / "uploads.csv").exists():
        with (out / "uploads.csv").open() as f:
            for row in csv.DictReader(f):
                steps.setdefault(float(row["rate_per_s"]), []).append(
                    (float(row["due_s"]), float(row["latency_ms"]), int(row["status"])))
    summary["upload_steps"] = []
    for rate, done in steps.items():
        lat = sorted(x[1] for x in done)
        q = statistics.quantiles(lat, n=100, method="inclusive")
        summary["upload_steps"].append({
            "rate": rate, "answered": len(done),
            "errors": sum(1 for x in done if x[2] != 201),
            "p50_ms": round(q[49], 1), "p95_ms": round(q[94], 1), "p99_ms": round(q[98], 1)})
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def table(paths: list[Path]) -> None:
    rows = [json.loads(p.read_text()) for p in paths]
    names = list(next((r["reads"] for r in rows if "reads" in r), {}))
    head = ["label", "results", "series", "uploads/s held"] + [f"{n} p95" for n in names]
    print(" | ".join(head))
    for r in rows:
        held = r.get("uploads_held")
        print(" | ".join([r["label"], str(r["results"]), str(r["series"]),
                          f"{held['rate']:g} (p95 {held['p95_ms']})" if held else "-"]
                         + [f"{r['reads'][n]['p95_ms']}" if "reads" in r else "-"
                            for n in names]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("seed", help="create, migrate and fill a database")
    s.add_argument("--db", required=True)
    s.add_argument("--results", type=int, required=True, help="besides the long series")
    s.add_argument("--series", type=int, required=True, help="besides the long series")
    s.add_argument("--fresh", action="store_true", help="drop the database first")
    m = sub.add_parser("measure", help="measure one API process on a seeded database")
    m.add_argument("--db", required=True)
    m.add_argument("--label", required=True)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--tree", default=str(ROOT), help="source tree the server runs from")
    m.add_argument("--migrate", help="alembic revision to move the database to first")
    m.add_argument("--requests", type=int, default=100, help="per endpoint; 0: no reads")
    m.add_argument("--read-seconds", type=float, default=60.0)
    m.add_argument("--rates", default="25,50,75,100,150,200,250,300")
    m.add_argument("--upload-seconds", type=float, default=15.0)
    m.add_argument("--batch", action="store_true",
                   help="each CI job posts its documents in one request "
                   "(POST /api/v1/results/batch); rates count documents")
    m.add_argument("--connections", type=int, default=32)
    m.add_argument("--p95-ms", type=float, default=200.0)
    m.add_argument("--judging", choices=("api", "worker"), default="api",
                   help="who judges the uploads (SPEEDWATCH_INGEST_JUDGING)")
    r = sub.add_parser("summarize", help="a summary from a measurement's raw files")
    r.add_argument("out", type=Path)
    r.add_argument("--label", required=True)
    t = sub.add_parser("table", help="print summaries side by side")
    t.add_argument("summaries", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "seed":
        from app.db import upgrade

        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
            if args.fresh:
                admin.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{args.db}"')
        dsn = f"{SERVER}/{args.db}"
        upgrade(dsn)
        figures = seed(dsn, args.results, args.series)
        figures["schema_revision"] = database_revision(dsn)
        print(json.dumps(figures, indent=1))
    elif args.command == "measure":
        measure(args)
    elif args.command == "summarize":
        summarize(args.out, args.label)
    else:
        table(args.summaries)


if __name__ == "__main__":
    main()
