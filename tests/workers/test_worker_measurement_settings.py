"""A worker with a measurement variable it could not use refuses to start, naming it, rather
than failing its first cell minutes later."""

from __future__ import annotations

import pytest

from benchmarks import process_settings


def test_every_bad_measurement_variable_is_named_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEEDWATCH_FORK_SERVER", "yes")
    monkeypatch.setenv("SPEEDWATCH_FORK_PRELOAD", "maybe")
    monkeypatch.setenv("SPEEDWATCH_PREPARE_AHEAD", "-1")
    monkeypatch.setenv("SPEEDWATCH_BUILD_CACHE_MAX_BYTES", "ten gigs")
    monkeypatch.setenv("SPEEDWATCH_INDUCTOR_PROGRAMS", "on")

    found = process_settings.problems()

    assert len(found) == 5
    for name in ("SPEEDWATCH_FORK_SERVER", "SPEEDWATCH_FORK_PRELOAD",
                 "SPEEDWATCH_PREPARE_AHEAD", "SPEEDWATCH_BUILD_CACHE_MAX_BYTES",
                 "SPEEDWATCH_INDUCTOR_PROGRAMS"):
        assert sum(name in line for line in found) == 1, (name, found)


def test_the_defaults_are_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPEEDWATCH_FORK_SERVER", "SPEEDWATCH_FORK_PRELOAD",
                 "SPEEDWATCH_PREPARE_AHEAD", "SPEEDWATCH_BUILD_CACHE_MAX_BYTES",
                 "SPEEDWATCH_INDUCTOR_PROGRAMS"):
        monkeypatch.delenv(name, raising=False)
    assert process_settings.problems() == []


def test_a_worker_with_a_bad_fork_setting_refuses_to_start_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from app.config import get_settings
    from cli.main import cli

    monkeypatch.setenv("SPEEDWATCH_FORK_SERVER", "yes")
    get_settings.cache_clear()
    try:
        # an unknown queue as well: a worker that skipped the check would stop on that
        # instead, with another message, rather than start consuming
        result = CliRunner().invoke(cli, ["worker", "--queues", "no-such-queue"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: SPEEDWATCH_FORK_SERVER='yes': expected auto, 0 or 1"]
