"""The client never prints a token. A token saved with `echo` ends in a newline: it is used
without it; whitespace or another character no header may hold inside a token is refused in
one line naming where the token came from (the flag or the variable), never showing it; and
an error a retry cannot cure is not retried.

`speedwatch submit` runs as CI runs it (a process, its environment), against the real API on
a real socket (executor "none": the run is recorded, not measured)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.client import Api, ClientError

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = ["submit", "--project", "hygiene", "--model", "resnet18", "--backend",
          "onnxruntime", "--width", "8", "--image-size", "32"]


def _speedwatch(args: list[str], env: dict[str, str],
                cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "SPEEDWATCH_TOKEN"}
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120,
                          env={**clean, "PYTHONPATH": str(ROOT), **env})


def _shown(token: str, done: subprocess.CompletedProcess[str]) -> bool:
    """Whether any recognisable part of the token reached the output."""
    secret = token.strip().split()[0].removeprefix("sw_")
    output = done.stdout + done.stderr
    return any(secret[i:i + 12] in output for i in range(0, len(secret) - 11))


@pytest.mark.parametrize("given", ["variable", "flag"])
def test_a_token_that_ends_in_a_newline_is_used_and_never_printed(
    api_url: str, ci_token: str, tmp_path: Path, given: str,
) -> None:
    saved = ci_token + "\n"  # `echo "$TOKEN" > secret`, read back whole
    env = {"SPEEDWATCH_URL": api_url}
    args = [*SUBMIT, "--revision", f"newline-{given}"]
    if given == "variable":
        env["SPEEDWATCH_TOKEN"] = saved
    else:
        args += ["--token", saved]
    done = _speedwatch(args, env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "run " in done.stderr and "created" in done.stderr  # it reached the server
    assert not _shown(ci_token, done)


@pytest.mark.parametrize(("given", "named"), [("variable", "SPEEDWATCH_TOKEN"),
                                              ("flag", "--token")])
@pytest.mark.parametrize("inside", [" ", "\n", "\t", "\x7f", "é"])
def test_a_token_with_whitespace_or_a_control_inside_is_refused_in_one_line_naming_its_source(
    api_url: str, ci_token: str, tmp_path: Path, given: str, named: str, inside: str,
) -> None:
    broken = ci_token[:20] + inside + ci_token[20:]
    env = {"SPEEDWATCH_URL": api_url}
    args = [*SUBMIT, "--revision", "broken"]
    if given == "variable":
        env["SPEEDWATCH_TOKEN"] = broken
    else:
        args += ["--token", broken]
    done = _speedwatch(args, env, tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {named}: the token has "), line
    assert "inside it" in line
    assert not _shown(ci_token, done)


def test_an_error_no_retry_can_cure_is_said_once_without_the_token(
    api_url: str, ci_token: str,
) -> None:
    """A header no request may carry (here an idempotency key with a line break, from the
    user's flag) fails before anything is sent: once, not three times."""
    waits: list[float] = []
    api = Api(api_url, ci_token, sleep=waits.append)
    try:
        with pytest.raises(ClientError) as refused:
            api.trigger({"project": "hygiene"}, idempotency_key="key\nwith a break")
    finally:
        api.close()
    assert waits == []
    assert "LocalProtocolError" in str(refused.value)
    assert ci_token not in str(refused.value)
    assert len(str(refused.value).splitlines()) == 1


def test_a_url_of_another_scheme_is_not_retried(ci_token: str) -> None:
    waits: list[float] = []
    api = Api("ftp://127.0.0.1:9", ci_token, sleep=waits.append)
    try:
        with pytest.raises(ClientError) as refused:
            api.get("/api/v1/runs")
    finally:
        api.close()
    assert waits == []
    assert "UnsupportedProtocol" in str(refused.value)
