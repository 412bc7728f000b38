"""Ingest of results measured elsewhere."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Query, Response

from app.api.deps import CiAccess, ReadAccess, RowIdPath, SessionDep, SettingsDep
from app.api.presenters import error_responses
from app.models import Result
from app.schemas import (
    ID_MAX,
    ProfileDiffPublic,
    ResultBatchIngest,
    ResultBatchIngestedPublic,
    ResultIngest,
    ResultIngestedPublic,
    ResultProfilePublic,
    ResultPublic,
)
from app.services import profiles
from app.services.results import Ingested, coalescer, ingest_batch, ingest_result, judge_soon

router = APIRouter(prefix="/api/v1/results", tags=["results"])


@router.post(
    "",
    response_model=ResultIngestedPublic,
    status_code=201,
    responses={
        200: {"model": ResultIngestedPublic, "description": "identical document already stored"},
        **error_responses(401, 403, 409, 413, 422, 503),
    },
    summary="Store a result measured elsewhere (ci scope)",
)
def post_result(
    body: ResultIngest,
    session: SessionDep,
    settings: SettingsDep,
    access: CiAccess,
    response: Response,
    background: BackgroundTasks,
) -> ResultIngestedPublic:
    """`result` is a BenchResult document (schema BenchResultDocument: what `speedwatch
    bench --json` writes). It is checked whole before anything is stored: a field of the
    wrong type at any depth, a number that is not finite or no float holds, a list, map or
    string over its bound, JSON nested too deep, an unknown schema_version, non-positive
    latencies, an inverted CI, a spec the server cannot measure, or a series_key that its
    spec and fingerprint device_class do not give -> 422 naming the field. It is filed
    under this project's "ingest" run for the revision and environment. The verdict is
    decided after the response is sent (results of one run posted together are judged
    together, within about half a second): read it from GET /api/v1/runs/{run_id}. A
    token limited to other projects is a 403. Posting the same document again is safe: it
    answers 200 with the stored result (`created` false), so a client retries a 429, a
    503 or a lost connection without storing anything twice."""
    access.check_write(body.project)
    stored, created = ingest_result(session, body, settings)
    # The answer is made before the commit: once committed, nothing may fail the request
    # (reading `stored.series` afterwards took a second connection, whose wait could answer
    # 503 for a document that was stored).
    answer = ResultIngestedPublic(
        result_id=stored.id, run_id=stored.run_id, cell_id=stored.cell_id,
        series_key=stored.cell.series_key, status=stored.status, created=created,
    )
    session.commit()
    if created and settings.ingest_judge_delay_seconds > 0:
        coalescer.schedule(stored.run_id, settings)
    elif created:
        background.add_task(judge_soon, [stored.run_id], settings)
    else:
        response.status_code = 200
    return answer


@router.post(
    "/batch",
    response_model=ResultBatchIngestedPublic,
    status_code=201,
    responses={
        200: {"model": ResultBatchIngestedPublic,
              "description": "every document was stored already"},
        **error_responses(401, 403, 409, 413, 422, 503),
    },
    summary="Store a CI job's results in one request (ci scope)",
)
def post_results(
    body: ResultBatchIngest,
    session: SessionDep,
    settings: SettingsDep,
    access: CiAccess,
    response: Response,
    background: BackgroundTasks,
) -> ResultBatchIngestedPublic:
    """Up to 100 documents of one project, revision and environment, each stored as `POST
    /api/v1/results` would store it alone (the same checks, run, series and answer), in
    one request and one transaction: a CI job's matrix in one round trip. All of them are
    stored or none: a 422 names the document (`results[3].spec.model`), and a document
    that differs from the one stored for its spec at this revision is a 409 naming it.
    The answer lists each document's stored result in the order posted. Posting the batch
    again is safe: it answers 200 with the stored results (`created` false), so a client
    retries a 429, a 503 or a lost connection without storing anything twice."""
    access.check_write(body.project)
    stored = ingest_batch(session, body, settings)
    created_runs = sorted({s.run_id for s in stored if s.created})
    if created_runs and settings.ingest_judge_delay_seconds > 0:
        for run_id in created_runs:
            coalescer.schedule(run_id, settings)
    elif created_runs:
        background.add_task(judge_soon, created_runs, settings)
    else:
        response.status_code = 200
    created = sum(1 for s in stored if s.created)
    return ResultBatchIngestedPublic(results=[_public(s) for s in stored], created=created,
                                     existing=len(stored) - created)


def _public(s: Ingested) -> ResultIngestedPublic:
    return ResultIngestedPublic(result_id=s.result_id, run_id=s.run_id, cell_id=s.cell_id,
                                series_key=s.series_key, status=s.status, created=s.created)


READ_ERRORS = error_responses(401, 403, 404, 422, 503)


def profile_diff_public(d: profiles.ProfileDiff) -> ProfileDiffPublic:
    return ProfileDiffPublic.model_validate({
        "base_result_id": d.base.id, "head_result_id": d.head.id,
        "base_series_key": d.base.series.key, "head_series_key": d.head.series.key,
        "sides": d.sides, "unavailable": d.unavailable, "largest": d.largest})


@router.get("/profile-diff", response_model=ProfileDiffPublic, responses=READ_ERRORS,
            summary="What got slower between two results of one model")
def get_profile_diff(
    session: SessionDep, access: ReadAccess,
    base: Annotated[int, Query(ge=1, le=ID_MAX, description="the earlier result's id")],
    head: Annotated[int, Query(ge=1, le=ID_MAX, description="the later result's id")],
) -> ProfileDiffPublic:
    """Each side's profile of `head` against `base`, matched by name (or by operator type
    and kernel family when a new build renamed them): rows that appeared, vanished, got
    slower or faster, with their share of the change. 404 for an unknown result or one
    without a profile; 422 naming `head` for results of two models."""
    return profile_diff_public(profiles.diff_by_ids(session, base, head, access=access))


@router.get("/{result_id}", response_model=ResultPublic, responses=READ_ERRORS,
            summary="A stored result with its project, revision and environment")
def get_result(result_id: RowIdPath, session: SessionDep, access: ReadAccess) -> ResultPublic:
    """The stored result document and where it belongs (what `speedwatch repro` writes a
    bundle from)."""
    result, run = profiles.get_result(session, result_id, access=access)
    return ResultPublic.model_validate(profiles.result_view(result, run))


@router.get("/{result_id}/profile", response_model=ResultProfilePublic, responses=READ_ERRORS,
            summary="Each side's profile of a result (kernels, operators, nodes or layers)")
def get_result_profile(result_id: RowIdPath, session: SessionDep,
                       access: ReadAccess) -> ResultProfilePublic:
    """Taken in an untimed pass after the timing, by the cell's first process. 404 for a
    result measured without one."""
    result: Result = profiles.get_result(session, result_id, access=access)[0]
    return ResultProfilePublic.model_validate({
        "result_id": result.id, "series_key": result.series.key,
        "sides": profiles.profile_of(result)})
