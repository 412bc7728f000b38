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

On a GPU fleet the pair is measured on `settings.confirm_gpus` GPUs of the class at once
(`confirmation_targets`): each confirm run then holds one cell per GPU, the i-th candidate
cell paired with the i-th baseline cell, each pair sent to one worker's own queue, the GPU
that measured the suspect result first. The outcome counts the GPUs it reproduces on
("reproduces on 2 of 2 H100s"): confirmed when it reproduces on at least as many GPUs as
show no drop, since two GPUs of one class differ by a few tenths of a percent and a release
that is slower is slower on each.

The re-measured results are stored like any result (with `confirms_result_id` set), but
they are never points of their series nor anyone's baseline.

Regressions that cannot be confirmed here open at once, with a reason that says why
they are unconfirmed (`why_unconfirmable`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.detection.evidence import device_label
from app.detection.policy import DetectionPolicy
from app.detection.verdict import judge_results
from app.detection.verdict_types import RatioEstimate, VerdictError, signed_percent
from app.models import RUN_TERMINAL, Cell, Result, Run
from app.services import after_commit
from app.services.common import canonical_hash, spec_hash
from app.services.documents import result_document
from app.services.policy import project_policy
from benchmarks import stats
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
    targets = confirmation_targets(session, cell, row, settings)
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
        # one cell per GPU, the same spec: a run's cells are unique by spec hash, so the
        # second GPU's and later ones hash the spec with their place
        confirm.cells = [Cell(spec=spec.to_dict(),
                              spec_hash=spec_hash(spec) if i == 0 else canonical_hash(
                                  {"spec": spec_hash(spec), "gpu": i}),
                              queue=queue, series_key=cell.series_key, status="queued",
                              attempts=0, enqueued_at=now)
                         for i, queue in enumerate(targets)]
        session.add(confirm)
        made.append(confirm)
    session.flush()
    leads = [(lead.id, lead.queue) for lead in made[0].cells if lead.status == "queued"]
    if leads:
        after_commit.send_after_commit(session, PENDING_CONFIRMATIONS, leads, send, settings)
    return made[0], made[1]


def confirmation_targets(session: Session, cell: Cell, row: Result,
                         settings: Settings) -> list[str]:
    """The queues a confirmation's pairs go to: the cell's own queue (one pair), or on a
    fleet the own queues of `settings.confirm_gpus` live workers of it, the worker on the
    GPU that measured the suspect result first."""
    from app.services.workers import is_direct_queue, list_workers

    if settings.confirm_gpus < 2 or cell.spec.get("device") != "cuda":
        return [cell.queue]
    fp = row.fingerprint if isinstance(row.fingerprint, dict) else {}
    candidates: list[tuple[bool, str, str]] = []
    for worker in list_workers(session, settings):
        own = [q for q in worker.queues if is_direct_queue(q)]
        if worker.state != "alive" or worker.kind != "celery" or cell.queue not in \
                worker.queues or not own:
            continue
        measured_it = worker.host == fp.get("hostname") and any(
            g.get("index") == fp.get("gpu_index") for g in worker.gpus)
        candidates.append((not measured_it, worker.name, own[0]))
    if len(candidates) < 2:
        return [cell.queue]
    return [queue for _, _, queue in sorted(candidates)[:settings.confirm_gpus]]


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
    if set(cells) != set(SIDES) or len(cells["candidate"]) != len(cells["baseline"]):
        return None
    for candidate, baseline in zip(cells["candidate"], cells["baseline"], strict=True):
        if cell_id in (candidate.id, baseline.id):
            return ConfirmationPair(candidate.id, baseline.id)
    return None


def _side_cells(session: Session, confirms_cell_id: int) -> dict[Side, list[Cell]]:
    """Each side's cells, in the order they were made: the i-th of each side is a pair."""
    rows = session.execute(
        select(Run, Cell).join(Cell, Cell.run_id == Run.id)
        .where(Run.confirms_cell_id == confirms_cell_id, Run.kind == "confirm")
        .order_by(Cell.id)
    ).unique().all()
    out: dict[Side, list[Cell]] = {}
    for r, c in rows:
        out.setdefault(side_of(r), []).append(c)
    return out


@dataclass(frozen=True)
class ConfirmationOutcome:
    # The re-measure's own verdict (pass, improvement, regression, inconclusive); None: it
    # failed and nothing was learnt.
    verdict: str | None
    sentence: str
    # the re-measure's ratio and interval (one pair; None when several GPUs are counted)
    estimate: RatioEstimate | None = None

    @property
    def confirmed(self) -> bool | None:
        """True: the drop is real; False: it is not; None: the re-measure says nothing."""
        if self.verdict is None or self.verdict == "inconclusive":
            return None
        return self.verdict == "regression"


def confirmation_outcome(
    session: Session, cell: Cell, threshold: float
) -> ConfirmationOutcome:
    """The re-measured candidate speedup judged against the re-measured baseline one, on
    each GPU the pair was measured on; several GPUs are counted (`_count`)."""
    cells = _side_cells(session, cell.id)
    for side in SIDES:
        if not cells.get(side):
            return ConfirmationOutcome(None, f"the {side} re-measure is missing")
    pairs = list(zip(cells["candidate"], cells["baseline"], strict=False))
    outcomes = [_pair_outcome(session, cand, base, threshold) for cand, base in pairs]
    if len(outcomes) == 1:
        return outcomes[0][0]
    return _count([o for o, _ in outcomes], [where for _, where in outcomes])


def _pair_outcome(session: Session, cand_cell: Cell, base_cell: Cell, threshold: float
                  ) -> tuple[ConfirmationOutcome, dict[str, Any]]:
    """One pair's verdict, and where it was measured (the candidate result's fingerprint)."""
    results: dict[Side, Result] = {}
    where: dict[str, Any] = {}
    pair: tuple[tuple[Side, Cell], ...] = (("candidate", cand_cell), ("baseline", base_cell))
    for side, side_cell in pair:
        row = session.scalar(select(Result).where(Result.cell_id == side_cell.id))
        if row is None or row.status != "ok":
            why = (row.reason if row is not None else None) or side_cell.error or "no result"
            return ConfirmationOutcome(None, f"the {side} re-measure failed: {why[:300]}"), where
        results[side] = row
    cand, base = results["candidate"], results["baseline"]
    fp = cand.fingerprint if isinstance(cand.fingerprint, dict) else {}
    where = {"gpu_index": fp.get("gpu_index"), "hostname": fp.get("hostname"),
             "device_class": fp.get("device_class")}
    base_run = session.get(Run, base.run_id)
    processes = _processes(cand) or BenchSpec.from_dict(cand_cell.spec).timing.processes
    cand_doc = result_document(cand, cand_cell.series_key, cand_cell.spec)
    base_doc = result_document(base, base_cell.series_key, base_cell.spec)
    try:
        verdict = judge_results(
            cand_doc, base_doc, threshold=threshold,
            baseline_description=(
                f"the baseline's environment ({base_run.revision if base_run else '?'}) "
                f"re-measured alternately with it, {processes} processes each"),
        )
    except VerdictError as exc:
        return ConfirmationOutcome(None, f"the re-measure cannot be judged: {exc}"), where
    return ConfirmationOutcome(verdict.verdict, verdict.reasons[0], verdict.ratio), where


def gpu_label(where: dict[str, Any]) -> str:
    """'H100' from the device class 'nvidia-h100', for "2 of 2 H100s"."""
    device_class = str(where.get("device_class") or "")
    return device_class.split("-", 1)[-1].upper() if device_class else "GPU"


def _count(outcomes: list[ConfirmationOutcome], places: list[dict[str, Any]]
           ) -> ConfirmationOutcome:
    """Several GPUs' verdicts as one: a regression when it reproduces on at least as many
    GPUs as show none (a split opens the alert, saying so: a release slower on one GPU of a
    class is worth a look); no regression when more GPUs show none; inconclusive when none
    decided; failed (None) when every pair failed."""
    measured = len(outcomes)
    reproduced = [o for o in outcomes if o.verdict == "regression"]
    clean = [o for o in outcomes if o.verdict in ("pass", "improvement")]
    labels = {gpu_label(w) for w in places if w}
    label = labels.pop() if len(labels) == 1 else "GPU"
    on = [device_label(w) or "GPU ?"
          for o, w in zip(outcomes, places, strict=True) if o.verdict == "regression"]
    head = f"reproduces on {len(reproduced)} of {measured} {label}s"
    if on:
        head += f" ({', '.join(on)})"
    if reproduced and len(reproduced) >= len(clean):
        return ConfirmationOutcome("regression", f"{head}: {reproduced[0].sentence}")
    if clean:
        return ConfirmationOutcome(clean[0].verdict, f"{head}: {clean[0].sentence}")
    decided = [o for o in outcomes if o.verdict is not None]
    if decided:
        return ConfirmationOutcome("inconclusive", f"{head}: {decided[0].sentence}")
    return ConfirmationOutcome(None, f"{head}: {outcomes[0].sentence}")


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


def pooled_outcome(first: RatioEstimate | None, outcome: ConfirmationOutcome,
                   threshold: float) -> ConfirmationOutcome:
    """The re-measure and the measurement it re-measures, judged together: both measured the
    same drop, so neither alone decides (a suspect -3.4% [-7.7, +1.1] overruled by a
    re-measure's +6.0% [-1.3, +13.8] passed a real 4.5% slowdown). Their intervals pool by
    inverse variance (`stats.pool_ratios`) and the pooled interval takes the one decision
    rule. Without both estimates (several GPUs counted, a failed re-measure) the re-measure's
    own outcome stands."""
    again = outcome.estimate
    if first is None or again is None or outcome.verdict is None:
        return outcome
    try:
        ratio, low, high = stats.pool_ratios(
            [(first.ratio, first.ci_low, first.ci_high), (again.ratio, again.ci_low,
                                                          again.ci_high)])
    except stats.StatsError:
        return outcome
    kind = stats.classify_ratio(ratio, low, high, threshold)
    verdict = "inconclusive" if kind == "undecided" else kind
    return ConfirmationOutcome(verdict, (
        f"{outcome.sentence}; with the first measurement, pooled: {signed_percent(ratio - 1)} "
        f"[{signed_percent(low - 1)}, {signed_percent(high - 1)}]"), None)
