"""A real local HTTP webhook receiver for the tests (webhook retries, faults, end to end)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """An HTTP server on a free port that records every POSTed JSON body.

    It answers `status` (500 by default) to the first `failures` posts and 200 after. With
    `hold=True` it keeps each request open (`holding` set) until `release` is set, or a
    minute has passed: a receiver that hangs.
    """

    def __init__(self, failures: int = 0, status: int = 500, *, hold: bool = False) -> None:
        self.failures, self.status = failures, status
        self.bodies: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.holding = threading.Event()
        if not hold:
            self.release.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                failing = len(receiver.bodies) <= receiver.failures
                receiver.holding.set()
                receiver.release.wait(timeout=60)
                receiver.holding.clear()
                self.send_response(receiver.status if failing else 200)
                self.end_headers()
                self.wfile.write(b"nope" if failing else b"ok")

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
