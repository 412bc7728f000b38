"""Detection wired to the store: each finished run's cells judged against their series'
baseline, regressions opened and auto-resolved, the run's verdict and reasons written.

The statistics live in app.detection (pure functions); this module only chooses what to
compare, following the project's policy (`projects.detection`, see
app.detection.policy.DetectionPolicy):

- baseline "previous" (default): the latest earlier ok result of the series from a run of
  the same project on the same branch;
- "pinned": the series' result in the run a person pinned (`pinned_run_id`);
- "window": the median speedup of the last `window` earlier ok results on the branch.

The threshold is the series' own from `series_thresholds`, else the project's `threshold`.

A cell judged "regression" opens a regression for its series unless one is already active
(open or acknowledged; a partial unique index guarantees at most one). An active regression
is resolved when a later result of the series, judged against the regression's own baseline
(the pre-regression reference, not the regressed result), is no longer a regression.

A triggered run's suspected speed regression is re-measured before its alert opens: this
module asks app.services.confirmation for it and reads its outcome; confirmation never
calls back here (both rebuild result documents with app.services.documents).

Called inside the caller's transaction; flushes, never commits. The events it returns
(regressions opened or resolved) are for the caller to notify AFTER its commit.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.detection.baselines import select_baseline, window_median
from app.detection.evidence import evidence_sentence
from app.detection.notes import in_session_comparison
from app.detection.policy import DetectionPolicy
from app.detection.verdict import combine, judge_cell
from app.detection.verdict_types import (
    Baseline,
    CellVerdict,
    CellVerdictKind,
    HistoryPoint,
    VerdictError,
)
from app.models import REGRESSION_ACTIVE, Cell, Regression, Result, Run, Series, series_point
from app.services import confirmation, sweep_progress
from app.services.documents import result_document
from app.services.policy import project_policy
from benchmarks import identity
from benchmarks.result import BenchResult
from benchmarks.stats import Reference, log_half_width

log = logging.getLogger(__name__)

MAX_REASONS = 50


@dataclass(frozen=True)
class RegressionEvent:
    """A regression that opened or resolved in this transaction (notify after commit)."""

    regression_id: int
    event: Literal["opened", "resolved"]


def _point(session: Session, row: Result) -> HistoryPoint:
    cell = session.get(Cell, row.cell_id)
    run = session.get(Run, row.run_id)
    assert cell is not None and run is not None
    return HistoryPoint(run.revision, result_document(row, cell.series_key, cell.spec))


# ---- baselines ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChosenBaseline:
    baseline: Baseline | None
    result_id: int | None  # the baseline's result row, when it is one result


def choose_baseline(
    session: Session, run: Run, row: Result, policy: DetectionPolicy
) -> ChosenBaseline:
    """The baseline of `row` under the project's policy (None inside: first of its series)."""
    if policy.baseline == "pinned":
        if policy.pinned_run_id is None:
            raise VerdictError("baseline policy 'pinned' but no pinned_run_id is set")
        pinned = session.scalars(
            select(Result).where(Result.run_id == policy.pinned_run_id,
                                 Result.series_id == row.series_id,
                                 series_point())
        ).first()
        if pinned is None:
            raise VerdictError(
                f"the pinned run {policy.pinned_run_id} has no result in this series")
        if pinned.id == row.id:
            return ChosenBaseline(None, None)
        return ChosenBaseline(
            select_baseline("pinned", [], pinned=_point(session, pinned)), pinned.id)
    limit = 1 if policy.baseline == "previous" else policy.window
    earlier = list(session.scalars(
        select(Result).join(Run, Run.id == Result.run_id)
        .where(Result.series_id == row.series_id, Result.id < row.id,
               Result.run_id != run.id, Result.status == "ok",
               series_point(),  # re-measures and sweeps are no baseline
               Run.project_id == run.project_id,
               Run.branch.is_not_distinct_from(run.branch))
        .order_by(Result.id.desc()).limit(limit)
    ))
    history = [_point(session, r) for r in reversed(earlier)]
    baseline = select_baseline(policy.baseline, history, window=policy.window)
    result_id = earlier[0].id if policy.baseline == "previous" and earlier else None
    return ChosenBaseline(baseline, result_id)


# ---- the reference an adaptive measurement decides against -----------------------------------

def decision_reference(session: Session, cell_id: int, series_key: str) -> Reference | None:
    """What a measurement of this cell must settle: its series' baseline under the project's
    policy, with the baseline's own uncertainty, and the series' threshold.

    Looked up by series key among this project's results on the run's branch (the cell's
    result does not exist yet). No baseline yet: a Reference without a speedup (measure
    until precise enough to judge the next run). None for confirm runs, which measure a
    fixed number of processes interleaved.

    The key is found through the project's series (unique on project and key), then the
    series' results newest first (ix_results_series_id_id): matching `cells.series_key`,
    which has no index, scanned every cell ever stored for each cell measured.
    """
    cell = session.get(Cell, cell_id)
    run = session.get(Run, cell.run_id) if cell is not None else None
    if cell is None or run is None or run.kind == "confirm":
        return None
    if run.kind == "sweep":
        return sweep_progress.step_reference(session, run)
    policy = project_policy(run.project)
    threshold = policy.threshold_for(series_key)
    base = (select(Result).join(Series, Series.id == Result.series_id)
            .join(Run, Run.id == Result.run_id)
            .where(Series.project_id == run.project_id, Series.key == series_key,
                   Result.status == "ok", series_point(), Run.project_id == run.project_id))
    if policy.baseline == "pinned":
        if policy.pinned_run_id is None:
            return Reference(threshold)
        pinned = session.scalars(base.where(Result.run_id == policy.pinned_run_id)).first()
        return _reference_of(pinned, threshold)
    earlier = list(session.scalars(
        base.where(Result.run_id != run.id, Run.branch.is_not_distinct_from(run.branch))
        .order_by(Result.id.desc()).limit(1 if policy.baseline == "previous" else policy.window)
    ))
    if policy.baseline == "previous" or not earlier:
        return _reference_of(earlier[0] if earlier else None, threshold)
    values = [r.speedup for r in earlier if r.speedup is not None]
    return Reference(threshold, window_median(values) if values else None, 0.0)


def _reference_of(row: Result | None, threshold: float) -> Reference:
    stored = row.stored_speedup() if row is not None else None
    if row is None or stored is None:
        return Reference(threshold)
    software = identity.of(row.fingerprint)
    return Reference(threshold, stored.value, log_half_width(stored),
                     software=software["digest"] if software else None,
                     environment=str(software["environment"]) if software else None,
                     result_id=row.id)


# ---- the run verdict -------------------------------------------------------------------------

def _remember(cell: Cell, verdict: CellVerdict | None = None, note: str | None = None,
              **extra: Any) -> None:
    """Keep a cell's judgement on the cell: a result never changes once stored, so the cell
    is judged once. Ingest runs grow by one result per POST and are re-combined on each;
    re-judging every earlier cell there (a bootstrap each) made ingest 4x slower.

    A judgement may hold a verdict, a note for the run's reasons, or both; "confirming"
    marks a verdict waiting for its re-measure (app.services.confirmation)."""
    judgement: dict[str, Any] = dict(extra)
    if verdict is not None:
        judgement.update(verdict=verdict.verdict, reasons=list(verdict.reasons),
                         suspect=verdict.suspect)
        if verdict.host_drift:  # the series page marks it; operators are told in the log
            judgement["host_drift"] = True
            log.warning("host drift: cell %s (%s): %s", cell.id, cell.series_key,
                        next((r for r in verdict.reasons if "host drift" in r), ""))
        ratio = verdict.ratio
        if ratio is not None:  # before and after, for CI summaries and the run page
            comparison = {
                "baseline_speedup": ratio.baseline_speedup, "speedup": ratio.new_speedup,
                "ratio": ratio.ratio, "ci_low": ratio.ci_low, "ci_high": ratio.ci_high}
            if all(math.isfinite(v) for v in comparison.values()):
                judgement["comparison"] = comparison
    if note is not None:
        judgement["note"] = note
    cell.judgement = judgement


@dataclass(frozen=True)
class _Judged:
    row: Result
    document: BenchResult
    chosen: ChosenBaseline
    verdict: CellVerdict


def _judge_result(
    session: Session, run: Run, cell: Cell, row: Result, policy: DetectionPolicy
) -> _Judged | CellVerdict:
    """The cell's result against its baseline; a bare CellVerdict when no baseline can be
    had. Deterministic (fixed bootstrap seed): judging the same rows again gives the same
    verdict, which the second pass of a confirmation relies on."""
    document = result_document(row, cell.series_key, cell.spec)
    try:
        chosen = choose_baseline(session, run, row, policy) if row.status == "ok" \
            else ChosenBaseline(None, None)
    except VerdictError as exc:
        return CellVerdict("error", (f"no baseline: {exc}",))
    verdict = judge_cell(document, chosen.baseline,
                         threshold=policy.threshold_for(cell.series_key))
    if verdict.verdict == "regression":
        verdict = _what_changed(verdict, chosen, document)
    return _Judged(row, document, chosen, verdict)


def _what_changed(verdict: CellVerdict, chosen: ChosenBaseline,
                  document: BenchResult) -> CellVerdict:
    """A regression's reasons say what changed in the evidence against its baseline: a
    regression at once, and a suspected drop its re-measure confirmed."""
    before = chosen.baseline.result if chosen.baseline is not None else None
    if before is None:
        return verdict
    return CellVerdict(verdict.verdict, (*verdict.reasons, "what changed: "
                                         f"{evidence_sentence(before, document)}"),
                       verdict.ratio, verdict.suspect)


def _with_reason(verdict: CellVerdict, reason: str, *, first: bool = False,
                 kind: CellVerdictKind | None = None) -> CellVerdict:
    reasons = (reason, *verdict.reasons) if first else (*verdict.reasons, reason)
    return CellVerdict(kind or verdict.verdict, reasons, verdict.ratio, verdict.suspect)


def _needs_remeasure(judged: _Judged) -> bool:
    """A regression for a speed drop alone, or an undecided cell whose point estimate is
    past the threshold (suspect): re-measuring tells noise from a real drop. An accuracy
    failure is deterministic and opens at once."""
    accuracy = judged.document.accuracy
    verdict = judged.verdict
    if verdict.verdict == "regression" and \
            in_session_comparison(judged.document, judged.chosen.baseline) is not None:
        return False  # both environments were measured in turns already: that is the check
    speed_drop = verdict.verdict == "regression" or (
        verdict.verdict == "inconclusive" and verdict.suspect)
    return speed_drop and (accuracy is None or accuracy.passed)


def judge_run(
    session: Session, run_id: int, settings: Settings | None = None
) -> list[RegressionEvent]:
    """Set the run's verdict and reasons; open and resolve regressions. Returns the events.

    Cells judged by an earlier call (ingest runs are re-combined on every posted result)
    keep their judgement; only cells new since then are judged, and only they can open or
    resolve a regression. A triggered run's candidate regression may instead be sent for
    confirmation (app.services.confirmation); the call that finds its re-measure ended
    finishes judging that cell.
    """
    settings = settings or get_settings()
    run = session.get(Run, run_id)
    if run is None:
        return []
    if run.kind == "confirm":
        _judge_confirm_run(session, run)
        return []
    policy = project_policy(run.project)
    cells = session.scalars(select(Cell).where(Cell.run_id == run_id).order_by(Cell.id)).all()
    verdicts: dict[str, CellVerdict] = {}
    notes: list[str] = []
    events: list[RegressionEvent] = []
    for cell in cells:
        label = cell.series_key
        known = cell.judgement
        if known is not None and "confirming" not in known:
            if "verdict" in known:
                verdicts[label] = CellVerdict(known["verdict"], tuple(known["reasons"]),
                                              None, bool(known.get("suspect", False)))
            if "note" in known:
                notes.append(known["note"])
            continue
        row = session.scalar(select(Result).where(Result.cell_id == cell.id))
        if row is None:
            if cell.status == "failed":
                verdicts[label] = CellVerdict(
                    "error", (f"cell failed: {(cell.error or 'no reason given')[:300]}",))
                _remember(cell, verdicts[label])
            continue
        if row.status == "skipped":
            notes.append(f"{label}: skipped: {(row.reason or 'no reason given')[:300]}")
            _remember(cell, note=notes[-1])
            continue
        judged = _judge_result(session, run, cell, row, policy)
        if isinstance(judged, CellVerdict):
            verdicts[label] = judged
            _remember(cell, judged)
            continue
        verdict = judged.verdict
        if row.status == "ok" and _needs_remeasure(judged) \
                and _would_open(session, run, row, judged.chosen):
            verdict, confirming = _second_opinion(session, run, cell, row, judged, known,
                                                  policy, settings)
            if confirming is not None:
                verdicts[label] = verdict
                _remember(cell, verdict, confirming=confirming)
                continue
        verdicts[label] = verdict
        if judged.chosen.result_id is not None:  # the run page diffs evidence against it
            _remember(cell, verdict, baseline_result_id=judged.chosen.result_id)
        else:
            _remember(cell, verdict)
        if row.status == "ok":
            events += _track_regressions(session, run, row, judged.document, verdict,
                                         judged.chosen, policy)
    run_verdict = combine(verdicts)
    run.verdict = run_verdict.verdict
    reasons = list(run_verdict.reasons) + notes
    if len(reasons) > MAX_REASONS:
        reasons = [*reasons[: MAX_REASONS - 1], f"... and {len(reasons) - MAX_REASONS + 1} more"]
    run.reasons = reasons
    return events


def _second_opinion(session: Session, run: Run, cell: Cell, row: Result, judged: _Judged,
                    known: dict[str, Any] | None, policy: DetectionPolicy, settings: Settings
                    ) -> tuple[CellVerdict, dict[str, int] | None]:
    """A suspect's verdict once its re-measure is in (`known`: the second pass), or its
    re-measure queued (with the runs it queued), or why it could not be re-measured."""
    verdict = judged.verdict
    suspect_only = verdict.verdict == "inconclusive"
    if known is not None:  # the second pass: the re-measure has ended
        threshold = policy.threshold_for(cell.series_key)
        outcome = confirmation.pooled_outcome(
            verdict.ratio, confirmation.confirmation_outcome(session, cell, threshold),
            threshold)
        if outcome.verdict in ("pass", "improvement"):
            what = "suspected drop" if suspect_only else "regression"
            return _with_reason(verdict, f"{what} not confirmed: re-measure shows "
                                f"{outcome.sentence}", first=True, kind="pass"), None
        if outcome.verdict == "regression":
            confirmed = _with_reason(verdict, f"confirmed by re-measure: {outcome.sentence}",
                                     kind="regression")
            return (_what_changed(confirmed, judged.chosen, judged.document) if suspect_only
                    else confirmed), None
        if outcome.verdict == "inconclusive":
            return _with_reason(verdict, f"re-measure inconclusive: {outcome.sentence}",
                                first=True, kind="inconclusive"), None
        # the re-measure failed: a real regression must not hide behind it
        return _with_reason(verdict, f"unconfirmed: {outcome.sentence}"), None
    why_not = confirmation.why_unconfirmable(run, policy, judged.chosen.result_id, settings)
    if why_not is None:
        assert judged.chosen.result_id is not None
        candidate, baseline = confirmation.request_confirmation(
            session, run, cell, row, judged.chosen.result_id, policy, settings)
        what = "drop suspected" if suspect_only else "regression suspected"
        return _with_reason(verdict, f"{what}: confirming (re-measure queued as runs "
                            f"{candidate.id} and {baseline.id})", first=True), {
            "candidate_run_id": candidate.id, "baseline_run_id": baseline.id}
    return _with_reason(verdict, f"{'not re-measured' if suspect_only else 'unconfirmed'}: "
                        f"{why_not}"), None


def _judge_confirm_run(session: Session, run: Run) -> None:
    """A confirm run is no verdict of its own: the run whose cell it re-measures judges it.
    Its reasons say what it is; "error" if its measurement failed."""
    cells = session.scalars(select(Cell).where(Cell.run_id == run.id)).all()
    failed = [c for c in cells if c.status == "failed"]
    origin = session.get(Cell, run.confirms_cell_id) if run.confirms_cell_id else None
    about = (f"re-measure in the {confirmation.side_of(run)} environment, to confirm a "
             f"candidate regression of run {origin.run_id if origin else '?'} "
             f"({origin.series_key if origin else 'its cell is gone'})")
    run.verdict = "error" if failed else "pass"
    run.reasons = [about, *(f"cell failed: {(c.error or 'no reason given')[:300]}"
                            for c in failed)]


def _would_open(session: Session, run: Run, row: Result, chosen: ChosenBaseline) -> bool:
    """Whether `_track_regressions` would open a regression for this regressed result."""
    if chosen.baseline is None:
        return False
    if session.scalars(select(Regression.id).where(
            Regression.project_id == run.project_id, Regression.series_id == row.series_id,
            Regression.status.in_(REGRESSION_ACTIVE))).first() is not None:
        return False
    return session.scalars(select(Regression.id)
                           .where(Regression.opened_by_result_id == row.id)).first() is None


# ---- regressions -------------------------------------------------------------------------------

def _now() -> datetime:
    return datetime.now(timezone.utc)


def _active(session: Session, project_id: int, series_id: int) -> Regression | None:
    return session.scalars(
        select(Regression).where(Regression.project_id == project_id,
                                 Regression.series_id == series_id,
                                 Regression.status.in_(REGRESSION_ACTIVE))
        .with_for_update(of=Regression)
    ).first()


def _track_regressions(
    session: Session, run: Run, row: Result, document: BenchResult, verdict: CellVerdict,
    chosen: ChosenBaseline, policy: DetectionPolicy,
) -> list[RegressionEvent]:
    active = _active(session, run.project_id, row.series_id)
    if active is not None:
        if row.id <= active.opened_by_result_id or verdict.verdict == "regression":
            # A result from before the regression (an ingest run re-judged as it grows)
            # says nothing about recovery; a regressed one says it has not recovered.
            return []
        if _recovered(session, active, document):
            active.status = "resolved"
            active.resolved_at = _now()
            active.resolved_by_result_id = row.id
            session.flush()
            return [RegressionEvent(active.id, "resolved")]
        return []
    if verdict.verdict != "regression" or chosen.baseline is None:
        return []
    if session.scalars(select(Regression.id)
                       .where(Regression.opened_by_result_id == row.id)).first() is not None:
        return []  # opened by this result before, since resolved by hand
    before = chosen.baseline.result
    regression = Regression(
        project_id=run.project_id, series_id=row.series_id, opened_by_run_id=run.id,
        opened_by_result_id=row.id, baseline_result_id=chosen.result_id,
        baseline_kind=chosen.baseline.kind, baseline_description=chosen.baseline.description,
        baseline_speedup=chosen.baseline.speedup,
        threshold=policy.threshold_for(document.series_key), status="open",
        magnitude=(verdict.ratio.ratio - 1) if verdict.ratio else None,
        evidence=evidence_sentence(before, document) if before is not None else "",
        reasons=list(verdict.reasons),
    )
    try:
        with session.begin_nested():
            session.add(regression)
    except IntegrityError:
        # Another run opened this series' regression at the same moment: one is enough.
        log.info("series %s: regression already opened concurrently", row.series_id)
        return []
    return [RegressionEvent(regression.id, "opened")]


def _recovered(session: Session, regression: Regression, document: BenchResult) -> bool:
    """Whether `document`, judged against the regression's pre-regression baseline, passes."""
    reference: BenchResult | None = None
    if regression.baseline_result_id is not None:
        base_row = session.get(Result, regression.baseline_result_id)
        if base_row is not None:
            reference = _point(session, base_row).result
    if reference is None and regression.baseline_speedup is None:
        return False
    baseline = Baseline(
        "pinned" if regression.baseline_kind == "pinned" else
        "window" if regression.baseline_kind == "window" else "previous",
        regression.baseline_description,
        reference.speedup.value if reference and reference.speedup
        else float(regression.baseline_speedup or 0.0),
        reference,
    )
    try:
        verdict = judge_cell(document, baseline, threshold=regression.threshold)
    except VerdictError:
        return False
    return verdict.verdict in ("pass", "improvement")
