"""uvicorn's access log without secrets: a token a client put in a URL (`?token=sw_...`,
a path that holds one) is written as `sw_...`, and the values of query parameters whose
names say they carry a secret are written as `***`. The API never reads a token from a
URL, but a client that tries writes the token into every log line of the request, and
logs are read by more people than tokens are given to.

Installed on the `uvicorn.access` logger by the app factory (app.main), so every way of
serving the app (`speedwatch serve`, a test's uvicorn.Server, several worker processes)
gets it: uvicorn configures its loggers before it builds the app.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, quote, urlencode

ACCESS_LOGGER = "uvicorn.access"
# a Speedwatch token anywhere (app.services.tokens: "sw_" + url-safe base64), also
# percent-encoded
_TOKEN = re.compile(r"sw_[A-Za-z0-9_\-%]{8,}")
_SECRET_NAMES = re.compile(r"token|secret|passw|auth|api_?key|credential",
                           re.IGNORECASE)


def redact_target(target: str) -> str:
    """A request target (path and query) as a log may show it."""
    path, sep, query = target.partition("?")
    path = _TOKEN.sub("sw_...", path)
    if not sep:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    if not pairs:
        return f"{path}?{_TOKEN.sub('sw_...', query)}"
    shown = [(name, "***" if _SECRET_NAMES.search(name) else _TOKEN.sub("sw_...", value))
             for name, value in pairs]
    return f"{path}?{urlencode(shown, safe='*/:,', quote_via=quote)}"


class RedactSecrets(logging.Filter):
    """Rewrites the request target of uvicorn's access records (args: client, method,
    target, HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_target(args[2]), *args[3:])
        return True


def install() -> None:
    """Add the filter to uvicorn's access logger once per process."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
