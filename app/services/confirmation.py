"""Confirm before alarming: a triggered run's candidate regression is re-measured before
an alert opens.

A regression verdict rests on two results measured at different times, and a shared
machine drifts between them (another job, thermal state, a noisy neighbour). So when a
cell of a triggered run would open a regression for a speed drop, detection asks for a
confirmation instead (`request_confirmation`):

- two runs of kind "confirm", one per side, each with one cell of the same spec measured
  in `policy.confirm_processes` processes: "candidate" in the run's environment and
  "baseline" in the environment of the run the baseline result came from. Both carry
  `confirms_cell_id` (the cell under suspicion) and the idempotency key
  `confirm:<cell id>:<side>`, so a cell is confirmed at most once.
- ONE task measures both (workers.confirm): child processes alternate between the two
  environments (candidate 1, baseline 1, candidate 2, ...), so both sides see the same
  stretch of machine time. Only the candidate cell is sent to the executor; either cell's
  id reaching a worker (the reconciler re-sends cells by id) runs the pair.
- The original run stays "running" meanwhile (`confirmation_pending`), so CI waiting on it
  waits for the confirmation; its reasons say "regression suspected: confirming".
- When both confirm runs have ended, finishing them finishes the original run again, and
  detection reads the outcome (`confirmation_outcome`): the re-measured candidate speedup
  against the re-measured baseline speedup, bootstrapped over their rounds
  (app.detection.verdict.judge_samples). A drop beyond the threshold confirms the
  regression (the alert opens); otherwise the cell passes with "not confirmed"; a
  re-measure that failed opens the alert marked unconfirmed, since a failed check must
  not hide a real regression.

The re-measured results are stored like any result (with `confirms_result_id` set), but
they are never points of their series nor anyone's baseline.

Regressions that cannot be confirmed here open at once, with a reason that says why
they are unconfirmed (`why_unconfirmable`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.detection.policy import DetectionPolicy
from app.detection.verdict import VerdictError, judge_results
from app.models import RUN_TERMINAL, Cell, Result, Run
from app.services import after_commit
from app.services.common import canonical_hash, spec_hash
from app.services.documents import result_document
from app.services.policy import project_policy
from benchmarks.spec import BenchSpec

log = logging.getLogger(__name__)

Side = Literal["candidate", "baseline"]
SIDES: tuple[Side, Side] = ("candidate", "baseline")
PENDING_CONFIRMATIONS = "confirmation cells"  # the after-commit key of confirm cells
EXECUTING = ("local", "celery")


def confirm_key(cell_id: int, side: Side) -> str:
    return f"confirm:{cell_id}:{side}"


def side_of(run: Run) -> Side:
    return "baseline" if run.idempotency_key.endswith(":baseline") else "candidate"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def why_unconfirmable(
    run: Run, policy: DetectionPolicy, baseline_result_id: int | None, settings: Settings
) -> str | None:
    """Why this run's candidate regression cannot be re-measured here; None if it can."""
    if run.kind == "ingest":
        return "measured elsewhere (an ingested result), so it cannot be re-measured here"
    if not policy.confirm:
        return "confirmation is off in the project's detection policy"
    if settings.executor not in EXECUTING:
        return f"this server runs no cells (executor {settings.executor!r})"
    if baseline_result_id is None:
        return ("the baseline is a window of results, not one result whose environment "
                "could be re-measured")
    return None


def request_confirmation(
    session: Session, run: Run, cell: Cell, row: Result, baseline_result_id: int,
    policy: DetectionPolicy, settings: Settings,
) -> tuple[Run, Run]:
    """Create the two confirm runs for `cell` (or return them if they exist); the
    candidate cell is sent to the executor after the caller commits."""
    base_row = session.get(Result, baseline_result_id)
    base_run = session.get(Run, base_row.run_id) if base_row is not None else None
    if base_row is None or base_run is None:
        raise VerdictError(f"baseline result {baseline_result_id} is gone")
    spec = BenchSpec.from_dict(cell.spec)
    processes = max(policy.confirm_processes, spec.timing.processes)
    # The pair adds processes while undecided (workers.confirm): up to the cell's own limit,
    # and at least twice its start, since it is the last word before an alert.
    spec = replace(spec, timing=replace(
        spec.timing, processes=processes,
        max_processes=max(spec.timing.max_processes, 2 * processes)))
    now = _now()
    made: list[Run] = []
    for side in SIDES:
        key = confirm_key(cell.id, side)
        existing = session.scalars(
            select(Run).where(Run.project_id == run.project_id, Run.idempotency_key == key)
        ).first()
        if existing is not None:
            made.append(existing)
            continue
        source = run if side == "candidate" else base_run
        confirm = Run(
            project_id=run.project_id, environment_id=source.environment_id, kind="confirm",
            revision=source.revision, branch=source.branch, trigger="confirm",
            status="queued", reasons=[], idempotency_key=key,
            request_hash=canonical_hash({"confirm": cell.id, "side": side}),
            matrix={"confirms": {"run_id": run.id, "cell_id": cell.id, "result_id": row.id,
                                 "baseline_result_id": baseline_result_id, "side": side}},
            confirms_cell_id=cell.id,
        )
        # Stamped now: the candidate cell is sent right after the commit and the baseline
        # cell never on its own (the pair's task claims it), so neither looks "never
        # enqueued" to the reconciler. A failed send clears the stamp again.
        confirm.cells = [Cell(spec=spec.to_dict(), spec_hash=spec_hash(spec), queue=cell.queue,
                              series_key=cell.series_key, status="queued", attempts=0,
                              enqueued_at=now)]
        session.add(confirm)
        made.append(confirm)
    session.flush()
    lead = made[0].cells[0]
    if lead.status == "queued":
        after_commit.send_after_commit(session, PENDING_CONFIRMATIONS, [(lead.id, lead.queue)],
                                       send, settings)
    return made[0], made[1]


def confirmation_pending(session: Session, run_id: int) -> bool:
    """Whether a confirm run for a cell of this run has not ended yet."""
    return session.scalar(
        select(Run.id).join(Cell, Cell.id == Run.confirms_cell_id)
        .where(Cell.run_id == run_id, Run.kind == "confirm",
               Run.status.not_in(RUN_TERMINAL))
        .limit(1)
    ) is not None


@dataclass(frozen=True)
class ConfirmationPair:
    """The two cells one confirmation task measures, candidate first."""

    candidate_cell_id: int
    baseline_cell_id: int


def pair_threshold(session: Session, pair: ConfirmationPair) -> float | None:
    """The threshold the pair is judged at (the confirmed cell's series threshold under its
    project's policy), which its measurement must settle; None if the cells are gone."""
    cell = session.get(Cell, pair.candidate_cell_id)
    run = session.get(Run, cell.run_id) if cell is not None else None
    confirmed = (session.get(Cell, run.confirms_cell_id)
                 if run is not None and run.confirms_cell_id is not None else None)
    if cell is None or run is None or confirmed is None:
        return None
    return project_policy(run.project).threshold_for(confirmed.series_key)


def confirmation_pair(session: Session, cell_id: int) -> ConfirmationPair | None:
    """The pair a confirm cell belongs to; None if `cell_id` is not a confirm cell."""
    cell = session.get(Cell, cell_id)
    if cell is None:
        return None
    run = session.get(Run, cell.run_id)
    if run is None or run.kind != "confirm" or run.confirms_cell_id is None:
        return None
    cells = _side_cells(session, run.confirms_cell_id)
    if set(cells) != set(SIDES):
        return None
    return ConfirmationPair(cells["candidate"].id, cells["baseline"].id)


def _side_cells(session: Session, confirms_cell_id: int) -> dict[Side, Cell]:
    rows = session.execute(
        select(Run, Cell).join(Cell, Cell.run_id == Run.id)
        .where(Run.confirms_cell_id == confirms_cell_id, Run.kind == "confirm")
    ).unique().all()
    return {side_of(r): c for r, c in rows}


@dataclass(frozen=True)
class ConfirmationOutcome:
    # The re-measure's own verdict (pass, improvement, regression, inconclusive); None: it
    # failed and nothing was learnt.
    verdict: str | None
    sentence: str

    @property
    def confirmed(self) -> bool | None:
        """True: the drop is real; False: it is not; None: the re-measure says nothing."""
        if self.verdict is None or self.verdict == "inconclusive":
            return None
        return self.verdict == "regression"


def confirmation_outcome(
    session: Session, cell: Cell, threshold: float
) -> ConfirmationOutcome:
    """The re-measured candidate speedup judged against the re-measured baseline one."""
    cells = _side_cells(session, cell.id)
    results: dict[Side, Result] = {}
    for side in SIDES:
        side_cell = cells.get(side)
        if side_cell is None:
            return ConfirmationOutcome(None, f"the {side} re-measure is missing")
        row = session.scalar(select(Result).where(Result.cell_id == side_cell.id))
        if row is None or row.status != "ok":
            why = (row.reason if row is not None else None) or side_cell.error or "no result"
            return ConfirmationOutcome(None, f"the {side} re-measure failed: {why[:300]}")
        results[side] = row
    cand, base = results["candidate"], results["baseline"]
    base_run = session.get(Run, base.run_id)
    processes = _processes(cand) or BenchSpec.from_dict(cells["candidate"].spec).timing.processes
    cand_doc = result_document(cand, cells["candidate"].series_key, cells["candidate"].spec)
    base_doc = result_document(base, cells["baseline"].series_key, cells["baseline"].spec)
    try:
        verdict = judge_results(
            cand_doc, base_doc, threshold=threshold,
            baseline_description=(
                f"the baseline's environment ({base_run.revision if base_run else '?'}) "
                f"re-measured alternately with it, {processes} processes each"),
        )
    except VerdictError as exc:
        return ConfirmationOutcome(None, f"the re-measure cannot be judged: {exc}")
    return ConfirmationOutcome(verdict.verdict, verdict.reasons[0])


def _processes(row: Result) -> int | None:
    """How many processes a re-measured side took (adaptive pairs add some)."""
    evidence = row.evidence if isinstance(row.evidence, dict) else {}
    per_process = evidence.get("processes")
    return len(per_process) if isinstance(per_process, list) and per_process else None


def forget_pending(session: Session) -> None:
    """Drop confirmations requested in a savepoint that was rolled back."""
    after_commit.forget(session, PENDING_CONFIRMATIONS)


def send(cells: list[tuple[int, str]], settings: Settings) -> None:
    """Hand committed confirm cells to the executor; never raises (see enqueue_cells)."""
    after_commit.enqueue_cells(cells, settings, "confirmation")
