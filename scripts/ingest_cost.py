"""What one upload costs the service in statements and CPU, without the HTTP stack.

Runs the upload route's own work in this process (the body validated as ResultIngest,
`ingest_result`, the answer, the commit) on a seeded capacity store
(`scripts/capacity.py seed`), for CI jobs of 10 documents under new revisions as
`capacity.py measure` posts them, and prints the statements per upload (by kind) and the
process CPU milliseconds per upload. The uploads are deleted afterwards.

    .venv/bin/python scripts/ingest_cost.py --db sw_capacity_10k --uploads 600
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import capacity  # scripts/capacity.py, beside this file


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default="sw_capacity_10k")
    parser.add_argument("--uploads", type=int, default=600)
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--results", type=int, default=10000)
    args = parser.parse_args()

    from app.config import Settings
    from app.db import session_scope
    from app.schemas import ResultIngest
    from app.services.results import ingest_result

    dsn = f"{capacity.SERVER}/{args.db}"
    settings = Settings(database_url=dsn.replace("postgresql://", "postgresql+psycopg://"))
    p = capacity.plan(args.results, args.series)
    levels = capacity.series_levels(dsn)
    rng = random.Random(7)
    tag = f"probe{int(time.time())}"
    uploads = capacity.upload_requests("http://x", {k: "t" for k in set(p.project_of)},
                                       p, 1.0, args.uploads, tag, rng, levels)
    bodies = [json.loads(u.request.split(b"\r\n\r\n", 1)[1]) for u in uploads]

    kinds: Counter[str] = Counter()
    counting = [False]

    def count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if counting[0]:
            kinds[" ".join(statement.split()[:4])[:60]] += 1

    event.listen(Engine, "before_cursor_execute", count)
    warm = 50
    cpu0 = wall0 = 0.0
    try:
        for i, body in enumerate(bodies):
            if i == warm:
                counting[0] = True
                cpu0, wall0 = time.process_time(), time.perf_counter()
            payload = ResultIngest.model_validate(body)
            with session_scope(settings) as session:
                stored, _ = ingest_result(session, payload, settings)
                _ = (stored.id, stored.run_id, stored.cell_id, stored.cell.series_key)
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - wall0
    finally:
        event.remove(Engine, "before_cursor_execute", count)
        deleted = capacity.delete_uploads(dsn)
    n = len(bodies) - warm
    out = {"uploads": n, "cpu_ms_per_upload": round(1000 * cpu / n, 3),
           "wall_ms_per_upload": round(1000 * wall / n, 3),
           "statements_per_upload": round(sum(kinds.values()) / n, 2),
           "by_kind": {k: round(v / n, 2) for k, v in kinds.most_common()},
           "deleted": deleted}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
