"""Admission: what a request must show before the server spends anything on it.

- **Who is asking, verified first.** A request's bearer token (else its page cookie) is
  looked up before anything else, without its body: a token that is not live is answered
  401 at once on the API and the session routes, so a made-up bearer holds nothing. Places
  are counted per verified identity: a token limited to projects shares its places with
  every token of those projects (three tokens of one project hold what one holds), a token
  of every project has places of its own. Requests with no verified identity (no token, a
  cookie that names none, a bearer outside the API) share one small pool of their own, so
  strangers can fill that pool and nothing else. Keying places on whatever a request
  carried, before it was verified, let ten made-up bearers or cookies hold every place.
  Lookups are cached briefly (a token revoked keeps its places that long at most; the route
  checks it again) and only a few run at once.
- **In flight.** A request takes a place among `total` requests in flight and among its
  identity's `per_client` (or the `anonymous` pool). One that finds no place within
  `wait_s` is answered 429 with Retry-After, before it touches the database: a flood is
  told to come back instead of exhausting the connection pool, which answered 503 to
  everyone (readers included) and could fail a request whose write had been stored. The
  total stays below the pool's connections, so a request admitted gets one. Probes
  (/livez, /readyz, /healthz) and static assets are not counted: a load balancer must not
  read "busy" as "down".
- **A body is earned.** An API write (POST, PUT, PATCH, DELETE under /api/) without a
  bearer token is answered 401 before its body is read: every such route needs a token,
  and reading 2 MiB first let anonymous connections hold the server's memory. A request
  without a verified identity that announces a body anywhere is answered 401 the same way:
  no route takes a body from a stranger.
- **A body arrives whole, small and in time.** Over `max_body_bytes` is a 413 (by
  Content-Length before a byte is read, else as it streams in); the whole body must arrive
  within `body_timeout_s` of the request's start, else 408: a connection that sends most
  of a body and stops no longer holds its buffer. The body is read here, whole, and
  replayed to the app, so the app never starts on a body it would have to abandon.

Plain ASGI, one event loop per process: counters need no lock.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_UNCOUNTED = ("/livez", "/readyz", "/healthz", "/static/")
_WRITES = ("POST", "PUT", "PATCH", "DELETE")
_BODY_METHODS = ("POST", "PUT", "PATCH")
# where a bearer that names no live token is answered 401 at once (elsewhere, /metrics
# with its own scrape token for one, it only counts as no identity)
_TOKEN_PATHS = ("/api/", "/session/")
TOKEN_COOKIE = b"speedwatch_token"
# How long a lookup's answer is kept: a live token's group, and a token that is not one.
KNOWN_FOR_S = 30.0
UNKNOWN_FOR_S = 10.0
MAX_REMEMBERED = 10_000
STORE_SILENT_FOR_S = 2.0  # after a lookup the store failed, none for this long

# Identify: a token's plaintext -> the key of the group whose places it takes, or None
# when it is no live token. Sync (it reads the store): run in a worker thread. It raises
# when it cannot tell (the database is down): the request then goes on unverified and the
# route answers for itself.
Identify = Callable[[str], str | None]


@dataclass(frozen=True)
class Limits:
    total: int  # requests in flight in this process
    per_client: int  # of those, one verified identity's (a project's tokens together)
    wait_s: float  # how long a request may wait for a place before its 429
    body_timeout_s: float  # the whole body within this many seconds of the request's start
    max_body_bytes: int  # larger: 413, by Content-Length up front, else while reading
    anonymous: int = 1  # of the total, those of every request with no verified identity
    lookups: int = 2  # token lookups in the store at once


class _Places:
    """Places of one kind, handed out first come first served."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self.waiters: list[asyncio.Future[None]] = []

    async def take(self, deadline: float) -> bool:
        """A place, waiting for one until `deadline` (loop time); False when none came."""
        loop = asyncio.get_running_loop()
        if self.used < self.size and not self.waiters:
            self.used += 1
            return True
        waiter: asyncio.Future[None] = loop.create_future()
        self.waiters.append(waiter)
        try:
            # asyncio.wait leaves the future alone on timeout (wait_for would cancel it)
            await asyncio.wait([waiter], timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:
            self._leave(waiter)
            raise
        if waiter.done():
            return True
        self._leave(waiter)
        return False

    def _leave(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done() and not waiter.cancelled():
            self.give()  # handed a place as it stopped waiting: pass it on
            return
        waiter.cancel()
        if waiter in self.waiters:
            self.waiters.remove(waiter)

    def give(self) -> None:
        while self.waiters:
            waiter = self.waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)  # the place passes to it: `used` stays
                return
        self.used -= 1

    @property
    def idle(self) -> bool:
        return self.used == 0 and not self.waiters


class _Verdict:
    """What a lookup said about a token that names no group: not a live token, or the
    store could not be asked."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_A_TOKEN: Final = _Verdict("not a token")
CANNOT_TELL: Final = _Verdict("cannot tell")


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


class AdmissionMiddleware:
    def __init__(self, app: ASGIApp, limits: Limits, identify: Identify) -> None:
        self.app = app
        self.limits = limits
        self.identify = identify
        self.total = _Places(limits.total)
        self.anonymous = _Places(min(limits.anonymous, limits.total))
        self.clients: dict[str, _Places] = {}
        self.lookups = _Places(max(1, limits.lookups))
        # sha256(token) -> (group key or NOT_A_TOKEN, monotonic expiry); never the token
        self.known: dict[str, tuple[str | _Verdict, float]] = {}
        self.store_silent_until = 0.0  # monotonic: a lookup failed, none until then

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(_UNCOUNTED):
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        method: str = scope.get("method", "")
        headers = dict(scope.get("headers") or [])
        bearer = _bearer(headers)
        if path.startswith("/api/") and method in _WRITES and not bearer:
            await _answer(send, 401, "this endpoint needs a bearer token "
                          "(Authorization: Bearer sw_...); create one with "
                          "`speedwatch token create`", {"www-authenticate": "Bearer"})
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.limits.wait_s
        if bearer:
            who = await self._verify(bearer.decode("latin-1"), deadline)
            if who is NOT_A_TOKEN and path.startswith(_TOKEN_PATHS):
                await _answer(send, 401, "invalid or revoked token",
                              {"www-authenticate": "Bearer"})
                return
        else:
            cookie = _cookie(headers)
            who = await self._verify(cookie.decode("latin-1"), deadline) if cookie \
                else NOT_A_TOKEN
        if who is None:
            await self._busy(send, "the server is verifying too many tokens")
            return
        if who is NOT_A_TOKEN and _announces_body(headers):
            # no route reads a body from a request that names no live token
            await _answer(send, 401, "a request body needs a valid token "
                          "(Authorization: Bearer sw_...)", {"www-authenticate": "Bearer",
                                                             "connection": "close"})
            return
        key = who if isinstance(who, str) else None
        mine = self.anonymous if key is None else self.clients.setdefault(
            key, _Places(self.limits.per_client))
        if not await mine.take(deadline):
            self._forget_if_idle(key, mine)
            await self._busy(send, "requests without a verified token have "
                             f"{self.anonymous.size} places, all taken" if key is None else
                             f"this token's project has {self.limits.per_client} requests "
                             "in flight already")
            return
        try:
            if not await self.total.take(deadline):
                await self._busy(send, f"the server has {self.limits.total} requests in "
                                       "flight")
                return
            try:
                replay = await self._bounded_body(scope, receive, send, started)
                if replay is not None:
                    await self.app(scope, replay, send)
            finally:
                self.total.give()
        finally:
            mine.give()
            self._forget_if_idle(key, mine)

    async def _verify(self, token: str, deadline: float) -> str | _Verdict | None:
        """The group `token` belongs to, NOT_A_TOKEN, CANNOT_TELL (the store did not
        answer), or None when no lookup could start before `deadline`."""
        digest = _digest(token)
        now = time.monotonic()
        remembered = self.known.get(digest)
        if remembered is not None and remembered[1] > now:
            return remembered[0]
        if now < self.store_silent_until:
            return CANNOT_TELL  # the store just failed a lookup: let the routes answer
        if not await self.lookups.take(deadline):
            return None
        try:
            try:
                found = await anyio.to_thread.run_sync(self.identify, token)
            except Exception:
                # not remembered: asked again once the store may be back. Meanwhile no
                # request waits on a lookup (each took up to the connect timeout)
                self.store_silent_until = time.monotonic() + STORE_SILENT_FOR_S
                return CANNOT_TELL
        finally:
            self.lookups.give()
        verdict: str | _Verdict = NOT_A_TOKEN if found is None else found
        if len(self.known) >= MAX_REMEMBERED:
            self.known = {k: v for k, v in self.known.items() if v[1] > now}
            if len(self.known) >= MAX_REMEMBERED:
                self.known.clear()
        self.known[digest] = (verdict, now + (KNOWN_FOR_S if found else UNKNOWN_FOR_S))
        return verdict

    def _forget_if_idle(self, key: str | None, places: _Places) -> None:
        if key is not None and places.idle and self.clients.get(key) is places:
            del self.clients[key]

    async def _busy(self, send: Send, why: str) -> None:
        retry = max(1, math.ceil(self.limits.wait_s))
        await _answer(send, 429, f"too many requests: {why}; retry after {retry} s",
                      {"retry-after": str(retry)})

    async def _bounded_body(self, scope: Scope, receive: Receive, send: Send,
                            started: float) -> Receive | None:
        """The body read whole within the time limit and replayed to the app; None when
        the answer (408) was sent instead."""
        if scope.get("method") not in _BODY_METHODS:
            return receive
        limit = self.limits.max_body_bytes
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _too_large(send, limit)
            return None
        chunks: list[bytes] = []
        size = 0
        end: Message | None = None
        remaining = started + self.limits.body_timeout_s - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(max(0.0, remaining)):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        end = message  # the client went away
                        break
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        chunks.clear()
                        await _too_large(send, limit)
                        return None
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            chunks.clear()
            await _answer(send, 408, "request body not received within "
                          f"{self.limits.body_timeout_s:g} s", {"connection": "close"})
            return None
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return end if end is not None else {"type": "http.request", "body": body,
                                                    "more_body": False}
            return await receive()

        return replay


async def _too_large(send: Send, limit: int) -> None:
    await _answer(send, 413, f"request body larger than this server's limit of {limit} bytes",
                  {"connection": "close"})


def _bearer(headers: dict[bytes, bytes]) -> bytes:
    """The bearer token the request sends (b"": none)."""
    auth = headers.get(b"authorization", b"")
    return auth[7:].strip() if auth[:7].lower() == b"bearer " else b""


def _cookie(headers: dict[bytes, bytes]) -> bytes:
    """The page token the request's cookie holds (b"": none)."""
    for part in headers.get(b"cookie", b"").split(b";"):
        name, _, value = part.strip().partition(b"=")
        if name == TOKEN_COOKIE and value:
            return value
    return b""


def _announces_body(headers: dict[bytes, bytes]) -> bool:
    """Whether the request says a body follows (a length above 0, or chunks)."""
    length = headers.get(b"content-length", b"").strip()
    return (bool(length) and length != b"0") or b"transfer-encoding" in headers


async def _answer(send: Send, status: int, detail: str, extra: dict[str, str]) -> None:
    data = json.dumps({"detail": detail}).encode()
    headers: list[Any] = [(b"content-type", b"application/json"),
                          (b"content-length", str(len(data)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
