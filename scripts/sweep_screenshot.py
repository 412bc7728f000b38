"""A screenshot of a sweep's (or bisect's) dashboard page for the README, from the store
the sweep was measured into (docs/dashboard-sweep.png by default).

Serves the app on that database (record only: nothing is measured) with uvicorn and
photographs /sweeps/ID in Debian's Chromium through Playwright; the page is read with a
`read` token made for the purpose.

    .venv/bin/python scripts/sweep_screenshot.py --database-url sqlite:////abs/speedwatch.db \\
        --sweep 1 [--out docs/dashboard-sweep.png] [--height 1100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_api import api_server  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db import session_scope  # noqa: E402
from app.services.tokens import create_token  # noqa: E402
from devkit.browser import launch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--sweep", type=int, required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard-sweep.png")
    parser.add_argument("--height", type=int, default=0,
                        help="clip to this many pixels from the top (0: the whole page)")
    args = parser.parse_args()
    settings = Settings(database_url=args.database_url, executor="none")
    with session_scope(settings) as session:
        _, token = create_token(session, "read", "sweep-screenshot")
    with api_server(args.database_url) as base, sync_playwright() as playwright, \
            tempfile.TemporaryDirectory() as profile:
        context = launch(playwright, Path(profile), width=1360, height=860)
        context.add_cookies([{"name": "speedwatch_token", "value": token, "url": base}])
        page = context.new_page()
        page.goto(f"{base}/sweeps/{args.sweep}")
        page.locator(".js-chart g.trace").first.wait_for(state="attached")
        page.wait_for_timeout(500)
        clip = {"x": 0, "y": 0, "width": 1360, "height": args.height} if args.height else None
        page.screenshot(path=str(args.out), full_page=True, clip=clip)
        print(f"wrote {args.out}")
        context.close()


if __name__ == "__main__":
    main()
