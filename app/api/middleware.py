"""ASGI middleware: JSON depth limit, security headers and Prometheus request metrics
(admission, body size and body time: app.api.admission).

All are plain ASGI (not BaseHTTPMiddleware) so they add no task per request.
"""

from __future__ import annotations

import json
import re
import time
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    """The app's own registry, so several apps in one process (tests) do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "speedwatch_http_requests_total", "HTTP requests by route template and status",
            ["method", "route", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "speedwatch_http_request_duration_seconds", "HTTP request latency",
            ["method", "route"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.runs = Gauge("speedwatch_runs", "Runs by status", ["status"],
                          registry=self.registry)
        self.cells = Gauge("speedwatch_cells", "Cells by status", ["status"],
                           registry=self.registry)
        self.database_up = Gauge("speedwatch_database_up",
                                 "1 if the last scrape could count runs and cells",
                                 registry=self.registry)


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            # The route template, never the raw path: ids in paths would explode cardinality.
            label = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            self.metrics.requests.labels(method, label, str(status)).inc()
            self.metrics.latency.labels(method, label).observe(time.perf_counter() - start)


# A JSON string (escapes included): brackets inside one do not nest anything.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]', re.DOTALL)
_BODY_METHODS = ("POST", "PUT", "PATCH")


def json_depth(body: bytes) -> int:
    """How deeply the JSON text nests arrays and objects, at C speed (no parsing).

    Counts brackets outside strings; for text that is not JSON the figure means little, and
    the parser refuses such text anyway."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    return max(accumulate(_DEPTH_STEP[b] for b in brackets), default=0)


def too_deep_at(body: bytes, limit: int) -> str | None:
    """The path ("result.evidence.a[0]") of the first array or object nested deeper than
    `limit`, or None. A slow scan: run it only on a body whose `json_depth` is over."""
    frames: list[list[Any]] = []  # per open container: [kind, key or index, last string]
    for match in _JSON_TOKEN.finditer(body):
        token = match.group()
        if token in (b"{", b"["):
            if len(frames) >= limit:
                return _path(frames)
            frames.append([token, None if token == b"{" else 0, None])
        elif token in (b"}", b"]"):
            if frames:
                frames.pop()
        elif not frames:
            continue
        elif token == b",":
            top = frames[-1]
            top[1] = top[1] + 1 if top[0] == b"[" else None
        elif token == b":":
            frames[-1][1] = frames[-1][2]
        else:
            frames[-1][2] = _key(token)
    return None


def _key(token: bytes) -> str:
    try:
        return str(json.loads(token))[:100]
    except ValueError:
        return token[1:-1].decode("utf-8", "replace")[:100]


def _path(frames: list[list[Any]]) -> str:
    """Each open container's label says where the next one sits inside it; the body itself
    is the first (the API's field names leave it out, as errors.py does)."""
    name = ""
    for kind, label, _ in frames:
        if kind == b"[":
            name += f"[{label}]"
        elif label is not None:
            name += ("." if name else "") + str(label)
    return name or "body"


class JsonDepthLimitMiddleware:
    """422 for a JSON body nested deeper than `max_depth`, before anything parses it.

    Python's json module recurses once per level: a body of a few thousand nested brackets
    (a few kilobytes) raises RecursionError inside the framework's parsing, which answered
    400 "There was an error parsing the body" and named nothing; deeper still it could
    reach code that recurses again (hashing, templates). No document of this API nests
    half as deep as the limit; the typed schemas bound open-ended values more tightly and
    name the field. The body is read whole here (the size limit outside has bounded it)
    and replayed to the app.
    """

    def __init__(self, app: ASGIApp, max_depth: int) -> None:
        self.app = app
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if not (content_type == b"application/json" or content_type.endswith(b"+json")):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        disconnected: Message | None = None
        while True:
            message = await receive()
            if message["type"] != "http.request":
                disconnected = message
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if disconnected is None and json_depth(body) > self.max_depth:
            field = too_deep_at(body, self.max_depth)
            if field is not None:
                await self._too_deep(send, field)
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                if disconnected is not None:
                    return disconnected
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_deep(self, send: Send, field: str) -> None:
        message = f"JSON nested deeper than {self.max_depth} levels"
        payload = {"detail": f"{field}: {message}",
                   "errors": [{"field": field, "message": message}]}
        data = json.dumps(payload).encode()
        await send({"type": "http.response.start", "status": 422,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})


# The dashboard's pages load only their own scripts (no inline script or handler: charts read
# their JSON from <script type="application/json">); Plotly sets inline styles. Swagger UI
# (/docs) runs an inline script of its own, so its pages get no script policy.
DASHBOARD_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                 "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                 "form-action 'self'; frame-ancestors 'none'")
_API_DOCS = ("/docs", "/redoc", "/openapi.json", "/static/swagger")


class SecurityHeadersMiddleware:
    """Headers every answer carries: no MIME sniffing, no framing, no referrer sent to other
    sites; API answers (tokens' data, private reads) are never stored by a cache; HTML pages
    of the dashboard get a content security policy that allows only the site's own scripts."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}

                def add(name: bytes, value: str) -> None:
                    if name not in present:
                        headers.append((name, value.encode()))

                add(b"x-content-type-options", "nosniff")
                add(b"x-frame-options", "DENY")
                add(b"referrer-policy", "same-origin")
                if path.startswith("/api/"):
                    add(b"cache-control", "no-store")
                content_type = dict(headers).get(b"content-type", b"")
                if content_type.startswith(b"text/html") and not path.startswith(_API_DOCS):
                    add(b"content-security-policy", DASHBOARD_CSP)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)
