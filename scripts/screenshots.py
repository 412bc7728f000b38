"""Screenshots of the dashboard for the README: the overview, a series page with a flagged
regression and the run page of the run that opened it (docs/dashboard-overview.png,
docs/dashboard-series.png, docs/dashboard-run.png). The history is made up (seeded numbers,
TensorRT included, which cannot run here), not measured.

Fills a fresh PostgreSQL database with the seeded history the browser tests use (through
the real ingest and detection path: the tensor-weights series of Torch-TensorRT regresses
when torch-tensorrt moves to 2.7.0), serves the app with uvicorn and photographs the pages
in Debian's Chromium through Playwright.

    .venv/bin/python scripts/screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_api import api_server, create_database, drop_database  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db import get_engine, session_scope, upgrade  # noqa: E402
from app.models import Regression  # noqa: E402
from app.services.tokens import create_token  # noqa: E402
from tests.dashboard.browser import launch  # noqa: E402
from tests.dashboard.seed import PROJECT, seed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    name, dsn = create_database(args.admin_url, "speedwatch_shots")
    try:
        upgrade(dsn)
        settings = Settings(database_url=dsn, executor="none")
        with Session(get_engine(settings), expire_on_commit=False) as session:
            seeded = seed(session, settings)
        with session_scope(settings) as session:
            _, token = create_token(session, "read", "screenshots")
            opened_by = session.scalars(select(Regression.opened_by_run_id)).first()
        with api_server(dsn) as base, sync_playwright() as playwright, \
                tempfile.TemporaryDirectory() as profile:
            context = launch(playwright, Path(profile), width=1360, height=860)
            # the server has no public reads: the page reads with the token cookie
            context.add_cookies([{"name": "speedwatch_token", "value": token, "url": base}])
            page = context.new_page()
            for path, chart, out, height in (
                ("/", "#overview-chart", "dashboard-overview.png", None),
                # the chart, change points and the regression; not the table of points
                (f"/series/{seeded.regressed_key}?project={PROJECT}", "#series-chart",
                 "dashboard-series.png", 1080),
                # each cell's evidence as what changed since its baseline
                (f"/runs/{opened_by}", "#run-chart", "dashboard-run.png", None),
            ):
                page.goto(base + path)
                page.locator(f"{chart} g.trace").first.wait_for(state="attached")
                page.wait_for_timeout(500)
                clip = {"x": 0, "y": 0, "width": 1360, "height": height} if height else None
                page.screenshot(path=str(args.out / out), full_page=True, clip=clip)
                print(f"wrote {args.out / out}")
            context.close()
    finally:
        drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
