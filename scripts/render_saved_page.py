"""A screenshot of a dashboard page saved as HTML where it was served (a GPU host has no
browser): the page exactly as that server answered, with this checkout's static files
under /static, photographed in Debian's Chromium through Playwright.

    .venv/bin/python scripts/render_saved_page.py PAGE.html OUT.png [--width 1400] [--height N]

Scripts are blocked (the saved page's data is in its HTML; its scripts would ask a server
that is gone), so what shows is what the server rendered.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from devkit.browser import launch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("page", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=0,
                        help="the top this many pixels only (default: the whole page)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        shutil.copytree(ROOT / "app" / "dashboard" / "static", site / "static")
        shutil.copy(args.page, site / "page.html")
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as pw:
                context = launch(pw, Path(tmp) / "profile", width=args.width)
                context.set_extra_http_headers({})
                page = context.new_page()
                page.route("**/*.js", lambda route: route.abort())
                page.goto(f"http://127.0.0.1:{server.server_address[1]}/page.html")
                page.wait_for_load_state("load")
                args.out.parent.mkdir(parents=True, exist_ok=True)
                if args.height:
                    page.screenshot(path=str(args.out), full_page=True, clip={
                        "x": 0, "y": 0, "width": args.width, "height": args.height})
                else:
                    page.screenshot(path=str(args.out), full_page=True)
                context.close()
        finally:
            server.shutdown()
    print(f"render_saved_page: {args.out}")


if __name__ == "__main__":
    main()
