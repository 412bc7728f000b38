"""The dashboard's pages: overview, series, compare, runs, one run, regressions (and one
regression with its bisects), sweeps (and one sweep or bisect), environments.

Server-rendered with Jinja2 on the same services as the API (no SQL of its own), charts
drawn by Plotly.js, which the app serves from the installed `plotly` package so the pages
work offline. Reads follow the API's rule: open when the server has public reads, else a
`read` token, which the page's token field keeps in a cookie; a token limited to projects
sees those projects only, as in the API (lists leave the others out, their runs and series
are "not found"). Writes (acknowledge, resolve) go from the page's JavaScript to the API
with the token as a bearer header.

Errors (unknown series or run, bad query, missing token) are HTML pages with the reason,
never a JSON body or a traceback in the browser.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import FileResponse, HTMLResponse
from markupsafe import Markup
from sqlalchemy.orm import Session

from app.api.deps import SessionDep, SettingsDep
from app.config import Settings
from app.dashboard import evidence as evidence_view
from app.detection.changepoints import ChangePoint
from app.errors import (
    InvalidRequest,
    NotFound,
)
from app.models import RUN_TERMINAL, Cell, Regression, Result, Run, Series
from app.schemas import ID_MAX
from app.services import environments as environment_service
from app.services import profiles as profile_service
from app.services import regressions as regression_service
from app.services import runs as run_service
from app.services import series as series_service
from app.services import sweeps as sweep_service
from app.services import workers as worker_service
from app.services.changes import AttributedChange, attribute_changes
from app.services.series import Point, SeriesFilter
from app.services.tokens import (
    ProjectAccess,
)

from . import figures
from .page_kit import (
    PageAccess,
    PageRoute,
    _page,
    _row_id,
)

HERE = Path(__file__).resolve().parent
OVERVIEW_LIMIT = 500
SPARKLINE_POINTS = 30
# The series page draws this many of the newest points raw and the older history in
# HISTORY_BUCKETS means (the API serves every raw point): 10k raw points made the page
# 2.5 MB and its p95 740 ms on this machine (scripts/bench_dashboard.py).
SERIES_POINT_LIMIT = 1_000
HISTORY_BUCKETS = 250
# Change points are searched in the newest points only: the search is O(n^2) and the recent
# history is where a person looks for what changed.
CHANGEPOINT_WINDOW = 500
RUN_LIST_LIMIT = 100
REGRESSION_LIST_LIMIT = 100

router = APIRouter(route_class=PageRoute, include_in_schema=False,
                   default_response_class=HTMLResponse)


# ---- assets --------------------------------------------------------------------------------

def _plotly_js() -> Path:
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


@router.get("/static/plotly.min.js")
def plotly_js() -> FileResponse:
    return FileResponse(_plotly_js(), media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})


@router.get("/static/dashboard.{name}")
def dashboard_asset(name: str) -> FileResponse:
    media = {"js": "text/javascript", "css": "text/css"}
    if name not in media:
        raise InvalidRequest("path", f"no asset dashboard.{name}")
    return FileResponse(HERE / "static" / f"dashboard.{name}", media_type=media[name],
                        headers={"Cache-Control": "no-cache"})


# ---- overview ------------------------------------------------------------------------------

STATUS_ORDER = {"regression": 0, "acknowledged": 1, "ok": 2, "no data": 3}


@dataclass(frozen=True)
class OverviewRow:
    series: Series
    latest: Point | None
    status: str  # a key of STATUS_ORDER
    regression: Regression | None
    sparkline: Markup


def _active_regressions(session: SessionDep, project: str | None,
                        access: ProjectAccess) -> dict[int, Regression]:
    """Series id -> its active regression (an open one wins over an acknowledged one)."""
    out: dict[int, Regression] = {}
    for status in ("acknowledged", "open"):
        page, _ = regression_service.list_regressions(session, status=status, project=project,
                                                      limit=500, access=access)
        for regression in page:
            out[regression.series_id] = regression
    return out


def _whole_number(text: str) -> bool:
    """ASCII digits naming a number the store's integer columns hold."""
    return text.isascii() and text.isdigit() and int(text) <= ID_MAX


def _filters(values: dict[str, str | None]) -> SeriesFilter:
    clean = {k: (v or None) for k, v in values.items()}
    batch = clean.pop("batch_size")
    if batch is not None and not _whole_number(batch):
        raise InvalidRequest("batch_size", f"{batch[:40]!r} is not a whole number up to {ID_MAX}")
    threads = clean.pop("threads")
    if threads is not None and not (_whole_number(threads)
                                    or threads == series_service.THREADS_AUTO):
        raise InvalidRequest("threads", f"{threads[:40]!r} is not a whole number up to {ID_MAX} "
                                        f"or {series_service.THREADS_AUTO!r}")
    return SeriesFilter(batch_size=int(batch) if batch else None,
                        threads=int(threads) if threads and _whole_number(threads) else threads,
                        **clean)


def _estimate_labels(series: list[Series]) -> list[str]:
    """Chart row labels: the key, with its project where the rows span several projects
    (one key in two projects must stay two rows)."""
    several = len({s.project_id for s in series}) > 1
    return [f"{s.key} ({s.project.name})" if several else s.key for s in series]


@router.get("/")
def overview(
    request: Request,
    session: SessionDep,
    access: PageAccess,
    project: Annotated[str | None, Query(max_length=100)] = None,
    model: Annotated[str | None, Query(max_length=100)] = None,
    backend: Annotated[str | None, Query(max_length=50)] = None,
    weights: Annotated[str | None, Query(max_length=20)] = None,
    precision: Annotated[str | None, Query(max_length=20)] = None,
    batch_size: Annotated[str | None, Query(max_length=10)] = None,
    shape_mode: Annotated[str | None, Query(max_length=20)] = None,
    device_class: Annotated[str | None, Query(max_length=100)] = None,
    threads: Annotated[str | None, Query(max_length=10)] = None,
    timing_mode: Annotated[str | None, Query(max_length=16)] = None,
    scale: Annotated[str | None, Query(max_length=10)] = None,
) -> HTMLResponse:
    if scale not in (None, "", "own", "shared"):
        raise InvalidRequest("scale", f"{scale!r} is not 'own' or 'shared'")
    selected = {"project": project, "model": model, "backend": backend, "weights": weights,
                "precision": precision, "batch_size": batch_size, "shape_mode": shape_mode,
                "device_class": device_class, "threads": threads, "timing_mode": timing_mode}
    filters = _filters(selected)
    found = series_service.list_series(session, filters, limit=OVERVIEW_LIMIT + 1,
                                       access=access)
    truncated = len(found) > OVERVIEW_LIMIT
    found = found[:OVERVIEW_LIMIT]
    active = _active_regressions(session, filters.project, access)
    sparks = series_service.recent_speedups(session, [s.id for s, _ in found],
                                            per_series=SPARKLINE_POINTS)
    shown = [v for values in sparks.values() if len(values) >= 2 for v in values]
    shared = (min(shown), max(shown)) if scale == "shared" and shown else None
    rows = []
    for series, latest in found:
        regression = active.get(series.id)
        if regression is not None:
            status = "regression" if regression.status == "open" else "acknowledged"
        else:
            status = "ok" if latest is not None else "no data"
        spark = figures.sparkline_svg(sparks.get(series.id, []),
                                      colour=figures.weight_colour(series.weights),
                                      scale=shared)
        rows.append(OverviewRow(series, latest, status, regression, Markup(spark)))
    rows.sort(key=lambda r: (STATUS_ORDER[r.status], r.series.key, r.series.project.name))
    measured = [(r, r.latest) for r in rows if r.latest is not None]
    labels = _estimate_labels([r.series for r, _ in measured])
    chart = figures.estimates_figure(
        [figures.Estimate(label, p.speedup, p.ci_low, p.ci_high, r.status, r.series.weights)
         for label, (r, p) in zip(labels, measured, strict=True)],
        empty_reason="no series has a measured point yet",
    )
    any_series = bool(rows) or any(v for v in selected.values())
    return _page(request, "overview.html", rows=rows, chart=chart, truncated=truncated,
                 limit=OVERVIEW_LIMIT, axes=series_service.axis_values(session, access),
                 selected=selected, any_series=any_series, scale=scale or "own",
                 shared=shared,
                 counts={s: sum(1 for r in rows if r.status == s) for s in STATUS_ORDER})


# ---- series --------------------------------------------------------------------------------

def _siblings(session: SessionDep, series: Series) -> list[Series]:
    """The series of the same project that differ from this one only in weight
    representation (another project's, or another timing mode's, never compare)."""
    same = SeriesFilter(project=series.project.name, model=series.model,
                        backend=series.backend, precision=series.precision,
                        batch_size=series.batch_size, shape_mode=series.shape_mode,
                        device_class=series.device_class,
                        threads=series_service.THREADS_AUTO if series.threads is None
                        else series.threads,
                        timing_mode=series.timing_mode, options=series.options)
    return [s for s, _ in series_service.list_series(session, same, limit=10)
            if s.id != series.id]


@router.get("/series/{key:path}")
def series_page(
    key: str, request: Request, session: SessionDep, access: PageAccess,
    project: Annotated[str | None, Query(max_length=100)] = None,
) -> HTMLResponse:
    """One project's series (`?project=`, which may be left out while the key exists in
    one project only, as in the API), with its weight siblings of that project overlaid."""
    series = series_service.get_series(session, key, project, access)
    ordered = [series, *sorted(_siblings(session, series), key=lambda s: s.weights)]
    traces: list[figures.SeriesTrace] = []
    regressions: list[Regression] = []
    change_points: list[tuple[str, ChangePoint]] = []
    change_rows: list[tuple[str, AttributedChange]] = []
    for member in ordered:
        points = series_service.series_points(session, member, limit=SERIES_POINT_LIMIT)
        older = series_service.history_buckets(
            session, member, before=points[0], buckets=HISTORY_BUCKETS,
        ) if len(points) == SERIES_POINT_LIMIT else []
        traces.append(figures.SeriesTrace(member.weights, points, older))
        page, _ = regression_service.list_regressions(
            session, series_key=member.key, project=member.project.name,
            limit=REGRESSION_LIST_LIMIT)
        regressions.extend(page)
        # the API's GET /series/{key}/changes, on the points this page has already read
        found = attribute_changes(points[-CHANGEPOINT_WINDOW:])
        change_points.extend((c.first_after.revision, c.change) for c in found)
        change_rows.extend((member.weights, c) for c in found)
    markers = [figures.Marker(r.opened_by_result_id, r.status, r.evidence) for r in regressions]
    drifted = series_service.host_drift_results(
        session, [p.result_id for t in traces for p in t.points])
    drift = [figures.Marker(result_id, "host drift", text) for result_id, text in drifted.items()]
    speedup_chart = figures.speedup_figure(traces, change_points=change_points, markers=markers,
                                           drift=drift)
    latency_chart = figures.latency_figure(traces)
    own = traces[0].points
    return _page(
        request, "series.html", series=series, siblings=ordered[1:],
        latest=own[-1] if own else None,
        point_count=len(own), point_limit=SERIES_POINT_LIMIT,
        summarised=sum(b.count for b in traces[0].older),
        speedup_chart=speedup_chart, latency_chart=latency_chart,
        regressions=sorted(regressions, key=lambda r: r.id, reverse=True),
        change_rows=change_rows, changepoint_window=CHANGEPOINT_WINDOW,
        recent=list(reversed(own[-20:])),
    )


# ---- compare -------------------------------------------------------------------------------

def _profile_diff(make: Callable[[], Any]) -> tuple[Any, str | None]:
    """A profile diff for a page, or None and why not (a page shows what it can)."""
    try:
        return make(), None
    except NotFound as exc:
        return None, exc.message
    except InvalidRequest as exc:
        return None, exc.field_message


COMPARE_DIFFS = 3  # profile diffs shown under a comparison: its most changed series


@router.get("/compare")
def compare_page(
    request: Request,
    session: SessionDep,
    access: PageAccess,
    base: int | None = None,
    head: int | None = None,
) -> HTMLResponse:
    if base is not None:
        _row_id(base, "run")
    if head is not None:
        _row_id(head, "run")
    runs, _ = run_service.list_runs(session, limit=RUN_LIST_LIMIT, access=access)
    finished = [r for r in runs if r.status in RUN_TERMINAL]
    if base is None and head is None and len(finished) >= 2:
        base, head = finished[1].id, finished[0].id
    context: dict[str, Any] = {"runs": runs, "base": base, "head": head, "rows": [],
                               "comparison": None}
    if base is not None and head is not None:
        comparison = series_service.compare_runs(session, base, head, access)
        rows = sorted(comparison.rows, key=lambda r: (r.change is None, r.change or 0.0))
        diffs = [(row, *_profile_diff(partial(profile_service.diff_results, row.base,
                                              row.head)))
                 for row in rows if not row.ci_overlap][:COMPARE_DIFFS]
        context.update(
            comparison=comparison, rows=rows, diffs=diffs,
            base_run=run_service.get_run(session, base, access),
            head_run=run_service.get_run(session, head, access),
            chart=figures.changes_figure(
                [figures.Change(r.series_key, r.change, not r.ci_overlap) for r in rows
                 if r.change is not None],
                empty_reason="the two runs share no series with a measured point",
            ),
        )
    elif base is not None or head is not None:
        raise InvalidRequest("base" if base is None else "head",
                             "compare needs both a base and a head run")
    return _page(request, "compare.html", **context)


# ---- runs ----------------------------------------------------------------------------------

@router.get("/runs")
def runs_page(request: Request, session: SessionDep, access: PageAccess) -> HTMLResponse:
    runs, _ = run_service.list_runs(session, limit=RUN_LIST_LIMIT, access=access)
    counts = run_service.run_summary_counts(session, [r.id for r in runs])
    return _page(request, "runs.html", runs=runs, counts=counts, limit=RUN_LIST_LIMIT)


def _unserved_queues(session: Session, settings: Settings,
                     cells: list[tuple[Cell, Result | None]]) -> list[worker_service.QueueView]:
    """The queues this run's queued cells wait on that no live worker consumes."""
    waiting = Counter(c.queue for c, _ in cells if c.status == "queued")
    if not waiting:
        return []
    alive = {q for w in worker_service.list_workers(session, settings) if w.state == "alive"
             for q in w.queues}
    return [worker_service.QueueView(q, 0, n, 0) for q, n in sorted(waiting.items())
            if q not in alive]


@router.get("/runs/{run_id}")
def run_page(
    run_id: int, request: Request, session: SessionDep, settings: SettingsDep,
    access: PageAccess,
) -> HTMLResponse:
    run: Run = run_service.get_run(session, _row_id(run_id, "run"), access)
    cells = run_service.run_cells(session, run.id)
    counts = run_service.cell_counts(session, run.id)
    results: list[Result] = [r for _, r in cells if r is not None]
    fingerprint = next((r.fingerprint for r in results if r.fingerprint), {})
    estimates = []
    for cell, result in cells:
        if result is None or result.speedup is None:
            continue
        assert result.ci_low is not None and result.ci_high is not None
        verdict = (cell.judgement or {}).get("verdict", "ok")
        estimates.append(figures.Estimate(cell.series_key, result.speedup, result.ci_low,
                                          result.ci_high, verdict,
                                          str(cell.spec.get("weights", "constant"))))
    chart = figures.estimates_figure(
        estimates, empty_reason="no cell has a measured speedup yet" if run.status not in
        RUN_TERMINAL else "no cell of this run produced a speedup (see the reasons below)")
    total = sum(counts.values())
    finished = sum(counts[s] for s in ("done", "failed", "skipped"))
    baseline_ids = {c.id: (c.judgement or {}).get("baseline_result_id") for c, _ in cells}
    baselines = run_service.results_by_id(
        session, [i for i in baseline_ids.values() if isinstance(i, int)])

    def changes(cell: Cell, result: Result | None) -> list[evidence_view.EvidenceChange] | None:
        base = baselines.get(baseline_ids[cell.id] or -1)
        if base is None or result is None:
            return None  # no baseline to compare with
        return evidence_view.evidence_changes(base.evidence, result.evidence)

    def reasons(cell: Cell, result: Result | None) -> list[str]:
        if cell.error:
            return [cell.error]
        if result is not None and result.reason:
            return [result.reason]
        return [str(r) for r in (cell.judgement or {}).get("reasons") or []]

    outcomes = {c.series_key: evidence_view.outcome((c.judgement or {}).get("verdict"),
                                                    c.status) for c, _ in cells}

    def reason_outcome(reason: str) -> str:
        """A run's reason names its cell's series first: shown in that cell's colour."""
        key = reason.split(": ", 1)[0]
        return outcomes.get(key, "warn" if run.verdict == "inconclusive" else
                            "bad" if run.verdict in ("regression", "error") else "ok")

    return _page(
        request, "run.html", run=run, cells=[
            {"cell": c, "result": r, "evidence": evidence_view.flat(r.evidence if r else None),
             "changes": changes(c, r), "reasons": reasons(c, r),
             "builds": evidence_view.build_summary(r.evidence if r else None),
             "outcome": outcomes[c.series_key]}
            for c, r in cells],
        run_reasons=[(reason, reason_outcome(reason)) for reason in run.reasons or []],
        counts=counts, total=total, finished=finished, live=run.status not in RUN_TERMINAL,
        fingerprint=evidence_view.fingerprint_summary(fingerprint),
        fingerprint_all=evidence_view.flat(
            {k: v for k, v in fingerprint.items() if k != "packages"}),
        packages=sorted((fingerprint.get("packages") or {}).items()), chart=chart,
        unserved=_unserved_queues(session, settings, cells),
    )


# ---- workers -------------------------------------------------------------------------------

@router.get("/workers")
def workers_page(
    request: Request, session: SessionDep, settings: SettingsDep, _access: PageAccess,
) -> HTMLResponse:
    workers = worker_service.list_workers(session, settings)
    return _page(request, "workers.html", workers=workers,
                 queues=worker_service.list_queues(session, settings, workers),
                 heartbeat_s=settings.worker_heartbeat_seconds,
                 lost_after_s=settings.worker_lost_after(),
                 forget_days=round(settings.worker_forget_seconds / 86400, 1))


# ---- regressions ---------------------------------------------------------------------------

@router.get("/regressions")
def regressions_page(
    request: Request, session: SessionDep, access: PageAccess,
) -> HTMLResponse:
    groups = {}
    for status in ("open", "acknowledged", "resolved"):
        groups[status], _ = regression_service.list_regressions(
            session, status=status, limit=REGRESSION_LIST_LIMIT, access=access)
    active = [r for s in ("open", "acknowledged") for r in groups[s] if r.magnitude is not None]
    chart = figures.magnitudes_figure(
        [f"#{r.id} {r.series.key}" for r in active], [r.magnitude or 0.0 for r in active],
        [r.status for r in active],
        empty_reason="no open or acknowledged regression: every series holds its speedup")
    return _page(request, "regressions.html", groups=groups, chart=chart,
                 limit=REGRESSION_LIST_LIMIT)



@router.get("/regressions/{regression_id}")
def regression_page(
    regression_id: int, request: Request, session: SessionDep, access: PageAccess,
) -> HTMLResponse:
    """One regression, and the bisects that searched for the release behind it: their
    steps and measurements."""
    regression = regression_service.get_regression(session, _row_id(regression_id, "regression"),
                                                   access=access)
    found, _ = sweep_service.list_sweeps(session, regression_id=regression.id, limit=20,
                                         access=access)
    bisects = [_bisect_context(session, s) for s in found]
    diff, why_not = _profile_diff(lambda: profile_service.regression_diff(
        session, regression.id, access=access)[1])
    return _page(request, "regression.html", r=regression, bisects=bisects,
                 diff=diff, why_not=why_not,
                 hint=(f"speedwatch bisect --url URL --token TOKEN --project "
                       f"{regression.project.name} --regression {regression.id} --wait"))


@router.get("/results/{result_id}/repro.tar.gz")
def repro_archive(result_id: int, session: SessionDep, settings: SettingsDep,
                  access: PageAccess) -> Response:
    """The result's repro bundle (benchmarks.repro_bundle), as `speedwatch repro` writes it.
    Its README names the server by the configured public URL, never by the request's Host
    header: whoever sends the request writes that header, and the archive is passed on."""
    from benchmarks.repro_bundle import archive

    _row_id(result_id, "result")
    result, run = profile_service.get_result(session, result_id, access=access)
    view = profile_service.result_view(result, run)
    base = settings.public_url.rstrip("/") if settings.public_url else None
    return Response(archive(view, base), media_type="application/gzip", headers={
        "Content-Disposition": f'attachment; filename="repro-{result_id}.tar.gz"'})


# ---- sweeps and bisects --------------------------------------------------------------------

SWEEP_LIST_LIMIT = 100


@router.get("/sweeps")
def sweeps_page(request: Request, session: SessionDep, access: PageAccess) -> HTMLResponse:
    found, _ = sweep_service.list_sweeps(session, limit=SWEEP_LIST_LIMIT, access=access)
    counts = sweep_service.run_counts(session, [s.id for s in found])
    return _page(request, "sweeps.html", sweeps=found, counts=counts, limit=SWEEP_LIST_LIMIT)


def _step_point(step: dict[str, Any], label: str) -> figures.VersionPoint | None:
    if step.get("speedup") is None or step.get("ci_low") is None:
        return None
    return figures.VersionPoint(label, float(step["speedup"]), float(step["ci_low"]),
                                float(step["ci_high"]),
                                f"step {step['n']} ({step['role']}): {step.get('sentence')}")


def _bisect_context(session: Session, sweep: Any) -> dict[str, Any]:
    """A bisect's steps, chart and answer, as its page and its regression's page show them.

    The x axis is the searched package's releases in release order; with several
    packages each label names its package (good and bad name the first one's)."""
    view = sweep_service.sweep_view(session, sweep)
    packages = sweep.state.get("packages") or []
    several = len(packages) > 1
    order: list[str] = []
    for p in packages:
        order += [f"{p['name']} {v}" if several else v for v in p["versions"]]
    first = packages[0] if packages else {"name": sweep.package, "good": sweep.from_version,
                                          "bad": sweep.to_version}
    points = []
    for step in view.steps:
        if step["role"] == "good":
            version = first["good"]
            name = first["name"]
        elif step["role"] == "bad" and not several:
            version, name = first["bad"], first["name"]
        elif step["role"] == "bad":
            continue  # every package at once: not one release of one package
        else:
            version, name = step.get("version"), step.get("package")
        label = f"{name} {version}" if several else str(version)
        point = _step_point(step, label)
        if point is not None and step.get("outcome"):
            points.append((point, str(step["outcome"]), int(step["n"])))
    chart = figures.bisect_figure(
        order, points, package=", ".join(p["name"] for p in packages) or sweep.package,
        empty_reason="no step has a measured speedup yet")
    return {"sweep": sweep, "steps": view.steps, "chart": chart, "counts": view.counts,
            "packages": packages, "notes": sweep.state.get("notes") or []}


@router.get("/sweeps/{sweep_id}")
def sweep_page(
    sweep_id: int, request: Request, session: SessionDep, access: PageAccess,
) -> HTMLResponse:
    sweep = sweep_service.get_sweep(session, _row_id(sweep_id, "sweep"), access=access)
    if sweep.kind == "bisect":
        return _page(request, "bisect.html", **_bisect_context(session, sweep),
                     live=sweep.status == "running")
    view = sweep_service.sweep_view(session, sweep)
    weights = list(dict.fromkeys(str(c.spec.get("weights", "?"))
                                 for v in view.runs for c, _ in v.cells))
    traces = []
    for w in weights:
        points = []
        for v in view.runs:
            for cell, row in v.cells:
                if str(cell.spec.get("weights")) == w and row is not None and \
                        row.speedup is not None and row.ci_low is not None and \
                        row.ci_high is not None:
                    points.append(figures.VersionPoint(
                        v.version, row.speedup, row.ci_low, row.ci_high,
                        f"run {v.run.id}: {', '.join(v.environment.pins or [])}"))
        traces.append((w, points))
    chart = figures.sweep_figure(
        sweep.versions, traces, package=sweep.package,
        empty_reason="no release has a measured speedup yet" if sweep.status == "running"
        else "no release produced a speedup (the runs below say why)")
    rows = []
    for v in view.runs:
        by = {str(c.spec.get("weights")): (c, r) for c, r in v.cells}
        rows.append({"v": v, "cells": [by.get(w) for w in weights]})
    finished = view.counts.get("done", 0) + view.counts.get("failed", 0)
    return _page(request, "sweep.html", sweep=sweep, chart=chart, weights=weights, rows=rows,
                 changes=view.changes, counts=view.counts, finished=finished,
                 total=sum(view.counts.values()), live=sweep.status == "running",
                 threshold=float(sweep.state.get("threshold", 0.05)))


# ---- environments --------------------------------------------------------------------------

@router.get("/environments")
def environments_page(request: Request, session: SessionDep, settings: SettingsDep,
                      access: PageAccess) -> HTMLResponse:
    page, _ = environment_service.list_environments(session, limit=200, access=access)
    return _page(request, "environments.html", environments=page,
                 budget_gb=settings.venv_cache_max_bytes / 1024**3)
