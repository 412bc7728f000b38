"""Read side: series with their latest point, a series' points, and run-to-run comparison.

Only results with status "ok" are points (failed and skipped ones have no speedup). The
queries lean on ix_results_series_id_created_at: "latest point of each series" is one
correlated index probe per series of the page, not a scan of all results, and so are the
sparklines (a LATERAL join on PostgreSQL). What a page costs must not grow with the
history it sits on (scripts/capacity.py measures it at 10k, 100k and 1M results).

A series belongs to a project, and the same key may exist in several projects: a reader
names the project, or leaves it out when the key exists in one project only
(`get_series`).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Text, and_, case, cast, func, or_, select, true
from sqlalchemy.orm import Session, aliased
from sqlalchemy.sql.selectable import ScalarSelect

from app.errors import InvalidRequest, NotFound
from app.models import Cell, Project, Result, Run, Series, series_point
from app.services.tokens import EVERY_PROJECT, ProjectAccess

# The `threads` filter value for series that use the library's default (threads NULL).
THREADS_AUTO = "auto"


@dataclass(frozen=True)
class SeriesFilter:
    """Equality filters on the series' axes; None: any value."""

    project: str | None = None  # the project's name
    model: str | None = None
    backend: str | None = None
    weights: str | None = None
    precision: str | None = None
    batch_size: int | None = None
    shape_mode: str | None = None
    device_class: str | None = None
    threads: int | str | None = None  # a number, or THREADS_AUTO
    timing_mode: str | None = None
    options: str | None = None

    def apply(self, query: Select[Series]) -> Select[Series]:
        for name, value in vars(self).items():
            if value is None:
                continue
            if name == "project":
                query = query.where(Series.project_id.in_(
                    select(Project.id).where(Project.name == value)))
            elif name == "threads" and value == THREADS_AUTO:
                query = query.where(Series.threads.is_(None))
            else:
                query = query.where(getattr(Series, name) == value)
        return query


@dataclass(frozen=True)
class Point:
    """One ok result as a chart needs it; plain values, not ORM objects, because a result
    row also carries raw samples and fingerprint JSON that a chart of 500 points must not
    decode."""

    result_id: int
    run_id: int
    revision: str
    branch: str | None
    created_at: datetime
    speedup: float
    ci_low: float
    ci_high: float
    baseline_median_ms: float | None
    candidate_median_ms: float | None
    accuracy_passed: bool | None
    installed_versions: dict[str, str]
    # None: ingested without raw samples, so the interval is the sender's word, not one
    # measured here (change-point search treats the point as having no interval)
    samples_per_side: int | None = None


POINT_COLUMNS = (
    Result.id, Result.run_id, Run.revision, Run.branch, Result.created_at, Result.speedup,
    Result.ci_low, Result.ci_high, Result.baseline_median_ms, Result.candidate_median_ms,
    Result.accuracy_passed,
    # As text, decoded once per distinct value (_points): a series' versions change a few
    # times in thousands of points, and the driver's per-row JSON decoding was a third of
    # the time of a 10k-point read.
    cast(Result.installed_versions, Text),
    Result.samples_per_side,
)


def _points(rows: Sequence[Sequence[Any]]) -> list[Point]:
    """Rows of POINT_COLUMNS (status 'ok', so the speedup columns are not NULL)."""
    decoded: dict[str | None, dict[str, str]] = {}
    out = []
    for (result_id, run_id, revision, branch, created_at, speedup, ci_low, ci_high,
         baseline_ms, candidate_ms, accuracy_passed, versions_text, samples) in rows:
        versions = decoded.get(versions_text)
        if versions is None:
            versions = decoded[versions_text] = json.loads(versions_text or "{}") or {}
        out.append(Point(result_id, run_id, revision, branch, created_at, speedup, ci_low,
                         ci_high, baseline_ms, candidate_ms, accuracy_passed, dict(versions),
                         samples))
    return out


def _latest_ok_result_id() -> ScalarSelect[int]:
    return (
        select(Result.id)
        .where(Result.series_id == Series.id, Result.status == "ok",
               series_point())
        .order_by(Result.created_at.desc(), Result.id.desc())
        .limit(1)
        .correlate(Series)
        .scalar_subquery()
    )


def series_cursor(series: Series) -> str:
    """The keyset position after `series` ("id:key"; `parse_cursor` reads it back)."""
    return f"{series.id}:{series.key}"


def parse_cursor(cursor: str) -> tuple[str, int | None]:
    """(key, id) of a cursor; a bare key (the cursor before series had projects) means
    every series after that key."""
    head, sep, key = cursor.partition(":")
    if sep and head.isdigit():
        return key, int(head)
    return cursor, None


def list_series(
    session: Session, filters: SeriesFilter, *, limit: int, after: str | None = None,
    access: ProjectAccess = EVERY_PROJECT,
) -> list[tuple[Series, Point | None]]:
    """Series ordered by key, then id (one key may exist in several projects), with their
    latest point; keyset pagination: the series after cursor `after` (`series_cursor`)."""
    query = access.restrict(filters.apply(select(Series)), Series.project_id)
    if after is not None:
        key, series_id = parse_cursor(after)
        query = query.where(Series.key > key if series_id is None else or_(
            Series.key > key, and_(Series.key == key, Series.id > series_id)))
    series = list(session.scalars(query.order_by(Series.key, Series.id).limit(limit)))
    latest = _latest_points(session, [s.id for s in series])
    return [(s, latest.get(s.id)) for s in series]


def _latest_points(session: Session, series_ids: list[int]) -> dict[int, Point]:
    """Each series' latest ok point, in two bounded steps: the latest result's id of each
    series (one index probe per series, ix_results_series_id_created_at), then those
    results by primary key. Joining results on the probe in one statement let
    PostgreSQL's planner hash-join the whole results table instead: the overview,
    `/api/v1/series` and the series page then read every result ever stored."""
    if not series_ids:
        return {}
    latest = session.execute(
        select(Series.id, _latest_ok_result_id()).where(Series.id.in_(series_ids))
    ).all()
    series_of = {result_id: series_id for series_id, result_id in latest
                 if result_id is not None}
    if not series_of:
        return {}
    rows = session.execute(
        select(*POINT_COLUMNS).join(Run, Run.id == Result.run_id)
        .where(Result.id.in_(list(series_of)))
    ).all()
    return {series_of[point.result_id]: point for point in _points(rows)}


def get_series(session: Session, key: str, project: str | None = None,
               access: ProjectAccess = EVERY_PROJECT) -> Series:
    """The series of `key` in `project`. Without a project, the key's only series; a key
    that several projects measure is ambiguous (InvalidRequest naming the field `project`
    and the projects), because their histories are not comparable. Projects outside
    `access` do not count, so neither the 404 nor the ambiguity names them."""
    query = access.restrict(select(Series).where(Series.key == key), Series.project_id)
    if project is not None:
        found = session.scalars(query.join(Project, Project.id == Series.project_id)
                                .where(Project.name == project)).first()
        if found is None:
            raise NotFound(f"series {key!r} not found in project {project!r}")
        return found
    candidates = list(session.scalars(query.order_by(Series.id)))
    if not candidates:
        raise NotFound(f"series {key!r} not found")
    if len(candidates) > 1:
        names = sorted(s.project.name for s in candidates)
        raise InvalidRequest("project", f"series {key!r} exists in several projects "
                                        f"({', '.join(names)}); name one with ?project=")
    return candidates[0]


def latest_point(session: Session, series: Series) -> Point | None:
    return _latest_points(session, [series.id]).get(series.id)


def series_points(
    session: Session, series: Series, *, limit: int, since: datetime | None = None
) -> list[Point]:
    """The newest `limit` ok points (created at or after `since`), returned oldest first."""
    query = (
        select(*POINT_COLUMNS)
        .join(Run, Run.id == Result.run_id)
        .where(Result.series_id == series.id, Result.status == "ok",
               series_point())
    )
    if since is not None:
        query = query.where(Result.created_at >= since)
    rows = session.execute(
        query.order_by(Result.created_at.desc(), Result.id.desc()).limit(limit)
    ).all()
    return _points(rows[::-1])


def host_drift_results(session: Session, result_ids: Sequence[int]) -> dict[int, str]:
    """Of these results, those whose verdict found the same software as their baseline
    yet a change beyond the threshold (app.detection.verdict.same_software_note): result id
    -> the verdict's line saying so. The series page marks them as the host's, not the
    code's."""
    if not result_ids:
        return {}
    rows = session.execute(
        select(Result.id, Cell.judgement).join(Cell, Cell.id == Result.cell_id)
        .where(Result.id.in_(list(result_ids)))).all()
    out: dict[int, str] = {}
    for result_id, judgement in rows:
        if isinstance(judgement, dict) and judgement.get("host_drift"):
            reasons = [r for r in judgement.get("reasons") or [] if "host drift" in str(r)]
            out[result_id] = str(reasons[0]) if reasons else "host drift"
    return out


AXES = ("model", "backend", "weights", "precision", "batch_size", "shape_mode", "device_class")


# (database, projects of the access, series count, newest series id) -> axis values
_axis_cache: OrderedDict[tuple[Any, ...], dict[str, list[Any]]] = OrderedDict()
_axis_lock = threading.Lock()
AXIS_CACHE_ENTRIES = 64


def axis_values(session: Session, access: ProjectAccess = EVERY_PROJECT) -> dict[str, list[Any]]:
    """The distinct values of each series axis (the dashboard's filter choices): the names
    of projects with series, the key's axes, threads as numbers (THREADS_AUTO first for
    the library's default) and the timing modes; of the projects in `access` only, since
    the choices would otherwise name the others.

    Kept per process until a series is added or removed (the count and newest id of the
    series `access` sees, one index-only read): the choices change only then, and reading
    them is ten scans of the series table, which grew with every series on each overview.
    A series' axes never change (they are its key)."""
    seen = access.restrict(select(Series.id), Series.project_id).subquery()
    count, newest = session.execute(select(func.count(), func.max(seen.c.id))).one()
    key = (session.get_bind().engine.url.render_as_string(), access.names, count, newest)
    with _axis_lock:
        cached = _axis_cache.get(key)
        if cached is not None:
            _axis_cache.move_to_end(key)
            return {name: list(values) for name, values in cached.items()}
    out = _read_axis_values(session, access)
    with _axis_lock:
        _axis_cache[key] = out
        while len(_axis_cache) > AXIS_CACHE_ENTRIES:
            _axis_cache.popitem(last=False)
    return {name: list(values) for name, values in out.items()}


def _read_axis_values(session: Session, access: ProjectAccess) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"project": list(session.scalars(
        access.restrict(select(Project.name), Project.id)
        .where(Project.id.in_(select(Series.project_id))).order_by(Project.name)))}
    for axis in AXES:
        column = getattr(Series, axis)
        out[axis] = list(session.scalars(
            access.restrict(select(column), Series.project_id).distinct().order_by(column)))
    threads = set(session.scalars(
        access.restrict(select(Series.threads), Series.project_id).distinct()))
    out["threads"] = ([THREADS_AUTO] if None in threads else []) + sorted(
        t for t in threads if t is not None)
    out["timing_mode"] = list(session.scalars(
        access.restrict(select(Series.timing_mode), Series.project_id)
        .distinct().order_by(Series.timing_mode)))
    return out


def recent_speedups(
    session: Session, series_ids: list[int], *, per_series: int
) -> dict[int, list[float]]:
    """The newest `per_series` ok speedups of each series, oldest first (sparklines), in
    one query for the whole page.

    On PostgreSQL a LATERAL join reads at most `per_series` entries of each series from
    ix_results_series_points (index-only), so the overview costs the same with 10 or 10,000
    points per series. The window function it replaced numbered every point of every
    series on the page before keeping 30: with a few years of history that was most of
    the overview's time. SQLite has no LATERAL; the embedded store keeps the window."""
    if not series_ids:
        return {}
    out: dict[int, list[float]] = {series_id: [] for series_id in series_ids}
    if session.get_bind().dialect.name == "postgresql":
        wanted = select(Series.id.label("series_id")).where(Series.id.in_(series_ids)).subquery()
        newest = (
            select(Result.speedup, Result.created_at, Result.id)
            .where(Result.series_id == wanted.c.series_id, Result.status == "ok",
                   series_point())
            .order_by(Result.created_at.desc(), Result.id.desc())
            .limit(per_series)
            .lateral()
        )
        rows = session.execute(
            select(wanted.c.series_id, newest.c.speedup)
            .select_from(wanted).join(newest, true())
            .order_by(wanted.c.series_id, newest.c.created_at, newest.c.id)
        ).all()
    else:
        rank = func.row_number().over(
            partition_by=Result.series_id,
            order_by=(Result.created_at.desc(), Result.id.desc())).label("rank")
        ranked = (
            select(Result.series_id, Result.speedup, rank)
            .where(Result.series_id.in_(series_ids), Result.status == "ok",
                   series_point())
            .subquery()
        )
        rows = session.execute(
            select(ranked.c.series_id, ranked.c.speedup)
            .where(ranked.c.rank <= per_series)
            .order_by(ranked.c.series_id, ranked.c.rank.desc())
        ).all()
    for series_id, speedup in rows:
        out[series_id].append(speedup)
    return out


@dataclass(frozen=True)
class Bucket:
    """Consecutive ok results of a series summarised: the dashboard draws the long tail of
    a history this way, so a page with 10k points stays fast (the raw points stay in the
    store and the API)."""

    first_revision: str
    last_revision: str
    first_created_at: datetime
    last_created_at: datetime
    count: int
    speedup_mean: float
    ci_low_min: float
    ci_high_max: float
    baseline_median_ms_mean: float | None
    candidate_median_ms_mean: float | None


def history_buckets(
    session: Session, series: Series, *, before: Point, buckets: int
) -> list[Bucket]:
    """The ok results older than `before`, in `buckets` groups of consecutive results
    (oldest first), each with its mean speedup and the envelope of its CIs. One query: the
    grouping (ntile) and the first/last revision of each group are window functions."""
    older = or_(Result.created_at < before.created_at,
                and_(Result.created_at == before.created_at, Result.id < before.result_id))
    order = (Result.created_at, Result.id)
    numbered = (
        select(Result.created_at, Result.speedup, Result.ci_low, Result.ci_high,
               Result.baseline_median_ms, Result.candidate_median_ms, Run.revision,
               Result.id, func.ntile(buckets).over(order_by=order).label("bucket"))
        .join(Run, Run.id == Result.run_id)
        .where(Result.series_id == series.id, Result.status == "ok",
               series_point(), older)
        .subquery()
    )
    ranked = select(
        numbered,
        func.row_number().over(partition_by=numbered.c.bucket,
                               order_by=(numbered.c.created_at, numbered.c.id)).label("up"),
        func.row_number().over(partition_by=numbered.c.bucket,
                               order_by=(numbered.c.created_at.desc(), numbered.c.id.desc())
                               ).label("down"),
    ).subquery()
    c = ranked.c
    rows = session.execute(
        select(
            func.max(case((c.up == 1, c.revision))), func.max(case((c.down == 1, c.revision))),
            func.min(c.created_at), func.max(c.created_at), func.count(), func.avg(c.speedup),
            func.min(c.ci_low), func.max(c.ci_high), func.avg(c.baseline_median_ms),
            func.avg(c.candidate_median_ms),
        ).group_by(c.bucket).order_by(c.bucket)
    ).all()
    return [Bucket(*row) for row in rows]


@dataclass(frozen=True)
class CompareRow:
    series_key: str
    base: Result
    head: Result

    @property
    def change(self) -> float | None:
        """None where the ratio overflows: JSON has no infinity, and a 500 told nobody why."""
        assert self.base.speedup and self.head.speedup
        change = self.head.speedup / self.base.speedup - 1.0
        return change if math.isfinite(change) else None

    @property
    def ci_overlap(self) -> bool:
        b, h = self.base, self.head
        assert b.ci_low is not None and b.ci_high is not None
        assert h.ci_low is not None and h.ci_high is not None
        return not (h.ci_high < b.ci_low or h.ci_low > b.ci_high)


@dataclass(frozen=True)
class Comparison:
    rows: list[CompareRow]
    only_in_base: list[str]
    only_in_head: list[str]


def _ok_results_by_series(session: Session, run_id: int) -> dict[str, Result]:
    """The run's latest ok result per series key."""
    r = aliased(Result)
    rows = session.execute(
        select(Series.key, r)
        .join(r, and_(r.series_id == Series.id, r.run_id == run_id, r.status == "ok"))
        .order_by(r.created_at, r.id)
    ).all()
    return {key: result for key, result in rows}


def compare_runs(session: Session, base_id: int, head_id: int,
                 access: ProjectAccess = EVERY_PROJECT) -> Comparison:
    for name, run_id in (("base", base_id), ("head", head_id)):
        run = session.get(Run, run_id)
        if run is None or not access.allows(run.project.name):
            raise NotFound(f"{name} run {run_id} not found")
    base = _ok_results_by_series(session, base_id)
    head = _ok_results_by_series(session, head_id)
    shared = sorted(set(base) & set(head))
    return Comparison(
        rows=[CompareRow(key, base[key], head[key]) for key in shared],
        only_in_base=sorted(set(base) - set(head)),
        only_in_head=sorted(set(head) - set(base)),
    )
