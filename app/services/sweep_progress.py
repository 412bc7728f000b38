"""What happens when a run of a sweep or a bisect finishes: its verdict, the sweep's
status, a bisect's next step and, in the end, its answer.

Both make runs of kind "sweep" (`new_run`), whose results are measurements of other
releases on purpose: they are no points of their series, no baseline, and open or resolve
no regression. `app.services.runs.on_run_finished` hands such a run here instead of to
detection, inside the transaction that finished it (the sweep row is locked after the run:
lock order cell, run, sweep).

A sweep made all its runs at once (app.services.sweeps); each finished run gets its
speedups as reasons and the sweep is done when its last run ends.

A bisect measures one run at a time, each decided by the adaptive measurement against the
bisect's own reference, and each finished step chooses the next:

1. "good": the good environment, measured first in the bisect (the reference every later
   step is judged against, so all of them are measured on the same days on this machine);
2. "bad": every differing package at its bad version; not slower -> the drop does not
   reproduce and the bisect says so;
3. "probe" (only when several packages differ): each package alone at its bad version,
   the others held at their good ones; the ones that make it slower "moved";
4. "bisect": for each package that moved, binary search over the releases between its
   good and bad versions (read from the package index), the others held at good. A step
   judged slower beyond the threshold is bad, one within it good; a step that could not
   be measured (no wheel, a failed build) is skipped like `git bisect skip`; an
   undecided one ends that package's search with the range still in doubt.

The answer ("first slower in onnxruntime X (Y fine): -N% [CI]") is the sweep's outcome
and, for a bisect of a regression, is added to the regression's evidence. The number of
steps is bounded by the bisect's max_runs; a cancelled bisect takes no further step.

The next step's run is created in the finishing transaction and sent after its commit
through app.ports (as confirmation's re-measures are): a worker never receives an id it
cannot find, and a failed send leaves the cells to the reconciler. Flushes, never commits.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import flag_modified

from app.config import Settings
from app.detection.verdict import judge_results
from app.detection.verdict_types import VerdictError
from app.models import RUN_TERMINAL, Cell, Regression, Result, Run, Sweep
from app.schemas import EnvironmentIn
from app.services import after_commit
from app.services.common import (
    canonical_environment,
    canonical_hash,
    get_or_create_environment,
)
from app.services.documents import result_document
from benchmarks.stats import Reference, StatsError, log_half_width

log = logging.getLogger(__name__)

PENDING_CELLS = "sweep cells"  # the after-commit key of a bisect's next step
MAX_REASONS = 50
# A step's outcome as the verdict of its run.
OUTCOME_VERDICT = {"good": "pass", "bad": "regression", "inconclusive": "inconclusive",
                   "failed": "error"}


def _now() -> datetime:
    return datetime.now(timezone.utc)


def pins_text(pins: list[str]) -> str:
    return ", ".join(pins) if pins else "the worker's own packages"


def pct(value: float) -> str:
    return f"{value * 100:+.1f}%"


# ---- runs ----------------------------------------------------------------------------------

def new_run(
    session: Session, sweep: Sweep, pins: list[str], revision: str, key: str,
    settings: Settings, *, send_after_commit: bool,
) -> Run:
    """A run of the sweep's cells in the environment `pins` (validated as any trigger's:
    InvalidRequest naming environment.pins). `key` is unique within the sweep.

    `send_after_commit`: stamp the cells and send them once the caller commits (a bisect's
    next step, made inside a worker's transaction); otherwise the caller sends them
    (app.services.sweeps, which reports a broker outage as a warning)."""
    environment = canonical_environment(EnvironmentIn(pins=pins), settings)
    env = get_or_create_environment(session, environment)
    now = _now()
    run = Run(
        project_id=sweep.project_id, environment_id=env.id, kind="sweep",
        revision=revision[:200], branch=None, trigger=sweep.kind, status="queued",
        reasons=[], idempotency_key=f"sweep:{sweep.id}:{key}",
        request_hash=canonical_hash({"sweep": sweep.id, "key": key,
                                     "environment": environment}),
        matrix=sweep.matrix, sweep_id=sweep.id,
    )
    run.cells = [
        Cell(spec=c["spec"], spec_hash=c["spec_hash"], queue=c["queue"],
             series_key=c["series_key"], status="queued", attempts=0,
             enqueued_at=now if send_after_commit else None)
        for c in sweep.state["cells"]]
    session.add(run)
    session.flush()
    if send_after_commit:
        after_commit.send_after_commit(session, PENDING_CELLS,
                                       [(c.id, c.queue) for c in run.cells], _send, settings)
    return run


def forget_pending(session: Session) -> None:
    """Drop sends requested in a savepoint that was rolled back."""
    after_commit.forget(session, PENDING_CELLS)


def _send(cells: list[tuple[int, str]], settings: Settings) -> None:
    """Hand a committed step's cells to the executor; never raises (see enqueue_cells)."""
    after_commit.enqueue_cells(cells, settings, "sweep")


def _cells(session: Session, run_id: int) -> list[tuple[Cell, Result | None]]:
    return [(c, r) for c, r in session.execute(
        select(Cell, Result).outerjoin(Result, Result.cell_id == Cell.id)
        .where(Cell.run_id == run_id).order_by(Cell.id)).all()]


def _label(cell: Cell) -> str:
    return f"weights {cell.spec.get('weights', '?')}"


def _speedup_text(row: Result) -> str:
    return f"{row.speedup:.3f}x [{row.ci_low:.3f}, {row.ci_high:.3f}]"


def cancelled_cells(session: Session, cell_ids: list[int]) -> dict[int, int]:
    """Of these cells, those whose sweep was cancelled: cell id -> sweep id. A worker asks
    after each child process, so a cancel stops cells already measuring too."""
    if not cell_ids:
        return {}
    return {cell_id: sweep_id for cell_id, sweep_id in session.execute(
        select(Cell.id, Sweep.id).join(Run, Run.id == Cell.run_id)
        .join(Sweep, Sweep.id == Run.sweep_id)
        .where(Cell.id.in_(cell_ids), Sweep.status == "cancelled")).all()}


# ---- the reference a sweep's measurement decides against ----------------------------------

def step_reference(session: Session, run: Run) -> Reference:
    """What the adaptive measurement of this sweep run must settle (see
    app.services.detection.decision_reference): a bisect's later steps, the ratio with the
    good environment at the threshold; a sweep's runs and the good step itself, a speedup
    precise enough to judge the next one at the threshold (there is nothing before them)."""
    sweep = session.get(Sweep, run.sweep_id)
    if sweep is None:
        return Reference(0.05)
    threshold = float(sweep.state.get("threshold", 0.05))
    if sweep.kind != "bisect":
        return Reference(threshold)
    good = _good_result(session, sweep)
    stored = good.stored_speedup() if good is not None else None
    if good is None or good.run_id == run.id or stored is None:
        return Reference(threshold)
    try:
        half = log_half_width(stored)
    except StatsError:
        half = 0.0
    return Reference(threshold, stored.value, half)


def _good_result(session: Session, sweep: Sweep) -> Result | None:
    steps = sweep.state.get("steps") or []
    if not steps or steps[0].get("role") != "good":
        return None
    return session.scalar(select(Result).where(Result.run_id == steps[0]["run_id"],
                                               Result.status == "ok").limit(1))


# ---- a finished run ------------------------------------------------------------------------

def sweep_run_finished(session: Session, run: Run, settings: Settings) -> None:
    """The finished run's verdict and reasons; the sweep's progress (see the module)."""
    sweep = session.execute(
        select(Sweep).where(Sweep.id == run.sweep_id).with_for_update(of=Sweep)
        .execution_options(populate_existing=True)
    ).unique().scalar_one_or_none()
    cells = _cells(session, run.id)
    if sweep is None:
        run.verdict, run.reasons = "error", ["the sweep this run belonged to is gone"]
        return
    if sweep.kind == "bisect":
        _bisect_run_finished(session, sweep, run, cells, settings)
        return
    failed = [c for c, r in cells if c.status == "failed" or (r is not None and
                                                                r.status == "failed")]
    reasons = [f"{_label(c)}: failed: {(c.error or (r.reason if r else None) or '?')[:300]}"
               for c, r in cells if c in failed]
    reasons += [f"{_label(c)}: speedup {_speedup_text(r)}" for c, r in cells
                if r is not None and r.status == "ok"]
    reasons += [f"{_label(c)}: skipped: {(r.reason or '?')[:300]}" for c, r in cells
                if r is not None and r.status == "skipped"]
    run.verdict = "error" if failed else "pass"
    run.reasons = reasons[:MAX_REASONS]
    if sweep.status != "running":
        return
    # this run's own new status is not flushed yet (no autoflush while judging)
    unfinished = session.scalar(
        select(func.count()).select_from(Run)
        .where(Run.sweep_id == sweep.id, Run.id != run.id, Run.status.not_in(RUN_TERMINAL)))
    if not unfinished:
        _finish(session, sweep, "done", sweep_outcome(session, sweep, exclude=None,
                                                      latest=run))


def sweep_outcome(session: Session, sweep: Sweep, *, exclude: int | None,
                  latest: Run | None) -> str:
    """How many versions measured and failed (the per-version changes are on its page)."""
    statuses = dict(session.execute(
        select(Run.id, Run.status).where(Run.sweep_id == sweep.id)).all())
    if latest is not None:
        statuses[latest.id] = latest.status
    failed = sum(1 for s in statuses.values() if s == "failed")
    return (f"{len(statuses)} versions of {sweep.package} measured"
            + (f", {failed} of them failed (their runs say why)" if failed else ""))


def _finish(session: Session, sweep: Sweep, status: str, outcome: str) -> None:
    sweep.status = status
    sweep.outcome = outcome
    sweep.finished_at = _now()
    if sweep.kind == "bisect" and sweep.regression_id is not None:
        regression = session.get(Regression, sweep.regression_id)
        if regression is not None:
            line = f"bisect {sweep.id}: {outcome}"
            regression.evidence = f"{regression.evidence}; {line}" if regression.evidence \
                else line
            regression.reasons = [*(regression.reasons or []), line]
    session.flush()


# ---- bisect --------------------------------------------------------------------------------

def _save(sweep: Sweep, state: dict[str, Any]) -> None:
    sweep.state = state
    flag_modified(sweep, "state")


def _bisect_run_finished(session: Session, sweep: Sweep, run: Run,
                         cells: list[tuple[Cell, Result | None]], settings: Settings) -> None:
    state = dict(sweep.state)
    steps = [dict(s) for s in state.get("steps", [])]
    state["steps"] = steps
    step = next((s for s in steps if s.get("run_id") == run.id), None)
    if step is None:
        run.verdict, run.reasons = "error", ["not a step of its bisect"]
        return
    _judge_step(session, state, step, cells)
    run.verdict = OUTCOME_VERDICT[step["outcome"]]
    run.reasons = [step["sentence"]]
    _save(sweep, state)
    if sweep.status == "running":
        advance(session, sweep, settings)


def _judge_step(session: Session, state: dict[str, Any], step: dict[str, Any],
                cells: list[tuple[Cell, Result | None]]) -> None:
    """The step's outcome: good, bad, inconclusive (the measurement did not decide within
    its budget) or failed (no measurement)."""
    what = _step_name(step)
    if not cells:
        step.update(outcome="failed", error="the run has no cell",
                    sentence=f"{what}: the run has no cell")
        return
    cell, row = cells[0]
    if row is None or row.status != "ok" or row.speedup is None:
        why = ((row.reason if row is not None else None) or cell.error or
               "no result").strip()[:500]
        step.update(outcome="failed", error=why, sentence=f"{what}: not measured: {why}")
        return
    step.update(speedup=row.speedup, ci_low=row.ci_low, ci_high=row.ci_high,
                result_id=row.id)
    if step["role"] == "good":
        step.update(outcome="good", sentence=f"{what}: speedup {_speedup_text(row)} "
                    "(the reference every later step is judged against)")
        return
    good = session.get(Result, state["steps"][0].get("result_id") or 0)
    good_cell = session.get(Cell, good.cell_id) if good is not None else None
    if good is None or good_cell is None:
        step.update(outcome="failed", error="the good environment has no result",
                    sentence=f"{what}: nothing to compare with")
        return
    try:
        verdict = judge_results(
            result_document(row, cell.series_key, cell.spec),
            result_document(good, good_cell.series_key, good_cell.spec),
            threshold=float(state["threshold"]),
            baseline_description=f"the good environment ({pins_text(state['steps'][0]['pins'])})")
    except VerdictError as exc:
        step.update(outcome="inconclusive", error=str(exc)[:500],
                    sentence=f"{what}: cannot be judged: {exc}")
        return
    outcome = {"regression": "bad", "pass": "good", "improvement": "good"}.get(
        verdict.verdict, "inconclusive")
    if verdict.ratio is not None:
        step.update(change=verdict.ratio.ratio - 1, change_low=verdict.ratio.ci_low - 1,
                    change_high=verdict.ratio.ci_high - 1)
    step.update(outcome=outcome, sentence=f"{what}: {verdict.reasons[0]}")


def _step_name(step: dict[str, Any]) -> str:
    if step["role"] == "good":
        return "good environment"
    if step["role"] == "bad":
        return "bad environment"
    if step["role"] == "probe":
        return f"{step['package']} {step['version']} alone"
    return f"{step['package']} {step['version']}"


def _pins(state: dict[str, Any], overrides: dict[str, str]) -> list[str]:
    versions = {**state["base"], **overrides}
    return [f"{name}=={version}" for name, version in sorted(versions.items())]


def advance(session: Session, sweep: Sweep, settings: Settings) -> None:
    """Take the bisect's next step, or finish it with its answer (see the module)."""
    state = dict(sweep.state)
    steps: list[dict[str, Any]] = [dict(s) for s in state.get("steps", [])]
    packages: list[dict[str, Any]] = [dict(p) for p in state["packages"]]
    state["steps"], state["packages"] = steps, packages
    last = steps[-1] if steps else None

    def step(role: str, overrides: dict[str, str], package: str | None = None,
             version: str | None = None, index: int | None = None) -> None:
        if len(steps) >= sweep.max_runs:
            _save(sweep, state)
            _finish(session, sweep, "done", answer(
                state, stopped=f"stopped after {len(steps)} steps, the most this bisect "
                "may take"))
            return
        pins = _pins(state, overrides)
        n = len(steps) + 1
        record: dict[str, Any] = {"n": n, "role": role, "package": package,
                                  "version": version, "index": index, "pins": pins,
                                  "outcome": None}
        what = _step_name(record)
        try:
            run = new_run(session, sweep, pins, f"bisect {sweep.id} step {n}: {what}",
                          f"step-{n}", settings, send_after_commit=True)
        except Exception as exc:  # a pin the policy refuses now: that version is untestable
            record.update(outcome="failed", error=str(exc)[:500],
                          sentence=f"{what}: not measured: {exc}")
            steps.append(record)
            _save(sweep, state)
            if role == "bisect":
                advance(session, sweep, settings)
            else:
                _finish(session, sweep, "failed", f"{what} cannot be measured: {exc}")
            return
        record["run_id"] = run.id
        steps.append(record)
        _save(sweep, state)

    if last is None:
        step("good", {})
        return
    after = {"good": _after_good, "bad": _after_bad, "probe": _after_probe}.get(
        last["role"], _after_bisect_step)
    after(session, sweep, state, last, step)


def _after_good(session: Session, sweep: Sweep, state: dict[str, Any], last: dict[str, Any],
                step: Any) -> None:
    """The good environment measured: the bad one next, unless the good one failed."""
    if last["outcome"] != "good":
        _save(sweep, state)
        _finish(session, sweep, "failed", f"the good environment "
                f"({pins_text(last['pins'])}) could not be measured: {last.get('error')}")
        return
    step("bad", {p["name"]: p["bad"] for p in state["packages"]})


def _after_bad(session: Session, sweep: Sweep, state: dict[str, Any], last: dict[str, Any],
               step: Any) -> None:
    """The bad environment measured: probe each package alone (or bisect the only one),
    unless the drop does not reproduce."""
    outcome, packages = last["outcome"], state["packages"]
    if outcome != "bad":
        _save(sweep, state)
        if outcome == "failed":
            _finish(session, sweep, "failed", f"the bad environment "
                    f"({pins_text(last['pins'])}) could not be measured: {last.get('error')}")
        elif outcome == "good":
            _finish(session, sweep, "done", "the drop does not reproduce, nothing to "
                    f"bisect: {last['sentence']}")
        else:
            _finish(session, sweep, "done", "undecided whether the bad environment is "
                    f"slower, nothing to bisect: {last['sentence']}")
        return
    if len(packages) == 1:
        packages[0].update(status="moved", hi_step=last["n"])
        _bisect_next(session, sweep, state, step)
        return
    state["current"] = 0
    first = packages[0]
    step("probe", {first["name"]: first["bad"]}, first["name"], first["bad"])


def _after_probe(session: Session, sweep: Sweep, state: dict[str, Any], last: dict[str, Any],
                 step: Any) -> None:
    """One package moved alone: the next package's probe, or the bisection of those that
    moved."""
    outcome, packages = last["outcome"], state["packages"]
    current = int(state.get("current", 0))
    package = packages[current]
    package["status"] = {"bad": "moved", "good": "not moved", "failed": "untestable",
                         "inconclusive": "unclear"}[outcome]
    if outcome == "bad":
        package["hi_step"] = last["n"]
    if current + 1 < len(packages):
        state["current"] = current + 1
        nxt = packages[current + 1]
        step("probe", {nxt["name"]: nxt["bad"]}, nxt["name"], nxt["bad"])
        return
    _bisect_next(session, sweep, state, step)


def _after_bisect_step(session: Session, sweep: Sweep, state: dict[str, Any],
                       last: dict[str, Any], step: Any) -> None:
    """A bisection step of the package under search narrows its range."""
    outcome = last["outcome"]
    package = next(p for p in state["packages"] if p["name"] == last["package"])
    index = int(last["index"])
    if outcome == "bad":
        package.update(hi=index, hi_step=last["n"])
    elif outcome == "good":
        package["lo"] = index
    elif outcome == "failed":
        package["skipped"] = [*package.get("skipped", []), index]
    else:
        package.update(status="undecided", undecided_at=index)
    _bisect_next(session, sweep, state, step)


def _bisect_next(session: Session, sweep: Sweep, state: dict[str, Any], step: Any) -> None:
    """The next release to measure for the first package still under search; finish when
    none is left."""
    for package in state["packages"]:
        if package.get("status") != "moved":
            continue
        lo, hi = int(package["lo"]), int(package["hi"])
        skipped = set(package.get("skipped", []))
        candidates = [i for i in range(lo + 1, hi) if i not in skipped]
        if not candidates:
            package["status"] = "found"
            continue
        middle = (lo + hi) / 2
        index = min(candidates, key=lambda i: (abs(i - middle), i))
        version = package["versions"][index]
        step("bisect", {package["name"]: version}, package["name"], version, index)
        return
    _save(sweep, state)
    _finish(session, sweep, "done", answer(state))


def answer(state: dict[str, Any], stopped: str | None = None) -> str:
    """The bisect's answer in words, one clause per package; `stopped` says why it ended
    before the search did (the step limit, a cancel)."""
    steps = {s["n"]: s for s in state["steps"]}
    packages = state["packages"]
    clauses = []
    for package in packages:
        name, versions = package["name"], package["versions"]
        lo, hi = int(package["lo"]), int(package["hi"])
        status = package.get("status")
        if status in ("found", "moved", "undecided"):
            between = [versions[i] for i in range(lo + 1, hi)]
            doubt = [versions[i] for i in range(lo + 1, hi)
                     if i in set(package.get("skipped", []))]
            if status == "found" and not between:
                bad = steps.get(package.get("hi_step"), {})
                change = ""
                if bad.get("change") is not None:
                    change = (f": {pct(bad['change'])} [{pct(bad['change_low'])}, "
                              f"{pct(bad['change_high'])}]")
                clauses.append(f"first slower in {name} {versions[hi]} "
                               f"({versions[lo]} fine){change}")
            elif status == "found":  # only unmeasurable releases left in between
                clauses.append(f"first slower in {name} {versions[hi]} or in one of "
                               f"{', '.join(doubt)}, which could not be measured "
                               f"({versions[lo]} fine)")
            else:
                why = ("undecided at " + versions[int(package["undecided_at"])]
                       if status == "undecided" else stopped or "not finished")
                clauses.append(f"{name}: {why}; first slower in one of "
                               f"{', '.join(versions[lo + 1:hi + 1])} "
                               f"({versions[lo]} fine)")
        elif status == "not moved":
            clauses.append(f"{name} {package['good']} -> {package['bad']} alone: no drop")
        elif status == "untestable":
            clauses.append(f"{name} {package['bad']} alone could not be measured")
        elif status == "unclear":
            clauses.append(f"{name} {package['good']} -> {package['bad']} alone: undecided")
        else:
            clauses.append(f"{name}: not tested")
    if len(packages) > 1:
        moved = [p["name"] for p in packages if p.get("status") in ("found", "moved",
                                                                    "undecided")]
        head = (f"{' and '.join(moved)} moved" if moved else
                "no single package reproduces the drop on its own (it needs several of "
                f"{', '.join(p['name'] for p in packages)} together)")
        clauses.insert(0, head)
    if stopped and not any(p.get("status") in ("found", "moved", "undecided")
                           for p in packages):
        clauses.insert(0, stopped)
    return "; ".join(clauses)
