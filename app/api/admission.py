"""Admission: what a request must show before the server spends anything on it.

- **In flight.** A request takes a place among `total` requests in flight and among its
  client's `per_client` (a client: its bearer token, else its page-token cookie, else its
  address). One that finds no place within `wait_s` is answered 429 with Retry-After,
  before it touches the database: a flood is told to come back instead of exhausting the
  connection pool, which answered 503 to everyone (readers included) and could fail a
  request whose write had been stored. The total stays below the pool's connections, so a
  request admitted gets one; one client's flood fills its own places only, and the others'
  requests keep answering. Probes (/livez, /readyz, /healthz) and static assets are not
  counted: a load balancer must not read "busy" as "down".
- **A body is earned.** An API write (POST, PUT, PATCH, DELETE under /api/) without a
  bearer token is answered 401 before its body is read: every such route needs a token,
  and reading 2 MiB first let anonymous connections hold the server's memory.
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
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_UNCOUNTED = ("/livez", "/readyz", "/healthz", "/static/")
_WRITES = ("POST", "PUT", "PATCH", "DELETE")
_BODY_METHODS = ("POST", "PUT", "PATCH")
TOKEN_COOKIE = b"speedwatch_token"


@dataclass(frozen=True)
class Limits:
    total: int  # requests in flight in this process
    per_client: int  # of those, one client's
    wait_s: float  # how long a request may wait for a place before its 429
    body_timeout_s: float  # the whole body within this many seconds of the request's start
    max_body_bytes: int  # larger: 413, by Content-Length up front, else while reading


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


def client_key(scope: Scope) -> str:
    """Who is asking: a hash of the bearer token or page cookie (never the token), else
    the peer's address."""
    headers = dict(scope.get("headers") or [])
    bearer = _bearer(headers)
    if bearer:
        return "t:" + hashlib.sha256(bearer).hexdigest()[:16]
    for part in headers.get(b"cookie", b"").split(b";"):
        name, _, value = part.strip().partition(b"=")
        if name == TOKEN_COOKIE and value:
            return "c:" + hashlib.sha256(value).hexdigest()[:16]
    client = scope.get("client")
    return "a:" + (str(client[0]) if client else "?")


class AdmissionMiddleware:
    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        self.total = _Places(limits.total)
        self.clients: dict[str, _Places] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(_UNCOUNTED):
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        method: str = scope.get("method", "")
        headers = dict(scope.get("headers") or [])
        if path.startswith("/api/") and method in _WRITES and not _bearer(headers):
            await _answer(send, 401, "this endpoint needs a bearer token "
                          "(Authorization: Bearer sw_...); create one with "
                          "`speedwatch token create`", {"www-authenticate": "Bearer"})
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        key = client_key(scope)
        mine = self.clients.setdefault(key, _Places(self.limits.per_client))
        deadline = started + self.limits.wait_s
        if not await mine.take(deadline):
            self._forget_if_idle(key, mine)
            await self._busy(send, f"this client has {self.limits.per_client} requests in "
                                   "flight already")
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

    def _forget_if_idle(self, key: str, places: _Places) -> None:
        if places.idle and self.clients.get(key) is places:
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


async def _answer(send: Send, status: int, detail: str, extra: dict[str, str]) -> None:
    data = json.dumps({"detail": detail}).encode()
    headers: list[Any] = [(b"content-type", b"application/json"),
                          (b"content-length", str(len(data)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
