"""What `plotly_text` is for, checked in real Chromium with the Plotly the app serves: a label
with tags drawn raw becomes a live link in the axis; escaped, it is the same text, inert."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from app.dashboard.figures import plotly_text
from devkit.browser import launch

pytestmark = pytest.mark.slow
LINK = "<a href='https://evil.example'>click me</a>"


def _ticks_and_links(tmp_path: Path, label: str) -> tuple[list[str], list[str]]:
    plotly = (resources.files("plotly") / "package_data" / "plotly.min.js").read_text()
    figure = {"data": [{"type": "scatter", "x": [label, "r2"], "y": [1.0, 2.0]}],
              "layout": {"xaxis": {"type": "category"}}}
    page_file = tmp_path / "chart.html"
    page_file.write_text(f"<html><body><div id='chart'></div><script>{plotly}</script><script>"
                         f"const f = {json.dumps(figure)};"
                         "Plotly.newPlot('chart', f.data, f.layout);</script></body></html>")
    with sync_playwright() as playwright:
        context = launch(playwright, tmp_path / "profile")
        try:
            page = context.new_page()
            page.goto(page_file.as_uri())
            page.wait_for_selector("#chart .xtick text")
            ticks = page.eval_on_selector_all("#chart .xtick text",
                                              "nodes => nodes.map(n => n.textContent)")
            links = page.eval_on_selector_all("#chart .xtick a", "nodes => nodes.map(n => "
                                              "n.getAttribute('href') || "
                                              "n.getAttribute('xlink:href'))")
        finally:
            context.close()
    return ticks, links


def test_a_raw_label_with_a_link_becomes_a_link_in_plotlys_axis(tmp_path: Path) -> None:
    ticks, links = _ticks_and_links(tmp_path, LINK)
    assert ticks[0] == "click me" and links == ["https://evil.example"]


def test_an_escaped_label_is_shown_as_its_own_text_and_links_nowhere(tmp_path: Path) -> None:
    ticks, links = _ticks_and_links(tmp_path, plotly_text(LINK))
    assert ticks[0] == LINK and links == []
