"""Overload: a flood is told to come back (429 with Retry-After) before anything is spent
on it, never answered 503 by an exhausted connection pool; what is answered is the truth
about what was stored; one client's flood leaves the others answering; a body is read only
from a client with a token, and only while it arrives in time.

A real uvicorn server on the test's PostgreSQL, real sockets, a package index that answers
late (tests.slow_index); small limits keep it quick. scripts/overload_probe.py runs the
same scenarios at full size against `speedwatch serve`."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.main import create_app
from app.models import Run
from cli.client import Api
from tests.app.factories import bench_result, ingest_body, tiny_spec
from tests.faults.infra import free_port
from tests.slow_index import PACKAGE, slow_index

IN_FLIGHT, PER_CLIENT = 6, 3


@pytest.fixture
def busy_api(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with slow_index(2.0) as index_url:
        monkeypatch.setenv("PIP_INDEX_URL", index_url)
        monkeypatch.setenv("PIP_TRUSTED_HOST", "127.0.0.1")
        limited = settings.model_copy(update={
            "max_requests_in_flight": IN_FLIGHT, "max_requests_per_client": PER_CLIENT,
            "admission_wait_seconds": 0.5, "body_read_timeout_seconds": 2.0,
            "env_allowlist": [PACKAGE, "onnxruntime"], "public_reads": False})
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(limited), host="127.0.0.1",
                                               port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            assert thread.is_alive(), "server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
        server.should_exit = True
        thread.join(timeout=10)


def _revisions(session: Session) -> set[str]:
    session.expire_all()
    return set(session.scalars(select(Run.revision).where(Run.kind == "ingest")))


async def _post_all(url: str, token: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        return list(await asyncio.gather(*(client.post("/api/v1/results", json=b)
                                           for b in bodies)))


def test_a_flood_of_uploads_gets_429s_that_stored_nothing_and_never_a_503(
    busy_api: str, ci_token: str, session: Session,
) -> None:
    bodies = [ingest_body(bench_result(tiny_spec()), revision=f"flood-{i}") for i in range(60)]
    answers = asyncio.run(_post_all(busy_api, ci_token, bodies))
    statuses = [r.status_code for r in answers]
    assert set(statuses) <= {201, 429}, statuses
    assert statuses.count(429) > 0  # more than the server admits at once
    assert all(r.headers["retry-after"].isdigit() for r in answers if r.status_code == 429)
    stored = _revisions(session)
    for body, status in zip(bodies, statuses, strict=True):
        assert (body["revision"] in stored) == (status == 201), (body["revision"], status)


def test_the_client_retries_until_every_document_is_stored_once(
    busy_api: str, ci_token: str, session: Session,
) -> None:
    bodies = [ingest_body(bench_result(tiny_spec()), revision=f"retried-{i}")
              for i in range(30)]
    waits: list[float] = []

    def pause(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    def upload(body: dict[str, Any]) -> bool:
        api = Api(busy_api, ci_token, sleep=pause)
        try:
            return bool(api.upload(body)["created"])
        finally:
            api.close()

    # the client's slots held first by bodies that stop arriving (let go after 2 s with a
    # 408): 30 quick uploads alone could all be admitted within the 0.5 s admission wait
    # on a fast, quiet runner, and then no client ever had to come back
    holders = [_announce_big_body(busy_api, ci_token) for _ in range(PER_CLIENT)]
    try:
        with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
            created = list(pool.map(upload, bodies))
    finally:
        for sock in holders:
            sock.close()
    assert all(created)
    assert waits and set(waits) == {1.0}  # the server's Retry-After, honoured
    assert {b["revision"] for b in bodies} <= _revisions(session)
    # sent again, each is the stored result: a retry never stores twice
    api = Api(busy_api, ci_token)
    assert api.upload(bodies[0])["created"] is False


def test_one_tokens_flood_of_sweeps_leaves_another_readers_answers_quick(
    busy_api: str, ci_token: str, read_token: str,
) -> None:
    sweep = {"project": "vision", "package": PACKAGE, "from_version": "1.0",
             "to_version": "1.4", "matrix": {"models": ["resnet18"],
                                             "backends": ["onnxruntime"],
                                             "width": 8, "image_size": 32}}
    with ThreadPoolExecutor(max_workers=12) as pool:
        sweeps = [pool.submit(httpx.post, f"{busy_api}/api/v1/sweeps", json=sweep,
                              headers={"Authorization": f"Bearer {ci_token}"}, timeout=60)
                  for _ in range(8)]
        time.sleep(0.3)  # the sweeps are waiting on the index now
        reads = []
        for _ in range(5):
            started = time.monotonic()
            response = httpx.get(f"{busy_api}/api/v1/runs?limit=5", timeout=30,
                                 headers={"Authorization": f"Bearer {read_token}"})
            reads.append((response.status_code, time.monotonic() - started))
        answers = [f.result() for f in sweeps]
    assert [status for status, _ in reads] == [200] * 5
    assert max(seconds for _, seconds in reads) < 1.0  # not waiting behind the index
    statuses = sorted(r.status_code for r in answers)
    assert set(statuses) == {201, 429} and statuses.count(201) == PER_CLIENT, statuses


def _announce_big_body(url: str, token: str | None) -> socket.socket:
    port = int(url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    sock.sendall(b"POST /api/v1/results HTTP/1.1\r\nHost: x\r\n" + auth
                 + b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
                 + b"[" + b"1," * 50_000)
    sock.settimeout(10)
    return sock


def test_a_body_without_a_token_is_refused_before_it_is_read(busy_api: str) -> None:
    sock = _announce_big_body(busy_api, None)
    started = time.monotonic()
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert b"needs a bearer token" in answer
    assert time.monotonic() - started < 1.0


def test_a_body_that_stops_arriving_is_answered_408_and_let_go(
    busy_api: str, ci_token: str,
) -> None:
    sock = _announce_big_body(busy_api, ci_token)
    started = time.monotonic()
    answer = sock.recv(4096)
    elapsed = time.monotonic() - started
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
    assert b"not received within 2 s" in answer
    assert 1.0 < elapsed < 5.0
