"""Profiles of stored results and what got slower between two of them (benchmarks.profile,
benchmarks.profile_diff); the repro bundle reads a result through `get_result` too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidRequest, NotFound
from app.models import Regression, Result, Run
from app.services.regressions import get_regression
from app.services.tokens import EVERY_PROJECT, ProjectAccess
from benchmarks.profile_diff import diff_sides, largest_change
from benchmarks.spec import parse_series_key


def get_result(session: Session, result_id: int, *,
               access: ProjectAccess = EVERY_PROJECT) -> tuple[Result, Run]:
    """Another project's result is as unknown as a missing one (see ProjectAccess)."""
    result = session.scalars(access.restrict(
        select(Result).join(Run, Run.id == Result.run_id).where(Result.id == result_id),
        Run.project_id)).first()
    run = session.get(Run, result.run_id) if result is not None else None
    if result is None or run is None:
        raise NotFound(f"result {result_id} not found")
    return result, run


def result_view(result: Result, run: Run) -> dict[str, Any]:
    """A stored result with where it belongs, as GET /api/v1/results/{id} answers it (what
    a repro bundle is written from)."""
    from app.services.documents import result_document

    document = result_document(result, result.series.key, result.cell.spec).to_dict()
    return {
        "result_id": result.id, "run_id": run.id, "cell_id": result.cell_id,
        "project": run.project.name, "revision": run.revision, "branch": run.branch,
        "series_key": result.series.key, "pins": list(run.environment.pins or []),
        "interpreter": run.environment.interpreter,
        "installed": dict(result.installed_versions or run.environment.installed or {}),
        "created_at": result.created_at, "document": document,
    }


def profile_of(result: Result) -> dict[str, Any]:
    """The result's profiles by side; a 404 naming why there is none."""
    profile = (result.evidence or {}).get("profile")
    if not isinstance(profile, dict) or not profile:
        why = (result.evidence or {}).get("profile_error")
        raise NotFound(f"result {result.id} has no profile"
                       + (f" (profiling failed: {why})" if why else
                          " (measured with profiling off, or by a version that did not "
                          "profile, or it failed or was skipped)"))
    return profile


@dataclass
class ProfileDiff:
    base: Result
    head: Result
    sides: dict[str, dict[str, Any]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def largest(self) -> str | None:
        found = largest_change(self.sides)
        return f"{found[0]}: {found[1]}" if found is not None else None


def _model(result: Result) -> str:
    return str(parse_series_key(result.series.key).get("model", "?"))


def diff_results(base: Result, head: Result) -> ProfileDiff:
    """Each side's diff of `head` against `base`; 422 naming `head` for results of two
    models (their kernels explain nothing about each other)."""
    if _model(base) != _model(head):
        raise InvalidRequest("head", f"result {head.id} measures {_model(head)} and result "
                             f"{base.id} {_model(base)}: a profile diff compares one model")
    sides, unavailable = diff_sides(profile_of(base), profile_of(head))
    out = ProfileDiff(base, head, sides, unavailable)
    if not out.sides:
        raise InvalidRequest("head", "no side was profiled comparably in both results: "
                             + "; ".join(f"{s}: {why}" for s, why in out.unavailable.items()))
    return out


def diff_by_ids(session: Session, base_id: int, head_id: int, *,
                access: ProjectAccess = EVERY_PROJECT) -> ProfileDiff:
    base, _ = get_result(session, base_id, access=access)
    head, _ = get_result(session, head_id, access=access)
    return diff_results(base, head)


def regression_diff(session: Session, regression_id: int, *,
                    access: ProjectAccess = EVERY_PROJECT) -> tuple[Regression, ProfileDiff]:
    """The regressed result against the result it was judged against."""
    regression = get_regression(session, regression_id, access=access)
    if regression.baseline_result_id is None:
        raise NotFound(f"regression {regression_id} was judged against "
                       f"{regression.baseline_description or 'a pinned speedup'}, not a "
                       "stored result: there is no profile to compare with")
    base = session.get(Result, regression.baseline_result_id)
    head = session.get(Result, regression.opened_by_result_id)
    if base is None or head is None:
        raise NotFound(f"regression {regression_id}: its results are gone")
    return regression, diff_results(base, head)


def explain(base: Result, head: Result) -> str | None:
    """The evidence sentence's clause naming the largest contributor, or None when the two
    results hold no comparable profiles (never an error: evidence is a bonus)."""
    try:
        return diff_results(base, head).largest
    except (InvalidRequest, NotFound):
        return None
