"""`speedwatch policy show|set` against a real API: set changes only what it is given, a
refusal is exit 2 with the server's reason naming the field, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from cli.client import EXIT_ERROR


def _policy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", "policy", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def _ok(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    document: dict[str, Any] = json.loads(proc.stdout)
    return document


def test_set_changes_only_the_options_given_and_show_reads_it_back(
    api_url: str, admin_token: str, read_token: str
) -> None:
    admin = ["--url", api_url, "--token", admin_token, "--project", "team/cli"]
    first = _ok(_policy("set", *admin, "--threshold", "0.05", "--series-threshold", "a/b=0.1",
                        "--series-threshold", "c/d=0.2"))
    assert first["stored"] and first["policy"]["threshold"] == 0.05
    _ok(_policy("set", *admin, "--window", "5", "--series-threshold", "c/d="))
    shown = _ok(_policy("show", "--url", api_url, "--token", read_token,
                        "--project", "team/cli"))
    assert shown["policy"] == {"baseline": "previous", "threshold": 0.05, "window": 5,
                               "pinned_run_id": None, "series_thresholds": {"a/b": 0.1},
                               "confirm": True, "confirm_processes": 3}


def test_a_refused_policy_or_a_weak_token_is_exit_2_with_one_line(
    api_url: str, admin_token: str, ci_token: str
) -> None:
    for token, args, needle in (
        (admin_token, ["--threshold", "2"], "threshold"),
        (admin_token, ["--baseline", "pinned"], "pinned_run_id"),
        (admin_token, ["--series-threshold", "oops"], "SERIES_KEY=VALUE"),
        (ci_token, ["--threshold", "0.5"], "HTTP 403"),
    ):
        proc = _policy("set", "--url", api_url, "--token", token, "--project", "cli", *args)
        assert proc.returncode == EXIT_ERROR, proc.stdout
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("error: ") and needle in line, line
