"""`speedwatch ... --help` reads at 100 columns: options grouped in panels, one column for the
option and the rest of the line for what it does, text shown as written (no Rich markup
swallowing `[tool.speedwatch]`), and one name for one option across commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

COMMANDS = ("bench", "demo", "submit", "report", "upload", "sweep", "bisect", "cancel",
            "detect", "serve", "migrate", "worker", "beat", "token create", "policy set")


def _help(command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cli", *command.split(), "--help"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": "100"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _description_starts(text: str) -> list[int]:
    """Where each option's description begins, in columns, in the panels' rows."""
    starts = []
    for line in text.splitlines():
        m = re.match(r"│ (--[\w-]+(?:, -\w)?(?: / --[\w-]+)?"
                     r"(?: [A-Z|]+(?: \([^)]*\))?(?: \.\.\.)?)?)( +)\S", line)
        if m:
            starts.append(len(m.group(1)) + len(m.group(2)) + 2)
    return starts


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_fits_100_columns_with_a_readable_description_column(command: str) -> None:
    text = _help(command)
    assert max(len(line) for line in text.splitlines()) <= 100
    starts = _description_starts(text)
    assert starts, text
    # descriptions start by column 40: at least 58 columns are left for the words
    assert max(starts) <= 40, (command, max(starts))


def test_submit_help_groups_its_options_and_keeps_brackets_as_written() -> None:
    text = _help("submit")
    for panel in ("Server and project", "Environment", "Matrix", "Timing",
                  "Waiting and reports"):
        assert f"╭─ {panel} ─" in text
    assert "[tool.speedwatch] in pyproject.toml" in " ".join(text.split())
    assert len(text.splitlines()) < 120  # it was 191 lines at 100 columns


def test_one_name_for_one_option_in_bench_and_submit() -> None:
    bench, submit = _help("bench"), _help("submit")
    for option in ("--model", "--backend", "--weights", "--precision", "--batch",
                   "--shape-mode", "--opt-level", "--device", "--threads", "--sides",
                   "--builds", "--max-host-load", "--compile-cache"):
        assert f"│ {option} " in bench and f"│ {option} " in submit, option
    assert "--shape " not in bench and "--shape " not in submit


def test_the_top_level_help_groups_the_commands() -> None:
    text = _help("")
    for panel in ("Measure here", "Service", "CI client"):
        assert f"╭─ {panel} ─" in text
