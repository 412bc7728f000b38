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
from app.models import Regression, Run  # noqa: E402
from app.services.tokens import create_token  # noqa: E402
from devkit.browser import launch  # noqa: E402
from devkit.dashboard_seed import PROJECT, seed  # noqa: E402


def _photograph(base: str, token: str, width: int,
                shots: list[tuple[str, str, str, Path, int | None]]) -> None:
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = launch(playwright, Path(profile), width=width, height=860)
        # the server has no public reads: the page reads with the token cookie
        context.add_cookies([{"name": "speedwatch_token", "value": token, "url": base}])
        page = context.new_page()
        for name, path, chart, out, height in shots:
            page.goto(base + path)
            page.locator(f"{chart} g.trace").first.wait_for(state="attached")
            page.wait_for_timeout(500)
            clip = {"x": 0, "y": 0, "width": width, "height": height} if height else None
            scroll = page.evaluate("document.documentElement.scrollWidth")
            print(f"{name}: page width {scroll} px in a {width} px window"
                  + (" (horizontal scrollbar)" if scroll > width else ""))
            page.screenshot(path=str(out), full_page=True, clip=clip)
            print(f"wrote {out}")
        context.close()


def store_pages(url: str, runs: list[int], out: Path, width: int) -> None:
    """Run pages of real runs (a demo's store, say), as a user of that store sees them."""
    settings = Settings(database_url=url, executor="none")
    with session_scope(settings) as session:
        _, token = create_token(session, "read", "screenshots")
    with api_server(url) as base:
        _photograph(base, token, width, [(f"run {r}", f"/runs/{r}", "#run-chart",
                                          out / f"run-{r}.png", None) for r in runs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--width", type=int, default=1360, help="viewport width in pixels")
    parser.add_argument("--only", default="overview,series,run",
                        help="pages to photograph: overview, series, run (the run that opened "
                        "the regression), run-pass (a run whose verdict is pass)")
    parser.add_argument("--store", help="photograph the run pages of this existing store (a "
                        "database URL, e.g. sqlite:///copy-of-demo/speedwatch.db: it gets a read "
                        "token, so use a copy) instead of the seeded history")
    parser.add_argument("--runs", default="1,2", help="with --store: the runs to photograph")
    args = parser.parse_args()
    if args.store:
        store_pages(args.store, [int(r) for r in args.runs.split(",")], args.out, args.width)
        return
    wanted = {name.strip() for name in args.only.split(",")}
    name, dsn = create_database(args.admin_url, "speedwatch_shots")
    try:
        upgrade(dsn)
        settings = Settings(database_url=dsn, executor="none")
        with Session(get_engine(settings), expire_on_commit=False) as session:
            seeded = seed(session, settings)
        with session_scope(settings) as session:
            _, token = create_token(session, "read", "screenshots")
            opened_by = session.scalars(select(Regression.opened_by_run_id)).first()
            passed = session.scalars(select(Run.id).where(Run.verdict == "pass")
                                     .order_by(Run.id.desc())).first()
        shots = [
            ("overview", "/", "#overview-chart", "dashboard-overview.png", None),
            # the chart, change points and the regression; not the table of points
            ("series", f"/series/{seeded.regressed_key}?project={PROJECT}",
             "#series-chart", "dashboard-series.png", 1080),
            # each cell's evidence as what changed since its baseline
            ("run", f"/runs/{opened_by}", "#run-chart", "dashboard-run.png", None),
            ("run-pass", f"/runs/{passed}", "#run-chart", "dashboard-run-pass.png", None),
        ]
        with api_server(dsn) as base:
            _photograph(base, token, args.width,
                        [(n, path, chart, args.out / out, height)
                         for n, path, chart, out, height in shots if n in wanted])
    finally:
        drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
