"""The HTTP client of the API that `submit`, `demo` and `policy` share.

Every failure becomes a ClientError whose message is the one line CI shows; exit codes are
the contract with CI: 0 pass, 1 regression, 2 error, 3 inconclusive.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

EXIT_PASS = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
EXIT_INCONCLUSIVE = 3
FINISHED = ("done", "failed")
RETRY_WAIT_MAX_S = 30.0
CONNECT_ATTEMPTS = 3


class ClientError(Exception):
    """Something the user must fix or retry; the message is the one line CI shows."""


TOKEN_ENV = "SPEEDWATCH_TOKEN"


def clean_token(token: str | None) -> str | None:
    """The token as a header may carry it: the whitespace around it dropped (a secret saved
    with `echo` ends in a newline, which made the request fail with an error that printed
    the whole token). Whitespace or any other character that is not printable ASCII inside
    it is a ClientError naming where the token came from, never showing it. "" is no
    token."""
    if token is None:
        return None
    stripped = token.strip()
    if not stripped:
        return None
    if not all("!" <= c <= "~" for c in stripped):
        where = TOKEN_ENV if os.environ.get(TOKEN_ENV) == token else "--token"
        what = ("whitespace" if any(c.isspace() for c in stripped)
                else "a character that is not printable ASCII")
        raise ClientError(f"{where}: the token has {what} inside it; a token is one word "
                          "(sw_ and letters, digits, '-' and '_'): copy it again")
    return stripped


# Failures of the connection a retry may cure (a server restarting, a network blip); any
# other (a header no request may carry, a URL of another scheme, a bad proxy) fails again.
def _transient(exc: Exception) -> bool:
    import httpx

    return isinstance(exc, (httpx.TimeoutException, httpx.NetworkError,
                            httpx.RemoteProtocolError))


# ---- HTTP ----------------------------------------------------------------------------------

class Api:
    """The few calls the client makes; every failure becomes a ClientError with one line."""

    def __init__(self, url: str, token: str | None, timeout_s: float = 30.0,
                 flags: Mapping[str, str] | None = None, attempts: int = 6,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        import httpx

        token = clean_token(token)
        self._token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base = url.rstrip("/")
        # request field -> the flag the user typed, so a refusal names what to change
        self.flags = dict(flags or {})
        self.attempts = max(1, attempts)  # tries per call, the first included
        self.sleep = sleep
        self._client = httpx.Client(base_url=self.base, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, *, idempotent: bool | None = None,
              **kwargs: Any) -> dict[str, Any]:
        """One call, retried while the server says to come back: a 429 always (it was not
        admitted, so nothing was done), a 503 or a lost connection only for a call that is
        safe to repeat (a read; a trigger, the same run for the same request; an upload,
        the stored result for the same document)."""
        import httpx

        safe = method == "GET" if idempotent is None else idempotent
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._client.request(method, path, **kwargs)
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                # a server restarting comes back within seconds; a wrong URL never does,
                # so a connection that failed is tried again twice, not `attempts` times
                if safe and _transient(exc) and attempt < min(self.attempts, CONNECT_ATTEMPTS):
                    self._pause(method, path, f"{type(exc).__name__}", attempt, None)
                    continue
                reason = self._without_token(f"{type(exc).__name__}: {exc}".strip())
                raise ClientError(f"cannot reach {self.base}: {reason}") from None
            if attempt < self.attempts and (response.status_code == 429 or (
                    safe and response.status_code in (502, 503, 504))):
                self._pause(method, path, f"HTTP {response.status_code}", attempt,
                            response.headers.get("retry-after"))
                continue
            break
        if response.status_code == 422:
            raise ClientError(_error_text(response, self.flags))
        if response.status_code >= 400:
            raise ClientError(f"HTTP {response.status_code} from {method} {path}: "
                              f"{_error_text(response, self.flags)}")
        try:
            data = response.json()
        except ValueError:
            raise ClientError(f"{method} {path}: the server did not answer JSON") from None
        if not isinstance(data, dict):
            raise ClientError(f"{method} {path}: unexpected answer {str(data)[:100]}")
        return data

    def _without_token(self, text: str) -> str:
        """`text` (an error's words) with the token blanked out wherever it appears."""
        return text.replace(self._token, "sw_...") if self._token else text

    def _pause(self, method: str, path: str, why: str, attempt: int,
               retry_after: str | None) -> None:
        """Wait before the next attempt: the server's Retry-After, else 1, 2, 4 ... s."""
        wait = min(RETRY_WAIT_MAX_S, 2.0 ** (attempt - 1))
        if retry_after is not None and retry_after.strip().isdigit():
            wait = min(RETRY_WAIT_MAX_S, float(retry_after))
        print(f"{why} from {method} {path}: retrying in {wait:g} s "
              f"(attempt {attempt + 1} of {self.attempts})", file=sys.stderr, flush=True)
        self.sleep(wait)

    def trigger(self, body: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        # the same request (or key) is the same run: safe to send again
        return self._call("POST", "/api/v1/runs", json=body, headers=headers, idempotent=True)

    def upload(self, body: dict[str, Any]) -> dict[str, Any]:
        """Store one result document; the same document again answers the stored one."""
        return self._call("POST", "/api/v1/results", json=body, idempotent=True)

    def upload_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        """Store a batch of documents; the same batch again answers the stored ones."""
        return self._call("POST", "/api/v1/results/batch", json=body, idempotent=True)

    def run(self, run_id: int) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/runs/{run_id}")

    def get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call("GET", path, params=params)

    def sweep(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/api/v1/sweeps", json=body)

    def bisect(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/api/v1/bisects", json=body)

    def get_sweep(self, sweep_id: int) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/sweeps/{sweep_id}")

    def cancel_sweep(self, sweep_id: int) -> dict[str, Any]:
        return self._call("POST", f"/api/v1/sweeps/{sweep_id}/cancel")



def flag_for(field: str, flags: Mapping[str, str]) -> str:
    """`matrix.batch_sizes[1]` -> `--batch (value 2)` when the caller knows the flag; the
    field itself otherwise."""
    match = re.fullmatch(r"(.*?)((?:\[\d+\])*)", field)
    base, index = (match.group(1), match.group(2)) if match else (field, "")
    flag = flags.get(base)
    if flag is None:
        return field
    positions = [int(i) + 1 for i in re.findall(r"\[(\d+)\]", index)]
    return f"{flag} (value {positions[0]})" if positions else flag


def _error_text(response: Any, flags: Mapping[str, str] | None = None) -> str:
    """The server's refusal in one line: each field once, named by its flag where known."""
    try:
        data = response.json()
    except ValueError:
        return (response.text or response.reason_phrase or "").strip().splitlines()[0][:300] \
            if (response.text or response.reason_phrase) else "no message"
    if isinstance(data, dict):
        errors = [e for e in data.get("errors") or [] if isinstance(e, dict)]
        if errors:  # `detail` repeats them: say each once
            parts = [f"{flag_for(str(e.get('field')), flags or {})}: {e.get('message')}"
                     for e in errors]
            return "; ".join(dict.fromkeys(parts))[:500]
        detail = str(data.get("detail", "")) if not isinstance(data.get("detail"), list) \
            else "; ".join(str(d.get("msg", d)) for d in data["detail"])
        return detail[:500] or "no message"
    return str(data)[:300]


# ---- waiting and reporting -----------------------------------------------------------------

def exit_code_for(run: dict[str, Any]) -> int:
    verdict = run.get("verdict")
    if verdict == "pass":
        return EXIT_PASS
    if verdict == "regression":
        return EXIT_REGRESSION
    if verdict == "inconclusive":
        return EXIT_INCONCLUSIVE
    return EXIT_ERROR


def _finished_count(progress: dict[str, Any]) -> int:
    return int(progress.get("done", 0)) + int(progress.get("failed", 0)) + \
        int(progress.get("skipped", 0))


@dataclass(frozen=True)
class Watched:
    """How to follow one kind of long-running thing (a run, a sweep) while polling it."""

    label: str  # "run 12", "bisect 3"
    unit: str  # what the bar counts: "cells", "runs"
    fetch: Callable[[], dict[str, Any]]  # the thing as the server has it now
    done: Callable[[dict[str, Any]], int]
    total: Callable[[dict[str, Any]], int | None]
    doing: Callable[[dict[str, Any]], str]  # its status, or what it is doing now
    timed_out: Callable[[dict[str, Any], float], str]  # the error's words


def follow(watched: Watched, first: dict[str, Any], *, timeout_s: float, poll_s: float,
           quiet: bool = False) -> dict[str, Any]:
    """Poll until it finishes, with a progress bar (a line per change in a CI log).

    A few failed polls in a row are tolerated (a server restarting under CI); more are not.
    ClientError on timeout."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    deadline = time.monotonic() + timeout_s
    failures = 0
    last_line = ""
    current = first
    bar = Progress(TextColumn(f"{watched.label} " + "[bold]{task.fields[doing]}[/]"),
                   BarColumn(), MofNCompleteColumn(), TextColumn(watched.unit),
                   TimeElapsedColumn(), console=console, disable=quiet)
    with bar:
        task = bar.add_task(watched.label, total=watched.total(current),
                            completed=watched.done(current), doing=watched.doing(current))
        while current["status"] not in FINISHED:
            if time.monotonic() >= deadline:
                raise ClientError(watched.timed_out(current, timeout_s))
            time.sleep(poll_s)
            try:
                current = watched.fetch()
                failures = 0
            except ClientError:
                failures += 1
                if failures >= 5:
                    raise
                continue
            done, total, doing = watched.done(current), watched.total(current), \
                watched.doing(current)
            bar.update(task, total=total, completed=done, doing=doing)
            line = f"{watched.label} {doing}: {done}/{total if total else '?'} {watched.unit}"
            if not console.is_terminal and not quiet and line != last_line:
                console.print(line)  # a CI log gets a line per change instead of a bar
                last_line = line
    return current


def wait_for_run(
    api: Api, run: dict[str, Any], *, timeout_s: float, poll_s: float, quiet: bool = False,
) -> dict[str, Any]:
    """Poll until the run finishes, showing cells finished out of total; ClientError on timeout."""
    run_id = int(run["id"])

    def timed_out(r: dict[str, Any], after: float) -> str:
        p = r.get("progress", {})
        return (f"timed out after {after:g} s waiting for run {run_id} (status {r['status']}, "
                f"{_finished_count(p)}/{p.get('total', '?')} cells finished)")

    return follow(Watched(
        label=f"run {run_id}", unit="cells", fetch=lambda: api.run(run_id),
        done=lambda r: _finished_count(r.get("progress", {})),
        total=lambda r: r.get("progress", {}).get("total") or None,
        doing=lambda r: str(r["status"]), timed_out=timed_out,
    ), run, timeout_s=timeout_s, poll_s=poll_s, quiet=quiet)


def print_run(run: dict[str, Any], url: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log file has no width; keep series keys whole
    table = Table(title=f"run {run['id']}: {run.get('project')} @ {run.get('revision')}")
    for column in ("series", "status", "speedup [95% CI]", "eager ms", "candidate ms",
                   "accuracy", "verdict", "timing"):
        table.add_column(column, justify="right" if "ms" in column or "speedup" in column
                         else "left")
    for cell in run.get("cells", []):
        r = cell.get("result") or {}
        if r.get("speedup") is not None:
            speedup = f"{r['speedup']:.2f}x [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        else:
            speedup = "-"
        accuracy = {True: "ok", False: "FAILED", None: "-"}[r.get("accuracy_passed")]
        status = cell["status"]
        if cell.get("error") and status != "done":
            status += f": {cell['error'][:80]}"
        judgement = cell.get("judgement") or {}
        cell_verdict = judgement.get("verdict") or "-"
        if judgement.get("suspect") and cell_verdict != "regression":
            cell_verdict += " (suspect)"
        table.add_row(
            cell["series_key"], status, speedup,
            _ms(r.get("baseline_median_ms")), _ms(r.get("candidate_median_ms")), accuracy,
            cell_verdict, _timing_text(r),
        )
    console.print(table)
    verdict = run.get("verdict") or "none"
    console.print(f"status: {run['status']}   verdict: [bold]{verdict}[/]")
    for reason in run.get("reasons") or []:
        console.print(f"  - {reason}")
    if url:
        console.print(f"results: {url}")


def _timing_text(result: dict[str, Any]) -> str:
    """'graphs, 3 proc, 6.1 s' : how the cell was timed and how long deciding took."""
    evidence = result.get("evidence") or {}
    timing = evidence.get("timing") or {}
    adaptive = evidence.get("adaptive") or {}
    parts = []
    if timing.get("mode"):
        parts.append(str(timing["mode"]))
    if adaptive.get("processes"):
        parts.append(f"{adaptive['processes']} proc")
    seconds = adaptive.get("timing_seconds", timing.get("timing_seconds"))
    if isinstance(seconds, (int, float)):
        parts.append(f"{seconds:.1f} s")
    return ", ".join(parts) or "-"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
