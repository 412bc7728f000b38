"""Overload: a flood is told to come back (429 with Retry-After) before anything is spent
on it, never answered 503 by an exhausted connection pool; what is answered is the truth
about what was stored; one client's flood leaves the others answering; a body is read only
from a client with a token, and only while it arrives in time.

A real uvicorn server on the test's PostgreSQL, real sockets, a package index that answers
late (devkit.slow_index); small limits keep it quick. scripts/overload_probe.py runs the
same scenarios at full size against `speedwatch serve`."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
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
from devkit.factories import bench_result, ingest_body, tiny_spec
from devkit.ports import free_port
from devkit.slow_index import PACKAGE, slow_index

IN_FLIGHT, PER_CLIENT = 6, 3


@contextmanager
def _serving(settings: Settings) -> Iterator[str]:
    """The app on a real uvicorn server and socket; its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def busy_api(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with slow_index(2.0) as index_url:
        monkeypatch.setenv("PIP_INDEX_URL", index_url)
        monkeypatch.setenv("PIP_TRUSTED_HOST", "127.0.0.1")
        limited = settings.model_copy(update={
            "max_requests_in_flight": IN_FLIGHT, "max_requests_per_client": PER_CLIENT,
            "admission_wait_seconds": 0.5, "body_read_timeout_seconds": 2.0,
            "env_allowlist": [PACKAGE, "onnxruntime"], "public_reads": False})
        with _serving(limited) as url:
            yield url


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


# ---- who holds the places: verified identities only ---------------------------------------

GUARDED_IN_FLIGHT, GUARDED_PER_PROJECT, GUARDED_ANONYMOUS = 6, 3, 2


@pytest.fixture
def guarded_api(settings: Settings) -> Iterator[str]:
    """Small limits, and bodies that may take a minute: a stalled body that is admitted
    holds its place for the whole test."""
    with _serving(settings.model_copy(update={
            "max_requests_in_flight": GUARDED_IN_FLIGHT,
            "max_requests_per_client": GUARDED_PER_PROJECT,
            "max_anonymous_requests_in_flight": GUARDED_ANONYMOUS,
            "admission_wait_seconds": 0.5, "body_read_timeout_seconds": 60.0,
            "public_reads": False})) as url:
        yield url


def _stall(url: str, credentials: bytes, path: str = "/api/v1/results") -> socket.socket:
    """A POST that announces a megabyte, sends a few bytes of it and stops."""
    port = int(url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + credentials
                 + b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"a\":")
    return sock


def _answers(socks: list[socket.socket], within_s: float,
             expect: int | None = None) -> list[bytes]:
    """What each socket was answered (b"": nothing), once `expect` of them (default: all)
    were answered or `within_s` passed."""
    import select

    got = [b""] * len(socks)
    waiting = dict(enumerate(socks))
    deadline = time.monotonic() + within_s
    while waiting and len(socks) - len(waiting) < (expect or len(socks)):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(list(waiting.values()), [], [], left)
        for i, sock in list(waiting.items()):
            if sock in ready:
                got[i] = sock.recv(4096)
                del waiting[i]
    return got


def _project_token(settings: Settings, scope: str, project: str) -> str:
    from app.db import session_scope
    from app.services.tokens import create_token

    with session_scope(settings) as session:
        return create_token(session, scope, f"{scope}-{project}", [project])[1]


def _reads(url: str, token: str, n: int) -> list[int]:
    with httpx.Client(base_url=url, timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        return [client.get("/api/v1/runs?limit=5").status_code for _ in range(n)]


def test_made_up_bearers_and_cookies_hold_no_place_a_real_reader_needs(
    guarded_api: str, settings: Settings,
) -> None:
    reader = _project_token(settings, "read", "beta")
    made_up = [_stall(guarded_api, b"Authorization: Bearer sw_%s\r\n" % secrets_hex())
               for _ in range(10)]
    made_up += [_stall(guarded_api, b"Cookie: speedwatch_token=sw_%s\r\n" % secrets_hex(),
                       path="/session/forget") for _ in range(10)]
    try:
        # each answered 401 as it arrives, its body never read
        answers = _answers(made_up, within_s=30)
        assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 401 Unauthorized"] * 20
        assert b"invalid or revoked token" in answers[0]
        assert b"a request body needs a valid token" in answers[10]
        # more than the server's places, yet the reader of another project is served
        assert _reads(guarded_api, reader, 7) == [200] * 7
    finally:
        for sock in made_up:
            sock.close()


def test_a_projects_tokens_share_its_places_and_leave_the_rest_to_others(
    guarded_api: str, settings: Settings,
) -> None:
    alpha = [_project_token(settings, "ci", "alpha") for _ in range(3)]
    reader = _project_token(settings, "read", "beta")
    holders = [_stall(guarded_api, f"Authorization: Bearer {token}\r\n".encode())
               for token in alpha for _ in range(3)]
    try:
        # three tokens of one project, nine uploads: the project's places are taken by
        # three of them (waiting for their bodies); the six others are told to come back
        answers = _answers(holders, within_s=30, expect=9 - GUARDED_PER_PROJECT)
        time.sleep(0.5)  # and no more: the three are still waiting for their bodies
        answers = [a or _answers([h], within_s=0.01)[0] for a, h in zip(answers, holders,
                                                                        strict=True)]
        statuses = sorted(a.split(b"\r\n", 1)[0] for a in answers)
        assert statuses == [b""] * GUARDED_PER_PROJECT + [
            b"HTTP/1.1 429 Too Many Requests"] * (9 - GUARDED_PER_PROJECT), statuses
        assert _reads(guarded_api, alpha[0], 1) == [429]  # alpha's places, still full
        assert _reads(guarded_api, reader, 7) == [200] * 7  # beta's reader: answered
    finally:
        for sock in holders:
            sock.close()


def secrets_hex() -> bytes:
    import secrets

    return secrets.token_urlsafe(32).encode()
