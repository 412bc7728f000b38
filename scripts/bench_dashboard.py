"""Benchmark the dashboard's series page on PostgreSQL with a long history.

Stores `--points` results in one series (bulk COPY through scripts/bench_api.py's fill, so
the fill takes seconds), starts the app with uvicorn in a subprocess and measures
GET /series/{key} sequentially from this process: p50/p95/p99 and the page size. With
`--overlay` the series has a sibling of the other weight representation with as many points,
which the page draws on the same chart (twice the points). The target is p95 < 300 ms for
10k points. Client and server share this machine's cores.

    .venv/bin/python scripts/bench_dashboard.py [--points 10000] [--requests 100] [--overlay]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_api import (  # noqa: E402
    DEVICE_CLASS,
    FILL_PROJECT,
    api_server,
    create_database,
    drop_database,
    fill,
    measure,
)

from app.config import Settings  # noqa: E402
from app.db import session_scope, upgrade  # noqa: E402
from app.services.tokens import create_token  # noqa: E402
from benchmarks.spec import BenchSpec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--overlay", action="store_true",
                        help="also store a tensor-weights sibling with as many points")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()

    spec = BenchSpec(model="resnet50", backend="torch_tensorrt", weights="constant",
                     precision="fp16", batch_size=1, device="cuda")
    specs = [spec, replace(spec, weights="tensor")] if args.overlay else [spec]
    key = spec.series_key(DEVICE_CLASS)
    name, dsn = create_database(args.admin_url, "speedwatch_bench")
    print(f"database {name}")
    try:
        upgrade(dsn)
        fill_s = fill(dsn, specs, args.points * len(specs))
        print(f"filled {args.points} points in each of {len(specs)} series in {fill_s:.1f} s")
        with session_scope(Settings(database_url=dsn)) as session:
            _, token = create_token(session, "read", "bench-dashboard")
        # the server runs without public reads: the page reads the token from its cookie
        headers = {"Cookie": f"speedwatch_token={token}"}
        path = f"/series/{key}?project={FILL_PROJECT}"  # as every dashboard link names it
        with api_server(dsn) as base:
            page = httpx.get(base + path, headers=headers, timeout=60)
            if page.status_code != 200:
                raise SystemExit(f"GET {path}: {page.status_code} {page.text[:300]}")
            drawn = page.text.count('"revision"')  # sanity: the figure is on the page
            measure("warm-up", [lambda c: c.get(path)] * 5, base, headers, 1)
            figures = measure(f"GET /series/{{key}} ({args.points} points x {len(specs)})",
                              [lambda c: c.get(path)] * args.requests, base, headers, 1)
        figures["page_kb"] = round(len(page.content) / 1024)
        print(f"\n{'page':40} {'n':>5} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'KiB':>6}")
        print(f"{figures['name']:40} {figures['requests']:>5} {figures['p50_ms']:>7} "
              f"{figures['p95_ms']:>7} {figures['p99_ms']:>7} {figures['page_kb']:>6}")
        assert drawn >= 1
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
    finally:
        if not args.keep:
            drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
