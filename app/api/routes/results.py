"""Ingest of results measured elsewhere."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, Response

from app.api.deps import CiAccess, SessionDep, SettingsDep
from app.api.presenters import error_responses
from app.schemas import ResultIngest, ResultIngestedPublic
from app.services.results import coalescer, ingest_result, judge_ingested

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
        series_key=stored.series.key, status=stored.status, created=created,
    )
    session.commit()
    if created and settings.ingest_judge_delay_seconds > 0:
        coalescer.schedule(stored.run_id, settings)
    elif created:
        background.add_task(judge_ingested, stored.run_id, settings)
    else:
        response.status_code = 200
    return answer
