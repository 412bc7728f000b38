"""`speedwatch submit` as CI runs it: exit codes and one-line reasons, against a real API."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
from typer.main import get_command

from benchmarks.timing_policy import (
    default_timing,
    timing_fields,
    timing_flag,
    timing_knob,
    user_timing_fields,
)
from cli.client import EXIT_ERROR, EXIT_PASS, EXIT_REGRESSION, exit_code_for
from cli.main import cli
from devkit.ports import free_port
from tests.receiver import Receiver


def _submit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", "submit", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def _basic(url: str, token: str, revision: str = "r1") -> list[str]:
    return ["--url", url, "--token", token, "--project", "cli", "--revision", revision,
            "--model", "resnet18", "--width", "8", "--image-size", "32"]


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_a_server_that_cannot_be_reached_is_tried_three_times_then_exit_2_with_one_line(
) -> None:
    proc = _submit(*_basic(f"http://127.0.0.1:{free_port()}", "t0ken"))
    assert proc.returncode == EXIT_ERROR
    *retries, error = proc.stderr.strip().splitlines()
    assert [r.split(": retrying in ")[1] for r in retries] == [
        "1 s (attempt 2 of 6)", "2 s (attempt 3 of 6)"]
    assert all(r.startswith("ConnectError from POST /api/v1/runs") for r in retries)
    assert error.startswith("error: ") and "cannot reach" in error
    assert "Traceback" not in proc.stderr


def test_a_refused_pin_is_exit_2_naming_the_flag(api_url: str, ci_token: str) -> None:
    proc = _submit(*_basic(api_url, ci_token), "--pin", "onnxruntime==1.0 --index-url=http://x")
    assert proc.returncode == EXIT_ERROR
    line = _one_line_error(proc)
    assert line.startswith("error: --pin: pin 'onnxruntime==1.0 --index-url=http://x'"), line


def test_a_bad_token_is_exit_2(api_url: str) -> None:
    proc = _submit(*_basic(api_url, "not-a-token"))
    assert proc.returncode == EXIT_ERROR
    assert "HTTP 401" in _one_line_error(proc)


def test_without_wait_a_stored_run_is_exit_0_and_a_retry_finds_the_same_run(
    api_url: str, ci_token: str
) -> None:
    revision = f"retry-{secrets.token_hex(4)}"
    first = _submit(*_basic(api_url, ci_token, revision), "--pin", "onnxruntime==1.22.0")
    again = _submit(*_basic(api_url, ci_token, revision), "--pin", "onnxruntime==1.22.0")
    assert (first.returncode, again.returncode) == (EXIT_PASS, EXIT_PASS), first.stderr
    assert "(created)" in first.stderr and "(existing)" in again.stderr
    assert first.stderr.split(" (")[0] == again.stderr.split(" (")[0]  # "run N"


def test_bench_and_submit_put_the_same_flags_in_the_same_series(
    tmp_path: Path, api_url: str, ci_token: str
) -> None:
    flags = ["--model", "resnet18", "--backend", "onnxruntime", "--width", "8",
             "--image-size", "32", "--weights", "constant,tensor", "--batch", "1"]
    out = tmp_path / "bench.json"
    bench = subprocess.run(
        [sys.executable, "-m", "cli", "bench", *flags, "--rounds", "3", "--min-rounds", "2",
         "--iters-per-round", "2", "--warmup", "1", "--max-seconds", "2", "--processes", "1",
         "--max-processes", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert bench.returncode == 0, bench.stderr
    bench_keys = sorted(d["series_key"] for d in json.loads(out.read_text()))
    submitted = _submit("--url", api_url, "--token", ci_token, "--project", "same-series",
                        "--revision", "r1", *flags)
    assert submitted.returncode == EXIT_PASS, submitted.stderr
    run_id = int(submitted.stderr.split("run ")[1].split(" ")[0])
    run = httpx.get(f"{api_url}/api/v1/runs/{run_id}",
                    headers={"Authorization": f"Bearer {ci_token}"}).json()
    assert sorted(c["series_key"] for c in run["cells"]) == bench_keys
    assert len(bench_keys) == 2 and all("/cpu/t1/" in key for key in bench_keys)


def test_verdicts_map_to_ci_exit_codes() -> None:
    assert exit_code_for({"verdict": "pass"}) == EXIT_PASS == 0
    assert exit_code_for({"verdict": "regression"}) == EXIT_REGRESSION == 1
    assert exit_code_for({"verdict": "error"}) == EXIT_ERROR == 2
    assert exit_code_for({"verdict": None}) == EXIT_ERROR


def _a_valid_value(field: str) -> tuple[list[str], object]:
    """A value the field's declaration takes, as flags and as it should reach the API:
    the CPU default (the bare declaration's may be one only the harness may hold), a
    yes-or-no field's `--no-` form, a vocabulary's last word."""
    kind = {name: kind for name, kind, _d, _k in timing_fields()}[field]
    knob, flag = timing_knob(field), timing_flag(field)
    if kind is bool:
        return [f"--no-{flag[2:]}"], False
    value = knob.choices[-1] if knob.choices else getattr(default_timing("cpu"), field)
    return [flag, str(value)], value


def test_every_timing_flag_reaches_the_request_under_its_field_s_name() -> None:
    """The flags are made from the timing declaration (cli.timing_flags), so a field added
    there is sent by `submit` without a line of CLI code: this walks the declaration."""
    argv: list[str] = []
    expected: dict[str, object] = {}
    for field in user_timing_fields():
        flags, value = _a_valid_value(field)
        argv += flags
        expected[field] = value
    receiver = Receiver(status=200)
    try:
        proc = _submit(*_basic(receiver.url.removesuffix("/hook"), "t0ken"), *argv)
    finally:
        receiver.close()
    assert proc.returncode == EXIT_ERROR  # the receiver's answer is no run
    assert [b["matrix"]["timing"] for b in receiver.bodies] == [expected]


def test_every_measuring_command_has_every_timing_flag() -> None:
    commands = get_command(cli).commands  # type: ignore[attr-defined]
    for name in ("bench", "submit", "demo", "sweep", "bisect"):
        options = {opt for param in commands[name].params for opt in param.opts}
        missing = [timing_flag(f) for f in user_timing_fields() if timing_flag(f) not in options]
        assert missing == [], name
