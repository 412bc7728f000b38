"""The dashboard in real headless Chromium (Debian's, driven by Playwright) against a real
uvicorn process on PostgreSQL with a seeded history: every page loads with its data, its
Plotly chart renders as SVG, the console stays clean, and a regression is acknowledged from
the page with a ci token typed into the token field.

Chromium missing is an error, not a skip: scripts/test installs it, and CI must not go
green without having run these.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import get_engine, session_scope
from app.services.tokens import create_token
from devkit.browser import launch
from devkit.dashboard_seed import Seeded, seed
from tests.dashboard.conftest import truncate_all

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    url: str
    seeded: Seeded
    ci_token: str


@pytest.fixture(scope="module")
def served(pg_url: str) -> Iterator[Served]:
    settings = Settings(database_url=pg_url, executor="none", public_reads=True)
    truncate_all(get_engine(settings))
    with Session(get_engine(settings), expire_on_commit=False) as session:
        seeded = seed(session, settings)
    with session_scope(settings) as session:
        _, ci_token = create_token(session, "ci", "dashboard-browser-test")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = {**os.environ, "SPEEDWATCH_DATABASE_URL": pg_url, "SPEEDWATCH_EXECUTOR": "none",
           "SPEEDWATCH_PUBLIC_READS": "true", "SPEEDWATCH_ENVIRONMENT": "development"}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host",
         "127.0.0.1", "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/static/dashboard.css", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, "uvicorn exited before serving"
            assert time.monotonic() < deadline, "uvicorn did not serve within 30 s"
            time.sleep(0.2)
        yield Served(url, seeded, ci_token)
    finally:
        server.terminate()
        server.wait(timeout=10)
        truncate_all(get_engine(settings))


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = launch(playwright, Path(profile))
        yield context
        context.close()


@dataclass
class Watched:
    page: Page
    problems: list[str] = field(default_factory=list)


@pytest.fixture
def tab(browser: BrowserContext) -> Iterator[Watched]:
    """A new tab that records console errors, page exceptions and failed requests."""
    page = browser.new_page()
    watched = Watched(page)
    page.on("console", lambda m: watched.problems.append(f"console: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: watched.problems.append(f"exception: {e}"))
    page.on("requestfailed", lambda r: watched.problems.append(f"failed: {r.url}"))
    page.on("response", lambda r: watched.problems.append(f"HTTP {r.status}: {r.url}")
            if r.status >= 400 else None)
    yield watched
    page.close()


def _pages(seeded: Seeded) -> dict[str, tuple[str, str, str]]:
    """name -> (path, chart element id, text the page must show)."""
    return {
        "overview": ("/", "overview-chart", seeded.regressed_key),
        "series": (f"/series/{seeded.regressed_key}", "series-chart",
                   "kernels per inference 58 -> 161"),
        "compare": ("/compare", "compare-chart", "within noise"),
        "run": (f"/runs/{seeded.run_ids[-1]}", "run-chart", "7 of 7 cells finished"),
        "regressions": ("/regressions", "regressions-chart", seeded.regressed_key),
    }


@pytest.mark.parametrize("name", ["overview", "series", "compare", "run", "regressions"])
def test_each_page_loads_with_data_and_draws_its_chart_without_console_errors(
        served: Served, tab: Watched, name: str) -> None:
    path, chart_id, shows = _pages(served.seeded)[name]
    tab.page.goto(served.url + path)
    chart = tab.page.locator(f"#{chart_id}")
    chart.locator("svg.main-svg").first.wait_for(state="visible", timeout=15_000)
    assert "js-plotly-plot" in (chart.get_attribute("class") or "")
    chart.locator("g.trace").first.wait_for(state="attached", timeout=15_000)  # data drawn
    assert shows in tab.page.inner_text("main")
    # nothing wider than the 1400 px window: no horizontal scrollbar
    assert tab.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert tab.problems == []


def test_the_series_page_switches_to_raw_latencies_and_back(
        served: Served, tab: Watched) -> None:
    tab.page.goto(f"{served.url}/series/{served.seeded.regressed_key}")
    chart = tab.page.locator("#series-chart")
    chart.locator("svg.main-svg").first.wait_for(state="visible", timeout=15_000)
    assert "speedup over eager" in chart.inner_text()
    tab.page.click("#toggle-latency")
    tab.page.wait_for_function(
        "document.querySelector('#series-chart').innerText.includes('median latency')")
    assert "optimized (weights tensor)" in chart.inner_text()
    tab.page.click("#toggle-latency")
    tab.page.wait_for_function(
        "document.querySelector('#series-chart').innerText.includes('speedup over eager')")
    assert tab.problems == []


def test_a_regression_is_acknowledged_from_the_page_with_a_ci_token(
        served: Served, tab: Watched) -> None:
    regression_id = served.seeded.regression_id
    page = tab.page
    page.goto(f"{served.url}/regressions")
    row = page.locator(f"#regression-{regression_id}")
    row.locator("button[data-action=acknowledge]").click()
    assert "paste a token with the ci scope" in row.locator(".act-msg").inner_text()

    page.fill("#token-input", "sw_not-a-token")
    page.click("#token-form button[type=submit]")
    # expect() polls from Playwright's own world: a predicate string would be an eval,
    # which the page's content security policy refuses
    expect(page.locator("#token-state")).to_have_text(
        re.compile(r"^not saved: invalid or revoked token"))
    tab.problems.clear()  # the refused token's 401, asked for above
    page.fill("#token-input", served.ci_token)
    page.click("#token-form button[type=submit]")
    expect(page.locator("#token-state")).to_have_text("saved for this tab")
    # the pages' cookie is the server's: HttpOnly, so no script on the page reads it
    cookie, = (c for c in page.context.cookies() if c["name"] == "speedwatch_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["value"] == served.ci_token
    assert "speedwatch_token" not in page.evaluate("document.cookie")
    row.locator("button[data-action=acknowledge]").click()
    page.wait_for_selector(f"#regression-{regression_id}[data-status=acknowledged]")
    assert "by dashboard-browser-test" in row.inner_text()
    assert row.locator("button[data-action=acknowledge]").count() == 0

    stored = httpx.get(f"{served.url}/api/v1/regressions/{regression_id}").json()
    assert stored["status"] == "acknowledged"
    assert stored["acknowledged_by"] == "dashboard-browser-test"
    page.reload()  # the server renders the new state, and the token stays for the tab
    assert page.locator(f"#regressions-acknowledged #regression-{regression_id}").count() == 1
    assert page.inner_text("#token-state") == "saved for this tab"
    page.click("#token-clear")
    expect(page.locator("#token-state")).to_have_text("none saved")
    page.wait_for_timeout(200)  # the forget request's answer
    assert not [c for c in page.context.cookies() if c["name"] == "speedwatch_token"]
    assert tab.problems == []
