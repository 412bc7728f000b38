"""A worker with a measurement variable it could not use refuses to start, naming it, rather
than failing its first cell minutes later."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import process_settings


def test_every_bad_measurement_variable_is_named_at_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    monkeypatch.setenv("SPEEDWATCH_FORK_SERVER", "yes")
    monkeypatch.setenv("SPEEDWATCH_FORK_PRELOAD", "maybe")
    monkeypatch.setenv("SPEEDWATCH_PREPARE_AHEAD", "-1")
    monkeypatch.setenv("SPEEDWATCH_BUILD_CACHE_MAX_BYTES", "ten gigs")
    monkeypatch.setenv("SPEEDWATCH_INDUCTOR_PROGRAMS", "on")
    # a directory that cannot be made (under a file), which even root cannot do
    monkeypatch.setenv("SPEEDWATCH_PYCACHE_DIR", str(a_file / "pycache"))
    monkeypatch.setenv("SPEEDWATCH_GPU_TIMING_LOCK", str(a_file / "gpu.lock"))

    found = process_settings.problems()

    assert len(found) == 7
    for name in ("SPEEDWATCH_FORK_SERVER", "SPEEDWATCH_FORK_PRELOAD",
                 "SPEEDWATCH_PREPARE_AHEAD", "SPEEDWATCH_BUILD_CACHE_MAX_BYTES",
                 "SPEEDWATCH_INDUCTOR_PROGRAMS", "SPEEDWATCH_PYCACHE_DIR",
                 "SPEEDWATCH_GPU_TIMING_LOCK"):
        assert sum(name in line for line in found) == 1, (name, found)


def test_the_defaults_are_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPEEDWATCH_FORK_SERVER", "SPEEDWATCH_FORK_PRELOAD",
                 "SPEEDWATCH_PREPARE_AHEAD", "SPEEDWATCH_BUILD_CACHE_MAX_BYTES",
                 "SPEEDWATCH_INDUCTOR_PROGRAMS", "SPEEDWATCH_PYCACHE_DIR",
                 "SPEEDWATCH_GPU_TIMING_LOCK"):
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


def test_a_bytecode_directory_that_can_be_made_is_made_and_off_is_usable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPEEDWATCH_PYCACHE_DIR", str(tmp_path / "new" / "pycache"))
    assert process_settings.problems() == []
    assert (tmp_path / "new" / "pycache").is_dir()
    monkeypatch.setenv("SPEEDWATCH_PYCACHE_DIR", "off")
    assert process_settings.problems() == []
