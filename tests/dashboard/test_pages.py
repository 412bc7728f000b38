"""The dashboard's pages as HTML, server-side: empty states that explain themselves, error
pages (not JSON, not tracebacks) for unknown ids and bad input, reads that follow the
server's public-reads rule, Plotly served by the app, and seeded pages with their data."""

from __future__ import annotations

import html as html_lib
import json
import random
import re
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.config import Settings
from app.dashboard import evidence as evidence_view
from app.dashboard import figures
from app.db import get_engine
from app.main import create_app
from app.schemas import ResultIngest
from app.services.results import ingest_result
from devkit.dashboard_seed import TRACKS, Seeded, document


def html(response_text: str) -> str:
    """The page's text without tags, whitespace collapsed (what a reader sees)."""
    return html_lib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response_text)))


def figure(page: str, element_id: str) -> dict:
    match = re.search(rf'<script type="application/json" id="{element_id}-data">(.*?)</script>',
                      page, re.S)
    assert match, f"no figure {element_id} on the page"
    return json.loads(match.group(1))


@pytest.mark.parametrize(("path", "says"), [
    ("/", "No runs yet: nothing has been measured on this server. Trigger one from CI with "
          "speedwatch submit"),
    ("/runs", "No runs yet: trigger one with speedwatch submit"),
    ("/compare", "No runs yet: trigger one with speedwatch submit"),
    ("/regressions", "No regressions yet. Detection opens one when"),
    ("/workers", "No worker has announced itself in the last 7.0 days: start one with "
                 "speedwatch worker --queues cpu"),
    ("/sweeps", "No sweep yet."),
    ("/environments", "No pinned environment yet:"),
])
def test_every_page_on_an_empty_store_explains_why_it_is_empty(
        pages: TestClient, path: str, says: str) -> None:
    response = pages.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert says in html(response.text)


@pytest.mark.parametrize(("path", "status", "says"), [
    ("/series/resnet50/eager/constant/fp32/bs1/static/cpu/t1/nographs", 404,
     "series 'resnet50/eager/constant/fp32/bs1/static/cpu/t1/nographs' not found"),
    ("/series/resnet50/eager/constant/fp32/bs1/static/cpu/t1/nographs?project=vision", 404,
     "series 'resnet50/eager/constant/fp32/bs1/static/cpu/t1/nographs' not found in project "
     "'vision'"),
    ("/runs/999", 404, "run 999 not found"),
    ("/runs/abc", 422, "run_id"),
    ("/compare?base=1&head=2", 404, "base run 1 not found"),
    ("/compare?base=1", 422, "compare needs both a base and a head run"),
    ("/?batch_size=eight", 422, "'eight' is not a whole number"),
    ("/sweeps/999", 404, "sweep 999 not found"),
    ("/regressions/999", 404, "regression 999 not found"),
])
def test_unknown_ids_and_bad_input_get_an_html_error_page(
        pages: TestClient, path: str, status: int, says: str) -> None:
    response = pages.get(path)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert says in html(response.text)
    assert "Traceback" not in response.text
    assert "Back to the overview" in html(response.text)


def test_plotly_is_served_by_the_app_from_the_installed_package(pages: TestClient) -> None:
    response = pages.get("/static/plotly.min.js")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    packaged = (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    assert response.content == packaged
    page = pages.get("/").text
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert scripts == ["/static/plotly.min.js", "/static/dashboard.js"]  # nothing remote


def test_without_public_reads_a_page_needs_a_read_token_cookie(
        settings: Settings, clean_db: None, read_token: str) -> None:
    private = settings.model_copy(update={"public_reads": False})
    with TestClient(create_app(private)) as client:
        refused = client.get("/regressions")
        assert refused.status_code == 401
        assert "paste a token with the 'read' scope" in html(refused.text)
        client.cookies.set("speedwatch_token", "sw_not-a-real-token")
        assert client.get("/regressions").status_code == 401
        client.cookies.set("speedwatch_token", read_token)
        assert client.get("/regressions").status_code == 200


def rows_of(chart: dict[str, Any]) -> list[str]:
    """Every row label of a dot chart, whatever trace (weight representation) draws it."""
    return [label for trace in chart["data"] for label in trace["y"]]


def test_each_weight_representation_has_one_colour_on_every_chart_and_sparkline(
        pages: TestClient, seeded: Seeded) -> None:
    palette = figures.WEIGHT_COLOURS
    overview = pages.get("/").text
    for trace in figure(overview, "overview-chart")["data"]:
        weights = trace["name"].removeprefix("weights ")
        assert trace["marker"]["color"] == palette[weights], trace["name"]
        assert all(f"/{weights}/" in label for label in trace["y"])
    assert {t["name"] for t in figure(overview, "overview-chart")["data"]} == {
        "weights constant", "weights tensor"}
    # a regression shows by its symbol, its colour stays its representation's
    regressed = next(t for t in figure(overview, "overview-chart")["data"]
                     if seeded.regressed_key in t["y"])
    assert regressed["marker"]["symbol"][regressed["y"].index(seeded.regressed_key)] == "x"
    sparks = re.findall(r'data-key="[^"]*/(constant|tensor)/[^"]*".*?class="sparkline"'
                        r'.*?<polyline fill="none" stroke="(#[0-9a-f]{6})"', overview, re.S)
    assert sparks and all(colour == palette[w] for w, colour in sparks), sparks
    series = figure(pages.get(f"/series/{seeded.regressed_key}").text, "series-chart")
    for trace in series["data"]:
        if str(trace.get("name", "")).startswith("weights "):
            weights = trace["name"].removeprefix("weights ")
            assert trace["line"]["color"] == palette[weights]
    run = figure(pages.get(f"/runs/{seeded.run_ids[-1]}").text, "run-chart")
    for trace in run["data"]:
        assert trace["marker"]["color"] == palette[trace["name"].removeprefix("weights ")]
    css = pages.get("/static/dashboard.css").text  # the weights labels in tables
    for weights, colour in palette.items():
        assert f".w-{weights} {{ color: {colour}; }}" in css
    status = {figures.REGRESSION_COLOUR, figures.IMPROVEMENT_COLOUR, "#e67e22"}
    assert not status & set(palette.values())  # a weight colour never reads as a status


def test_sparklines_can_share_one_scale_so_their_heights_compare(
        pages: TestClient, seeded: Seeded) -> None:
    def scales(page: str) -> list[tuple[float, float]]:
        return [(float(lo), float(hi)) for lo, hi in
                re.findall(r'class="sparkline"[^>]*data-low="([^"]+)" data-high="([^"]+)"',
                           page)]

    own = scales(pages.get("/").text)
    assert len(own) >= 3 and len(set(own)) > 1  # by default each fills its own height
    page = pages.get("/", params={"scale": "shared"}).text
    shared = scales(page)
    assert len(shared) == len(own) and len(set(shared)) == 1
    assert shared[0] == (min(lo for lo, _ in own), max(hi for _, hi in own))
    assert '<option value="shared" selected>' in page  # the choice stays with the filters
    refused = pages.get("/", params={"scale": "log"})
    assert refused.status_code == 422 and "scale" in refused.text


def test_the_overview_lists_open_regressions_first_with_status_ci_and_sparkline(
        pages: TestClient, seeded: Seeded) -> None:
    page = pages.get("/").text
    keys = re.findall(r'<tr class="series-row status-([a-z-]+)" data-key="([^"]+)"', page)
    assert keys[0] == ("regression", seeded.regressed_key)
    assert keys[-1] == ("no-data", seeded.skipped_key)
    assert {status for status, _ in keys[1:-1]} == {"ok"}
    assert page.count('class="sparkline"') == len(keys) - 1  # no sparkline without data
    assert "1.91x" in page  # the regressed series' latest speedup with its CI
    chart = figure(page, "overview-chart")
    assert seeded.regressed_key in rows_of(chart)
    filtered = pages.get("/", params={"weights": "tensor", "backend": "torch_tensorrt"}).text
    assert re.findall(r'data-key="([^"]+)"', filtered) == [seeded.regressed_key]
    # a project's name filters the overview to that project
    projects = set(re.findall(r'data-project="([^"]+)"', page))
    for name in projects:
        assert f'<a href="/?project={name}"' in page
        only = pages.get("/", params={"project": name}).text
        assert set(re.findall(r'data-project="([^"]+)"', only)) == {name}


def test_the_series_page_overlays_both_weight_representations_and_marks_the_regression(
        pages: TestClient, seeded: Seeded) -> None:
    page = pages.get(f"/series/{seeded.regressed_key}").text
    speedup = figure(page, "series-chart")
    names = [trace.get("name") for trace in speedup["data"]]
    assert {"weights tensor", "weights constant", "regression"} <= set(names)
    marked = next(t for t in speedup["data"] if t.get("name") == "regression")
    assert marked["x"] == ["r110"]  # where torch-tensorrt 2.7.0 came in
    change_lines = [s for s in speedup["layout"]["shapes"] if s.get("x0") == "r110"]
    assert len(change_lines) == 1
    # the change table and the API's /changes come from one service function
    changes = pages.get(f"/api/v1/series/{seeded.regressed_key}/changes").json()["changes"]
    assert [c["revision"] for c in changes] == ["r110"]
    assert "<td>torch 2.6.0 -&gt; 2.7.0; torch-tensorrt 2.6.0 -&gt; 2.7.0</td>" in page
    hover = next(t for t in speedup["data"] if t.get("name") == "weights tensor")["customdata"]
    assert "torch-tensorrt 2.7.0" in hover[-1][1]
    latency = figure(page, "latency")
    assert {t["name"] for t in latency["data"]} == {
        "eager (weights tensor)", "optimized (weights tensor)",
        "eager (weights constant)", "optimized (weights constant)"}
    assert "kernels per inference 58 -&gt; 161" in page  # the evidence sentence
    assert 'data-action="acknowledge"' in page


def test_the_series_page_marks_host_drift_apart_from_regressions(
        pages: TestClient, seeded: Seeded, public_settings: Settings) -> None:
    """A point whose verdict found the baseline's very software, moved past the threshold,
    is the host's drift: a ring of its own on the chart, saying so and naming the runner."""
    from sqlalchemy import select

    from app.models import Cell, Result, Run, Series

    with Session(get_engine(public_settings)) as session:
        series = session.scalars(select(Series).where(Series.key == seeded.regressed_key)).one()
        row = session.scalars(select(Result).where(Result.series_id == series.id)
                              .order_by(Result.id)).all()[2]
        revision = session.get(Run, row.run_id).revision  # type: ignore[union-attr]
        cell = session.get(Cell, row.cell_id)
        assert cell is not None
        cell.judgement = {"verdict": "pass", "host_drift": True, "reasons": [
            "same software as the previous run on the branch (r1): the measured -6.0% [-7.0%, "
            "-5.0%] is beyond what this host's noise explains: host drift on runner ci-7"]}
        session.commit()
    chart = figure(pages.get(f"/series/{seeded.regressed_key}").text, "series-chart")
    drift = next(t for t in chart["data"] if t.get("name") == "host drift")
    assert drift["x"] == [revision]
    assert "host drift on runner ci-7" in drift["text"][0]
    regression = next(t for t in chart["data"] if t.get("name") == "regression")
    assert revision not in regression["x"]


def test_the_run_page_shows_what_the_evidence_changed_since_the_baseline_and_all_behind_a_toggle(
        pages: TestClient, seeded: Seeded) -> None:
    regression = pages.get("/api/v1/regressions").json()["items"][0]
    page = pages.get(f"/runs/{regression['opened_by_run_id']}").text
    cells = re.findall(r'<div class="small evidence">(.*?)</div>\s*<div class="small reason">',
                       page, re.S)
    diffs = [re.sub(r"<details.*?</details>", "", c, flags=re.S) for c in cells]
    changed = [d for d in diffs if "evidence-diff" in d]
    assert len(changed) == 1  # only the series that regressed changed structurally
    run = pages.get(f"/api/v1/runs/{regression['opened_by_run_id']}").json()
    judged = next(c["judgement"] for c in run["cells"]
                  if c["series_key"] == regression["series_key"])
    assert judged["baseline_result_id"] == regression["baseline_result_id"]  # the API says so
    rows = re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">([^<]+)</td></tr>", changed[0])
    assert rows == [("kernels per inference", "58 &rarr; 161"),
                    ("trt layer count", "46 &rarr; 149")]
    # timings, processes and compile seconds differ on every run: never listed as changes
    table = changed[0].split("</table>")[0]
    assert not any(word in table for word in ("adaptive", "processes", "compile"))
    assert sum("same as the baseline" in d for d in diffs) == len(diffs) - 2  # + the skipped
    # the full evidence is one click away
    assert all("<details class=\"evidence-all\"><summary>all evidence (" in c
               for c in cells if "same as the baseline" in c or "evidence-diff" in c)


def test_evidence_changes_name_entries_added_removed_and_changed() -> None:
    from app.dashboard.evidence import EvidenceChange, evidence_changes

    before = {"kernels": 58, "onnx_node_counts": {"Conv": 20, "BatchNormalization": 20},
              "adaptive": {"processes": 3}, "graph_breaks": 0}
    after = {"kernels": 161, "onnx_node_counts": {"Conv": 20},
             "adaptive": {"processes": 5}, "graph_breaks": 0, "fallback": "eager"}
    assert evidence_changes(before, after) == [
        EvidenceChange("fallback", None, "eager"),
        EvidenceChange("kernels", "58", "161"),
        EvidenceChange("onnx_node_counts.BatchNormalization", "20", None)]
    assert evidence_changes(before, before) == []


def test_the_run_page_shows_cells_results_reasons_fingerprint_and_evidence(
        pages: TestClient, seeded: Seeded) -> None:
    text = html(pages.get(f"/runs/{seeded.run_ids[-1]}").text)
    assert "7 of 7 cells finished" in text
    assert "gpu NVIDIA H200" in text and "driver 570.86.15" in text
    assert "as installed: tensorrt 10.9.0, torch 2.7.0, torch-tensorrt 2.7.0" in text
    assert "kernels per inference: 161" in text
    assert "refittable engines need TensorRT >= 10 on this worker" in text
    live = pages.get(f"/runs/{seeded.queued_run_id}").text
    assert f'data-live-run="{seeded.queued_run_id}"' in live
    assert "no cell has a measured speedup yet" in html(live)


def test_compare_defaults_to_the_two_newest_finished_runs(
        pages: TestClient, seeded: Seeded) -> None:
    page = pages.get("/compare").text
    base, head = seeded.run_ids[-2], seeded.run_ids[-1]
    assert f'<option value="{base}" selected>' in page
    assert f'<option value="{head}" selected>' in page
    assert len(figure(page, "compare-chart")["data"][0]["y"]) == 6
    across = html(pages.get("/compare", params={"base": seeded.run_ids[9],
                                                "head": seeded.run_ids[10]}).text)
    assert "significant (CIs disjoint)" in across


def test_a_chart_without_points_says_why() -> None:
    chart = figures.speedup_figure([figures.SeriesTrace("constant", [])])
    assert chart.figure is None
    assert chart.empty_reason and "no measured points yet" in chart.empty_reason
    assert figures.sparkline_svg([1.5]) == ""
    sweep = figures.sweep_figure(["1.0"], [("constant", [])], package="onnxruntime",
                                 empty_reason="no release has a measured speedup yet")
    assert (sweep.figure, sweep.empty_reason) == (None, "no release has a measured speedup yet")


def test_a_sweep_chart_puts_every_release_on_the_x_axis_in_release_order_with_cis() -> None:
    """Releases are categories in the sweep's order (1.10.0 after 1.9.0, a release with no
    point keeps its place); each weight representation is a line with CI whiskers, and
    the strings in it are Plotly text, not markup."""
    order = ["1.9.0", "1.10.0", "1.11.0"]
    point = figures.VersionPoint
    chart = figures.sweep_figure(order, [
        ("constant", [point("1.9.0", 2.0, 1.9, 2.1), point("1.11.0", 2.2, 2.1, 2.3, "<b>x")]),
        ("tensor", [point("1.9.0", 1.5, 1.4, 1.6)]),
    ], package="onnxruntime", empty_reason="-")
    assert chart.figure is not None
    layout, data = chart.figure["layout"], chart.figure["data"]
    assert layout["xaxis"]["categoryarray"] == order
    lines = [t for t in data if t.get("mode") == "lines+markers"]
    assert [t["name"] for t in lines] == ["weights constant", "weights tensor"]
    assert lines[0]["x"] == ["1.9.0", "1.11.0"]
    assert [round(v, 6) for v in lines[0]["error_y"]["array"]] == [0.1, 0.1]
    assert lines[0]["customdata"][1][2] == "&lt;b&gt;x"


def test_a_long_history_draws_its_newest_points_raw_and_older_ones_as_bucket_means(
        pages: TestClient, seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.dashboard import routes

    monkeypatch.setattr(routes, "SERIES_POINT_LIMIT", 10)
    monkeypatch.setattr(routes, "HISTORY_BUCKETS", 3)
    page = pages.get(f"/series/{seeded.steady_key}").text
    assert "the 6 older ones as means of consecutive groups" in html(page)
    line = next(t for t in figure(page, "series-chart")["data"]
                if t.get("name") == "weights constant")
    assert line["x"] == ["r100…r101", "r102…r103", "r104…r105",
                         *(f"r{n}" for n in range(106, 116))]
    assert line["customdata"][0][1] == "mean of 2 results (older history, summarised)"


def test_a_key_two_projects_measure_has_one_page_per_project_overlaying_only_its_own(
        pages: TestClient, seeded: Seeded, public_settings: Settings) -> None:
    # project "audio" measures the steady constant-weights series of "vision" once
    result = document(TRACKS[0], 0, "2.5.0", random.Random(1))
    with Session(get_engine(public_settings), expire_on_commit=False) as session:
        ingest_result(session, ResultIngest.model_validate({
            "project": "audio", "revision": "a1", "environment": {"pins": []},
            "result": result.to_dict()}), public_settings)
        session.commit()
    key = seeded.steady_key

    ambiguous = pages.get(f"/series/{key}")
    assert ambiguous.status_code == 422
    assert "exists in several projects (audio, vision)" in html(ambiguous.text)
    audio = pages.get(f"/series/{key}", params={"project": "audio"}).text
    assert f"<title>{key} · audio" in audio
    assert f"{key} in project audio" in html(audio)
    names = {t.get("name") for t in figure(audio, "series-chart")["data"]}
    assert "weights constant" in names and "weights tensor" not in names  # vision's sibling
    vision = pages.get(f"/series/{key}", params={"project": "vision"}).text
    assert "weights tensor" in {t.get("name") for t in figure(vision, "series-chart")["data"]}

    overview = pages.get("/").text
    rows = re.findall(r'data-key="([^"]+)" data-project="([^"]+)"', overview)
    assert (key, "audio") in rows and (key, "vision") in rows
    assert f'href="/series/{key}?project=audio"' in overview
    assert '<option value="audio" ' in overview  # the project filter's choices
    assert f"{key} (audio)" in rows_of(figure(overview, "overview-chart"))
    only_audio = pages.get("/", params={"project": "audio"}).text
    assert re.findall(r'data-project="([^"]+)"', only_audio) == ["audio"]


def test_every_link_to_a_series_page_names_its_project(
        pages: TestClient, seeded: Seeded) -> None:
    for path in ("/", "/regressions", f"/runs/{seeded.run_ids[-1]}", "/compare",
                 f"/series/{seeded.regressed_key}?project=vision"):
        links = re.findall(r'href="(/(?:api/v1/)?series/[^"]*)"', pages.get(path).text)
        assert links, path
        assert all("?project=vision" in link for link in links), (path, links)


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_labels_are_shown_as_text_in_charts_never_as_plotly_markup(
        pages: TestClient, seeded: Seeded, public_settings: Settings) -> None:
    # Plotly draws its own mini-HTML (<a href>, <b>) in axes and hovers; Jinja does not
    # escape inside a figure's JSON, so a revision could become a link out of the chart.
    link = "<a href='https://evil.example'>click me</a>"
    result = document(TRACKS[0], 0, "2.5.0", random.Random(3))
    result.fingerprint["packages"]["torch"] = "<b>2.9</b>"
    with Session(get_engine(public_settings), expire_on_commit=False) as session:
        ingest_result(session, ResultIngest.model_validate({
            "project": "vision", "revision": link, "environment": {"pins": []},
            "result": result.to_dict()}), public_settings)
        session.commit()
    page = pages.get(f"/series/{seeded.steady_key}", params={"project": "vision"}).text
    for element in ("series-chart", "latency"):
        chart = figure(page, element)
        drawn = [s for trace in chart["data"] for s in _strings(
            {k: trace.get(k) for k in ("x", "y", "text", "customdata")})]
        drawn += list(_strings(chart["layout"]))
        assert "&lt;a href='https://evil.example'&gt;click me&lt;/a&gt;" in drawn, element
        assert not [s for s in drawn if "<a" in s or "<b>" in s], element
    hover = next(t for t in figure(page, "series-chart")["data"]
                 if t.get("name") == "weights constant")["customdata"]
    assert any("torch &lt;b&gt;2.9&lt;/b&gt;" in row[1] for row in hover)


def test_the_workers_page_shows_each_workers_state_queues_gpus_and_a_queue_nobody_serves(
        pages: TestClient, seeded: Seeded, public_settings: Settings) -> None:
    from datetime import datetime, timedelta, timezone

    from app.services.workers import Announcement, heartbeat

    h200 = {"index": 1, "name": "NVIDIA H200", "device_class": "nvidia-h200",
            "memory_total_bytes": 150_754_820_096}
    with Session(get_engine(public_settings), expire_on_commit=False) as session:
        heartbeat(session, Announcement(name="speedwatch-gpu@gpu-7", host="gpu-7", pid=11,
                                        queues=["gpu"], interpreters=["trt-2.7"], gpus=[h200]))
        heartbeat(session, Announcement(name="speedwatch-cpu@old", host="old", pid=12,
                                        queues=["cpu"]),
                  now=datetime.now(timezone.utc) - timedelta(hours=2))
        session.commit()

    page = pages.get("/workers").text
    text = html(page)

    assert re.search(r'data-worker="speedwatch-gpu@gpu-7" data-state="alive"', page)
    assert re.search(r'data-worker="speedwatch-cpu@old" data-state="lost"', page)
    assert "1: NVIDIA H200 (140 GiB)" in text and "trt-2.7" in text
    # the seeded store has a queued cpu run and no live cpu worker
    assert re.search(r'<tr data-queue="cpu" class="warn">', page)
    assert "no live worker" in text


def test_a_queued_run_says_when_no_live_worker_consumes_its_queue(
        pages: TestClient, seeded: Seeded, public_settings: Settings) -> None:
    page = pages.get(f"/runs/{seeded.queued_run_id}").text
    assert "which no live worker consumes: start one with speedwatch worker --queues cpu" in (
        html(page))

    from app.services.workers import Announcement, heartbeat

    with Session(get_engine(public_settings), expire_on_commit=False) as session:
        heartbeat(session, Announcement(name="cpu@h", host="h", pid=1, queues=["cpu"]))
        session.commit()
    assert "no live worker" not in html(pages.get(f"/runs/{seeded.queued_run_id}").text)


def test_the_run_page_shows_each_cells_speedup_before_and_after_with_the_change(
        pages: TestClient, seeded: Seeded) -> None:
    text = html(pages.get(f"/runs/{seeded.run_ids[-1]}").text)
    assert re.search(r"\d+\.\d\dx → \d+\.\d\dx \([+-]\d+\.\d% \[[+-]\d+\.\d, [+-]\d+\.\d\]\)",
                     text), text[:2000]


def test_the_fingerprint_is_summarised_as_what_matters_with_unreported_entries_left_out() -> None:
    from app.dashboard.evidence import fingerprint_summary

    cpu_host = {"cpu": "AMD EPYC", "cpu_count": 2, "cuda": None, "cudnn": None, "gpu": None,
                "driver": None, "device_class": "cpu", "python": "3.11.7", "torch_threads": 1,
                "backend_versions": {"onnxruntime": "1.23.2", "tensorrt": None},
                "hostname": "vm", "platform": "Linux-6.8", "implementation": "CPython",
                "host_load": {"other_cores": 1.054, "peak_cores": 1.234, "loaded": True,
                              "threshold": 0.5, "units": 9, "units_loaded": 9}}
    rows = dict(fingerprint_summary(cpu_host))
    assert list(rows) == ["cpu", "cores", "device class", "versions", "python", "threads",
                          "host load", "host"]
    assert rows["versions"] == "onnxruntime 1.23.2"
    assert rows["host load"] == ("1.05 cores used by other processes (peak 1.23); 9 of 9 units "
                                 "past the 0.5-core threshold: marked busy")
    assert "None" not in " ".join(rows.values())
    gpu_host = {"gpu": "NVIDIA H100", "driver": "580.1", "cuda": "13.0", "cpu": "Xeon",
                "cpu_count": 16}
    assert [name for name, _ in fingerprint_summary(gpu_host)] == ["gpu", "driver", "cuda"]


def test_each_sides_timing_window_and_timestamps_are_bookkeeping_not_changes() -> None:
    from app.dashboard.evidence import evidence_changes

    def evidence(started: str, median: float) -> dict[str, object]:
        return {"sides": {"baseline": {"started_at": started, "median_ms": median,
                                       "window": [1.0, 2.0]}},
                "optimized_node_counts": {"Conv": 53}}

    assert evidence_changes(evidence("2026-11-26T04:01", 116.8),
                            evidence("2026-11-26T04:07", 119.3)) == []


@pytest.mark.parametrize(("verdict", "status", "shown"), [
    ("pass", "done", "ok"), ("regression", "done", "bad"), ("inconclusive", "done", "warn"),
    (None, "skipped", "warn"), (None, "failed", "bad"), ("suspect", "done", "warn"),
])
def test_a_cells_colour_follows_its_outcome_so_a_pass_is_never_red(
        verdict: str | None, status: str, shown: str) -> None:
    from app.dashboard.evidence import outcome

    assert outcome(verdict, status) == shown


def test_the_run_page_colours_each_reason_by_its_cells_outcome(
        pages: TestClient, seeded: Seeded) -> None:
    regression = pages.get("/api/v1/regressions").json()["items"][0]
    page = pages.get(f"/runs/{regression['opened_by_run_id']}").text
    reasons = re.findall(r'<li class="outcome-(\w+)">([^<]+)</li>', page)
    assert {o for o, r in reasons if r.startswith(regression["series_key"] + ":")} == {"bad"}
    assert any(o == "ok" for o, _ in reasons)  # the cells that passed are not red
    assert 'class="cell outcome-bad"' in page and 'class="cell outcome-ok"' in page


def test_a_cell_says_whether_its_processes_built_or_loaded_the_candidate_and_how_long() -> None:
    def processes(*builds: dict[str, Any]) -> dict[str, Any]:
        return {"processes": [{"build": b} for b in builds]}

    built = {"source": "built", "seconds": 18.72}
    assert evidence_view.build_summary(processes(
        built, {"source": "loaded", "seconds": 13.1}, {"source": "loaded", "seconds": 13.44},
    )) == "built 18.7 s, then loaded 2x (13.1-13.4 s)"
    assert evidence_view.build_summary(processes(
        *[{"source": "loaded", "seconds": 6.2}] * 3)) == "loaded 3x (6.2 s)"
    refused = {"source": "built", "seconds": 20.0, "refused": "the loaded build's fingerprint "
               "a is not the stored build's b: entry k removed, built afresh"}
    assert "refused a stored build: the loaded build's fingerprint a" in str(
        evidence_view.build_summary(processes(refused)))
    # a backend that loads in two ways says which, and why the quicker one was not taken
    program = {"source": "loaded", "seconds": 2.1, "via": "program"}
    assert evidence_view.build_summary(processes(built, program, program)) == \
        "built 18.7 s, then loaded 2x (2.1 s) from its kept program"
    fallback = {"source": "loaded", "seconds": 9.8, "via": "caches",
                "note": "its kept program was refused (built for cuda:1)"}
    assert evidence_view.build_summary(processes(program, fallback)) == (
        "loaded 2x (2.1-9.8 s) through inductor's caches and from its kept program; "
        "its kept program was refused (built for cuda:1)")
    # older results and results without a candidate say nothing
    assert evidence_view.build_summary({"processes": [{"speedup": 1.2}]}) is None
    assert evidence_view.build_summary(None) is None
