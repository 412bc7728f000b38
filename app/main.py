"""The FastAPI application factory: `create_app(settings)`; OpenAPI UI at /docs.

Each app owns its engine (tests build apps on other databases side by side); uvicorn runs it
with `factory=True` (see `speedwatch serve`).

This is the API process's composition root, the one module of app/ above the services that
imports workers/: it wires the worker package's executors into the services' ports
(app.ports), through which triggered cells, confirmations and webhook deliveries are sent.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from app import ports
from app.api import access_log
from app.api.admission import AdmissionMiddleware, Limits
from app.api.middleware import (
    JsonDepthLimitMiddleware,
    Metrics,
    MetricsMiddleware,
    SecurityHeadersMiddleware,
)
from app.api.routes import (
    compare,
    docs,
    environments,
    health,
    metrics,
    projects,
    regressions,
    results,
    runs,
    series,
    sweeps,
    tokens,
    workers,
)
from app.config import Settings, get_settings
from app.dashboard import routes as dashboard
from app.dashboard import session as page_session
from app.db import make_engine
from app.errors import install_exception_handlers
from app.services.tokens import admission_group
from workers import dispatch

log = logging.getLogger(__name__)

DESCRIPTION = """\
Continuous performance-regression service for GPU inference: PyTorch eager against
optimized backends (torch.compile, ONNX Runtime, TensorRT, Torch-TensorRT).

Writes need a bearer token with the `ci` scope (`speedwatch token create --scope ci`),
token management the `admin` scope (of every project);
reads need a `read` token unless the server has public reads. A token may be limited to
projects (`--project NAME`): lists then leave other projects out, another project's run,
series or regression is a 404 as if it did not exist, and a write naming another project
is a 403. Errors are
`{"detail": "...", "errors": [{"field", "message"}]}`; a database outage is a 503.
"""


# No request body of this API nests half this deep (a result document: about 12 levels).
MAX_JSON_BODY_DEPTH = 32


def _admission_group(make_session: sessionmaker[Session], plaintext: str) -> str | None:
    """Whose places a request with this token takes (app.api.admission), from the store."""
    with make_session() as session:
        return admission_group(session, plaintext)


def create_served_app() -> FastAPI:
    """The app as `speedwatch serve` runs it: a process of its own, whose start-up objects
    are frozen out of the garbage collector once it is up (`freeze_at_start`)."""
    return create_app(freeze_at_start=True)


def _warm_up_executor(settings: Settings) -> None:
    """Let the executor get ready before the first cell (the embedded one starts its GPU
    fork server); a process with no executor wired, or one that cannot, serves as before."""
    try:
        ports.cell_queue().warm_up(settings)
    except Exception as exc:
        log.warning("executor not warmed up: %s", exc)


def create_app(settings: Settings | None = None, *, freeze_at_start: bool = False) -> FastAPI:
    """`freeze_at_start`: once started, move every object alive into the collector's
    permanent generation (gc.freeze). The modules, schemas and app a server imports are
    some 170k objects that live as long as the process, and each full collection walked
    them all with the GIL held: on one API process taking 200 uploads a second, 12 full
    collections in one 15-second step took 164 ms each (median) and every request in
    flight waited (p95 2.2 s); frozen, 19 ms each (p95 83 ms; results/capacity-2026-11-29-
    upload-stalls). Off for the apps tests make by the hundred in one process, where the
    collection it takes first would cost a tenth of a second each."""
    settings = settings or get_settings()
    dispatch.install()  # the services send cells and deliveries through app.ports
    access_log.install()  # no token a client put in a URL reaches uvicorn's access log
    engine = make_engine(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if freeze_at_start:
            gc.collect()
            gc.freeze()
        _warm_up_executor(settings)
        yield
        engine.dispose()

    app = FastAPI(
        title="Speedwatch",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by app.api.routes.docs, with local assets
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = sessionmaker(bind=engine, expire_on_commit=False)
    app.state.metrics = Metrics()
    install_exception_handlers(app)
    # Added first, so it runs inside admission: it reads only bodies already bounded.
    app.add_middleware(JsonDepthLimitMiddleware, max_depth=MAX_JSON_BODY_DEPTH)
    total, per_client, anonymous = settings.admission_limits()
    app.add_middleware(AdmissionMiddleware, limits=Limits(
        total=total, per_client=per_client, anonymous=anonymous,
        wait_s=settings.admission_wait_seconds,
        body_timeout_s=settings.body_read_timeout_seconds,
        max_body_bytes=settings.max_body_bytes,
        lookups=max(1, settings.db_pool_size // 2)),
        identify=partial(_admission_group, app.state.sessionmaker))
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(SecurityHeadersMiddleware)
    for module in (runs, results, series, compare, health, metrics, regressions, tokens,
                   projects, workers, docs, sweeps, environments):
        app.include_router(module.router)
    app.include_router(dashboard.router)  # the web pages, at /
    app.include_router(page_session.router)
    return app
