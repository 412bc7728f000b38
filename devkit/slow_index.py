"""A PEP 503 package index that answers late: a slow mirror, for what a request does while
the server waits on the index (tests and scripts/overload_probe.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PACKAGE = "probepkg"
VERSIONS = tuple(f"1.{i}" for i in range(5))


@contextmanager
def slow_index(delay_s: float) -> Iterator[str]:
    """Serve `probepkg` 1.0-1.4 (pure-Python wheels), each answer `delay_s` late; yields
    the index URL for PIP_INDEX_URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(delay_s)
            links = "".join(f'<a href="/files/{PACKAGE}-{v}-py3-none-any.whl">'
                            f"{PACKAGE}-{v}-py3-none-any.whl</a>" for v in VERSIONS)
            body = f"<html><body>{links}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
