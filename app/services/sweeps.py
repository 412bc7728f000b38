"""Sweeps and bisects as people ask for them: create, read, list, cancel.

A sweep is one run per released version of a package in a range, read from the package
index the workers' pip is configured with (app.ports.package_index: a private mirror or a
wheel directory works as it does for the environment builds), oldest first, every other
pin held fixed. Only allowlisted packages; pre-releases only when asked; no more releases
than the request's (and the server's) maximum: a larger range is refused with its size,
not silently thinned.

A bisect starts from a confirmed regression (its baseline result is the good environment,
the result that opened it the bad one) or from two environments named in the request, and
measures one run at a time (app.services.sweep_progress decides each next step).

Cancelling stops it: the sweep takes no further step, its queued cells fail with the
reason "cancelled", and a cell already measuring stops after its current child process
(the worker asks after each one, workers.tasks) and fails with that reason too.

Creating reads the package index once per package (a subprocess of pip's); flushes, never
commits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from packaging.version import Version
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app import ports
from app.config import Settings, get_settings
from app.detection.verdict import judge_results
from app.detection.verdict_types import VerdictError
from app.environment_policy import (
    PinError,
    normalize_name,
    parse_version,
    releases_between,
    validate_pins,
)
from app.errors import Conflict, InvalidRequest, NotFound, ServiceUnavailable
from app.models import RUN_TERMINAL, Cell, Environment, Project, Result, Run, Sweep
from app.schemas import BisectCreate, SweepCreate
from app.services import sweep_progress
from app.services.common import get_or_create_project, release_connection
from app.services.documents import result_document
from app.services.policy import project_policy
from app.services.regressions import get_regression
from app.services.runs import fail_cell, finish_run_if_complete
from app.services.tokens import EVERY_PROJECT, ProjectAccess
from app.services.triggering import PlannedCell, expand_matrix

log = logging.getLogger(__name__)

CANCELLED = "cancelled"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _cell_plan(planned: list[PlannedCell]) -> list[dict[str, Any]]:
    return [{"spec": p.spec.to_dict(), "spec_hash": p.spec_hash, "queue": p.queue,
             "series_key": p.series_key} for p in planned]


def index_versions(package: str, *, pre: bool, settings: Settings) -> list[str]:
    """The package index's versions of `package` (any order); 503 when it cannot be read."""
    try:
        return ports.package_index().versions(package, pre=pre, settings=settings)
    except ports.PackageIndexError as exc:
        raise ServiceUnavailable(f"package index: {exc}") from None


def _allowlisted(package: str, version: str, field: str, settings: Settings) -> str:
    """The PEP 503 name of `package` if a pin of it may be installed, else InvalidRequest."""
    try:
        parse_version(version)
    except PinError as exc:
        raise InvalidRequest(field, str(exc)) from None
    try:
        (pin,) = validate_pins([f"{package}=={version}"], settings.env_allowlist)
    except PinError as exc:
        raise InvalidRequest("package", str(exc).split(": ", 1)[-1]) from None
    return pin.split("==")[0]


def _cap(requested: int | None, server: int, field: str) -> int:
    if requested is not None and requested > server:
        raise InvalidRequest(field, f"{requested} is more than this server's limit of {server}")
    return requested or server


# ---- sweeps --------------------------------------------------------------------------------

def create_sweep(
    session: Session, request: SweepCreate, *, settings: Settings | None = None,
    created_by: str | None = None,
) -> Sweep:
    """The sweep and its runs (queued, not sent: the caller commits, then sends them with
    app.services.triggering.enqueue)."""
    settings = settings or get_settings()
    package = _allowlisted(request.package, request.from_version, "from_version", settings)
    _allowlisted(request.package, request.to_version, "to_version", settings)
    try:
        holds = validate_pins(request.holds, settings.env_allowlist)
    except PinError as exc:
        raise InvalidRequest("holds", str(exc)) from None
    if any(h.split("==")[0] == package for h in holds):
        raise InvalidRequest("holds", f"{package} is the package swept; hold other packages")
    planned = expand_matrix(request.matrix, settings)
    cap = _cap(request.max_versions, settings.sweep_max_versions, "max_versions")
    low, high = sorted((request.from_version, request.to_version), key=Version)
    release_connection(session)
    versions = releases_between(index_versions(package, pre=request.pre, settings=settings),
                                low, high, pre=request.pre)
    if not versions:
        raise InvalidRequest("to_version", f"the package index lists no release of {package} "
                             f"from {low} to {high} with a wheel for the workers' Python"
                             + ("" if request.pre else " (pre-releases left out)"))
    if len(versions) > cap:
        raise InvalidRequest(
            "max_versions", f"{package} has {len(versions)} releases from {low} to {high} "
            f"({versions[0]} ... {versions[-1]}); this sweep may run at most {cap}: narrow "
            f"the range or raise max_versions (this server allows "
            f"{settings.sweep_max_versions})")
    project = get_or_create_project(session, request.project)
    threshold = project_policy(project).threshold
    sweep = Sweep(
        project_id=project.id, kind="sweep", status="running", package=package,
        from_version=low, to_version=high, pre=request.pre, holds=holds, versions=versions,
        matrix=request.matrix.model_dump(mode="json"), max_runs=cap, regression_id=None,
        state={"cells": _cell_plan(planned), "threshold": threshold}, created_by=created_by,
    )
    session.add(sweep)
    session.flush()
    for version in versions:
        sweep_progress.new_run(session, sweep, [*holds, f"{package}=={version}"],
                               f"{package} {version}", version, settings,
                               send_after_commit=False)
    return sweep


def unsent_cells(session: Session, sweep_id: int) -> list[tuple[int, str]]:
    """The sweep's queued cells never handed to the executor, in run order."""
    return [(cell_id, queue) for cell_id, queue in session.execute(
        select(Cell.id, Cell.queue).join(Run, Run.id == Cell.run_id)
        .where(Run.sweep_id == sweep_id, Cell.status == "queued", Cell.enqueued_at.is_(None))
        .order_by(Run.id, Cell.id)).all()]


# ---- bisects -------------------------------------------------------------------------------

def _versions_of(pins: list[str]) -> dict[str, str]:
    return dict(pin.split("==", 1) for pin in pins)


def _installed(row: Result) -> dict[str, str]:
    return {normalize_name(k): str(v) for k, v in (row.installed_versions or {}).items()}


@dataclass(frozen=True)
class _Endpoints:
    base: dict[str, str]  # the good environment, as pins
    differing: dict[str, tuple[str, str]]  # package -> (good, bad)
    cells: list[dict[str, Any]]
    threshold: float
    matrix: dict[str, Any]
    regression_id: int | None
    notes: list[str]


def _from_regression(session: Session, request: BisectCreate, settings: Settings,
                     access: ProjectAccess) -> _Endpoints:
    assert request.regression_id is not None
    regression = get_regression(session, request.regression_id, access=access)
    field = "regression_id"
    if regression.project.name != request.project:
        raise InvalidRequest(field, f"regression {regression.id} is of project "
                             f"{regression.project.name!r}, not {request.project!r}")
    if regression.baseline_result_id is None:
        raise InvalidRequest(field, f"regression {regression.id}'s baseline is a window of "
                             "results, not one environment to start from: name the good and "
                             "bad environments instead")
    bad = session.get(Result, regression.opened_by_result_id)
    good = session.get(Result, regression.baseline_result_id)
    if bad is None or good is None:
        raise InvalidRequest(field, "its results are gone")
    bad_run, good_run = session.get(Run, bad.run_id), session.get(Run, good.run_id)
    cell = session.get(Cell, bad.cell_id)
    assert bad_run is not None and good_run is not None and cell is not None
    if bad_run.environment.interpreter or good_run.environment.interpreter:
        raise InvalidRequest(field, "its results ran in named interpreters, which pins "
                             "cannot rebuild: name the good and bad environments instead")
    allowed = {normalize_name(a) for a in settings.env_allowlist}
    g, b = _installed(good), _installed(bad)
    differing = {n: (g[n], b[n]) for n in sorted(set(g) & set(b))
                 if g[n] != b[n] and n in allowed}
    notes = [f"{n} differs ({g.get(n, 'missing')} -> {b.get(n, 'missing')}) but is not on the "
             "allowlist: the worker's own version is used throughout"
             for n in sorted(set(g) | set(b)) if g.get(n) != b.get(n) and n not in allowed]
    notes += [f"{n} is installed on one side only: left as the worker has it"
              for n in sorted(set(g) ^ set(b)) if n in allowed]
    base = _versions_of(list(good_run.environment.pins or []))
    base.update({n: versions[0] for n, versions in differing.items()})
    threshold = regression.threshold
    plan = [{"spec": cell.spec, "spec_hash": cell.spec_hash,
             "queue": _queue_of(cell, regression.series.device_class, settings),
             "series_key": cell.series_key}]
    return _Endpoints(base, differing, plan, threshold, dict(bad_run.matrix or {}),
                      regression.id, notes)


def _queue_of(cell: Cell, device_class: str, settings: Settings) -> str:
    """Where the regressed cell is measured again: its own queue, or for a result measured
    elsewhere (ingested), the queue of its device class (any GPU's when the class has
    none of its own)."""
    if cell.queue in settings.queue_names():
        return cell.queue
    if cell.spec.get("device") == "cpu":
        return settings.cpu_queue
    for device in (device_class, "cuda"):
        try:
            return settings.queue_for_device(device)
        except KeyError:
            continue
    raise InvalidRequest("regression_id", f"no queue of this server measures {device_class}")


def _from_environments(session: Session, request: BisectCreate,
                       settings: Settings) -> _Endpoints:
    assert request.good is not None and request.bad is not None and request.matrix is not None
    pins = {}
    for side in ("good", "bad"):
        try:
            pins[side] = _versions_of(validate_pins(getattr(request, side),
                                                    settings.env_allowlist))
        except PinError as exc:
            raise InvalidRequest(side, str(exc)) from None
    good, bad = pins["good"], pins["bad"]
    for name in sorted(set(good) ^ set(bad)):
        side = "bad" if name in good else "good"
        raise InvalidRequest(side, f"{name} is pinned on one side only: pin it in both "
                             "(the same version to hold it)")
    planned = expand_matrix(request.matrix, settings)
    if len(planned) != 1:
        raise InvalidRequest("matrix", f"a bisect follows one series: give one model, backend, "
                             f"weights, precision, batch size and shape mode (this matrix "
                             f"makes {len(planned)} cells)")
    project = get_or_create_project(session, request.project)
    threshold = project_policy(project).threshold_for(planned[0].series_key)
    differing = {n: (good[n], bad[n]) for n in sorted(good) if good[n] != bad[n]}
    return _Endpoints(dict(good), differing, _cell_plan(planned), threshold,
                      request.matrix.model_dump(mode="json"), None, [])


def create_bisect(
    session: Session, request: BisectCreate, *, settings: Settings | None = None,
    access: ProjectAccess = EVERY_PROJECT, created_by: str | None = None,
) -> Sweep:
    """The bisect and its first step (the good environment's run, sent after the caller
    commits)."""
    settings = settings or get_settings()
    ends = (_from_regression(session, request, settings, access)
            if request.regression_id is not None
            else _from_environments(session, request, settings))
    field = "regression_id" if request.regression_id is not None else "bad"
    differing = dict(ends.differing)
    if request.packages:
        wanted = [normalize_name(p) for p in request.packages]
        for name in wanted:
            if name not in differing:
                raise InvalidRequest("packages", f"{name} does not differ between the two "
                                     f"environments (these do: "
                                     f"{', '.join(differing) or 'none'})")
        differing = {n: differing[n] for n in wanted}
    if not differing:
        raise InvalidRequest(field, "the two environments have the same version of every "
                             "allowlisted package: there is nothing to bisect"
                             + (f" ({'; '.join(ends.notes)})" if ends.notes else ""))
    cap = _cap(request.max_steps, settings.bisect_max_steps, "max_steps")
    # Only reads so far: end their transaction so the package index is not waited on while
    # holding a connection of the pool.
    release_connection(session)
    packages = []
    for name, (good, bad) in differing.items():
        listed = releases_between(index_versions(name, pre=request.pre, settings=settings),
                                  good, bad, pre=request.pre)
        versions = sorted({*listed, good, bad}, key=Version)
        if Version(good) > Version(bad):
            versions.reverse()  # searched from good to bad, whichever way that runs
        packages.append({"name": name, "good": good, "bad": bad, "versions": versions,
                         "lo": 0, "hi": len(versions) - 1, "skipped": [],
                         "status": "pending"})
    project = get_or_create_project(session, request.project)
    first = packages[0]
    held = {n: v for n, v in ends.base.items() if n not in differing}
    sweep = Sweep(
        project_id=project.id, kind="bisect", status="running", package=first["name"],
        from_version=first["good"], to_version=first["bad"], pre=request.pre,
        holds=[f"{n}=={v}" for n, v in sorted(held.items())], versions=[],
        matrix=ends.matrix, max_runs=cap, regression_id=ends.regression_id,
        state={"cells": ends.cells, "threshold": ends.threshold, "base": ends.base,
               "packages": packages, "steps": [], "notes": ends.notes},
        created_by=created_by,
    )
    session.add(sweep)
    session.flush()
    sweep_progress.advance(session, sweep, settings)
    return sweep


# ---- reading -------------------------------------------------------------------------------

def get_sweep(session: Session, sweep_id: int, *, lock: bool = False,
              access: ProjectAccess = EVERY_PROJECT) -> Sweep:
    """Another project's sweep is as unknown as a missing one (see ProjectAccess)."""
    query = access.restrict(select(Sweep).where(Sweep.id == sweep_id), Sweep.project_id)
    if lock:
        query = query.with_for_update(of=Sweep).execution_options(populate_existing=True)
    sweep = session.scalars(query).unique().first()
    if sweep is None:
        raise NotFound(f"sweep {sweep_id} not found")
    return sweep


def list_sweeps(
    session: Session, *, project: str | None = None, kind: str | None = None,
    regression_id: int | None = None, limit: int = 50, cursor: int | None = None,
    access: ProjectAccess = EVERY_PROJECT,
) -> tuple[list[Sweep], int | None]:
    """Newest first; returns (page, next cursor)."""
    query = access.restrict(select(Sweep), Sweep.project_id)
    if project is not None:
        query = query.where(Sweep.project_id.in_(
            select(Project.id).where(Project.name == project)))
    if kind is not None:
        query = query.where(Sweep.kind == kind)
    if regression_id is not None:
        query = query.where(Sweep.regression_id == regression_id)
    if cursor is not None:
        query = query.where(Sweep.id < cursor)
    found = list(session.scalars(query.order_by(Sweep.id.desc()).limit(limit + 1)).unique())
    page = found[:limit]
    return page, (page[-1].id if len(found) > limit else None)


def run_counts(session: Session, sweep_ids: list[int]) -> dict[int, dict[str, int]]:
    """Runs by status of each sweep (its progress)."""
    out: dict[int, dict[str, int]] = {i: {} for i in sweep_ids}
    if sweep_ids:
        for sweep_id, status, count in session.execute(
                select(Run.sweep_id, Run.status, func.count())
                .where(Run.sweep_id.in_(sweep_ids)).group_by(Run.sweep_id, Run.status)):
            if sweep_id is not None:
                out[sweep_id][status] = count
    return out


@dataclass(frozen=True)
class VersionRun:
    """One version's run of a sweep with its cells' results."""

    version: str
    run: Run
    environment: Environment
    cells: list[tuple[Cell, Result | None]]


@dataclass(frozen=True)
class Change:
    """Consecutive measured releases whose speedups differ beyond CIs and threshold."""

    weights: str
    before: str
    after: str
    change: float
    low: float
    high: float
    direction: str


@dataclass(frozen=True)
class SweepView:
    sweep: Sweep
    counts: dict[str, int]
    runs: list[VersionRun]
    changes: list[Change]
    steps: list[dict[str, Any]]


def sweep_view(session: Session, sweep: Sweep) -> SweepView:
    """Everything a sweep's page and its API answer show."""
    runs = list(session.scalars(select(Run).where(Run.sweep_id == sweep.id)
                                .order_by(Run.id)).unique())
    by_run: dict[int, list[tuple[Cell, Result | None]]] = {r.id: [] for r in runs}
    for cell, result in session.execute(
            select(Cell, Result).outerjoin(Result, Result.cell_id == Cell.id)
            .join(Run, Run.id == Cell.run_id).where(Run.sweep_id == sweep.id)
            .order_by(Cell.id)).all():
        by_run[cell.run_id].append((cell, result))
    counts = run_counts(session, [sweep.id])[sweep.id]
    if sweep.kind == "bisect":
        status = {r.id: r.status for r in runs}
        steps = [{**s, "status": status.get(s.get("run_id") or 0, "failed")}
                 for s in sweep.state.get("steps", [])]
        return SweepView(sweep, counts, [], [], steps)
    version_of = {f"sweep:{sweep.id}:{v}": v for v in sweep.versions}
    order = {v: i for i, v in enumerate(sweep.versions)}
    versions = sorted(
        (VersionRun(version_of.get(r.idempotency_key, r.revision), r, r.environment,
                    by_run[r.id]) for r in runs),
        key=lambda v: order.get(v.version, len(order)))
    return SweepView(sweep, counts, versions, _changes(versions, sweep), [])


def _changes(versions: list[VersionRun], sweep: Sweep) -> list[Change]:
    """Per weight representation, each measured release against the one measured before
    it: the verdict's interval rule at the sweep's threshold."""
    threshold = float(sweep.state.get("threshold", 0.05))
    previous: dict[str, tuple[str, Cell, Result]] = {}
    out: list[Change] = []
    for entry in versions:
        for cell, row in entry.cells:
            if row is None or row.status != "ok" or row.speedup is None:
                continue
            weights = str(cell.spec.get("weights", "?"))
            if weights in previous:
                before, before_cell, before_row = previous[weights]
                try:
                    verdict = judge_results(
                        result_document(row, cell.series_key, cell.spec),
                        result_document(before_row, before_cell.series_key, before_cell.spec),
                        threshold=threshold)
                except VerdictError:
                    verdict = None
                if verdict is not None and verdict.ratio is not None and \
                        verdict.verdict in ("regression", "improvement"):
                    r = verdict.ratio
                    out.append(Change(weights, before, entry.version, r.ratio - 1,
                                      r.ci_low - 1, r.ci_high - 1, verdict.verdict))
            previous[weights] = (entry.version, cell, row)
    return out


# ---- cancelling ----------------------------------------------------------------------------

def cancel_sweep(session: Session, sweep_id: int, by: str,
                 access: ProjectAccess = EVERY_PROJECT) -> Sweep:
    """Mark the sweep cancelled (Conflict if it already ended); the caller commits, then
    calls `stop_queued` (two transactions: the workers lock cell, run, then sweep)."""
    sweep = get_sweep(session, sweep_id, lock=True, access=access)
    if sweep.status != "running":
        raise Conflict(f"{sweep.kind} {sweep_id} is {sweep.status}; only a running one can "
                       "be cancelled")
    sweep.status = CANCELLED
    sweep.finished_at = _now()
    stopped = f"cancelled by {by}"
    if sweep.kind == "bisect":
        sweep.outcome = f"{stopped}; so far: " + sweep_progress.answer(sweep.state, stopped)
    else:
        sweep.outcome = stopped
    session.flush()
    return sweep


def stop_queued(session: Session, sweep_id: int, settings: Settings | None = None) -> int:
    """Fail the cancelled sweep's cells that have not started; returns how many. A cell
    already measuring is stopped by its worker after its current child process."""
    settings = settings or get_settings()
    cells = session.execute(
        select(Cell.id, Cell.run_id).join(Run, Run.id == Cell.run_id)
        .where(Run.sweep_id == sweep_id, Cell.status == "queued").order_by(Cell.id)).all()
    for cell_id, _ in cells:
        fail_cell(session, cell_id, f"cancelled: sweep {sweep_id} was cancelled before this "
                  "cell started")
    for run_id in dict.fromkeys(run_id for _, run_id in cells):
        finish_run_if_complete(session, run_id, settings=settings)
    return len(cells)


def unfinished_runs(session: Session, sweep_id: int) -> int:
    return session.scalar(select(func.count()).select_from(Run).where(
        Run.sweep_id == sweep_id, Run.status.not_in(RUN_TERMINAL))) or 0
