"""Compare two runs series by series."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import ReadAccess, SessionDep
from app.api.presenters import error_responses, speedup_public
from app.schemas import ID_MAX, ComparePublic, CompareRowPublic
from app.services.series import compare_runs

router = APIRouter(prefix="/api/v1/compare", tags=["compare"])


@router.get(
    "", response_model=ComparePublic,
    responses=error_responses(401, 403, 404, 422, 503),
    summary="Speedups of two runs on the series they share",
)
def compare(
    session: SessionDep,
    access: ReadAccess,
    base: Annotated[int, Query(ge=1, le=ID_MAX, description="run id of the reference")],
    head: Annotated[int, Query(ge=1, le=ID_MAX, description="run id to judge")],
) -> ComparePublic:
    """`change` is relative (head/base - 1); `ci_overlap` false means the two speedup CIs are
    disjoint, the first sign of a real change (detection decides the verdict)."""
    comparison = compare_runs(session, base, head, access)
    return ComparePublic(
        base_run_id=base,
        head_run_id=head,
        series=[
            CompareRowPublic(
                series_key=row.series_key, base=speedup_public(row.base),
                head=speedup_public(row.head), change=row.change, ci_overlap=row.ci_overlap,
            )
            for row in comparison.rows
        ],
        only_in_base=comparison.only_in_base,
        only_in_head=comparison.only_in_head,
    )
