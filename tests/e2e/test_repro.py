"""`speedwatch repro RESULT_ID` writes a folder that measures the stored cell again, and
`speedwatch bench --spec` measures exactly that spec (same series key).

A real server on a socket, the real CLI in subprocesses, a real (tiny) measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import httpx

from benchmarks.timing_policy import TimingPolicy
from devkit.factories import bearer, bench_result, ingest_body, tiny_spec

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"})


def test_a_stored_result_becomes_a_bundle_whose_spec_bench_measures_again(
    api_url: str, ci_token: str, tmp_path: Path,
) -> None:
    spec = replace(tiny_spec(options={"threads": 1}),
                   timing=TimingPolicy(rounds=5, min_rounds=5, iters_per_round=5,
                                       warmup_iters=2, warmup_seconds=0.0, processes=1))
    posted = httpx.post(f"{api_url}/api/v1/results", headers=bearer(ci_token), timeout=30,
                        json=ingest_body(bench_result(spec), revision="v7"))
    assert posted.status_code == 201, posted.text
    result_id = posted.json()["result_id"]

    made = _cli("repro", str(result_id), "--url", api_url, "--token", ci_token, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    bundle = tmp_path / f"repro-{result_id}"
    assert sorted(p.name for p in bundle.iterdir()) == [
        "README.md", "environment.json", "fingerprint.json", "repro.sh", "result.json",
        "spec.json"]
    assert json.loads((bundle / "environment.json").read_text())["pins"] == [
        "onnxruntime==1.22.0"]
    script = (bundle / "repro.sh").read_text()
    assert "pip install \"${SPEEDWATCH_PACKAGE:-speedwatch[bench]}\" onnxruntime==1.22.0" in script
    assert "speedwatch bench --spec spec.json --json reproduced.json" in script
    assert "Stored: 1.500x [1.425, 1.575]" in (bundle / "README.md").read_text()

    # the exact spec, measured here from a fresh directory (the venv step is the user's)
    fresh = tmp_path / "elsewhere"
    fresh.mkdir()
    ran = _cli("bench", "--spec", str(bundle / "spec.json"), "--no-isolate", "--json",
               "reproduced.json", cwd=fresh)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (again,) = json.loads((fresh / "reproduced.json").read_text())
    assert again["series_key"] == posted.json()["series_key"]
    assert again["spec"]["timing"]["rounds"] == 5

    second = _cli("repro", str(result_id), "--url", api_url, cwd=tmp_path)
    assert second.returncode == 2 and "--out:" in second.stderr and "exists already" in \
        second.stderr


def test_an_unknown_result_and_a_broken_spec_file_are_one_line_errors(
    api_url: str, ci_token: str, tmp_path: Path,
) -> None:
    unknown = _cli("repro", "424242", "--url", api_url, "--token", ci_token, cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines()[-1] == (
        "error: HTTP 404 from GET /api/v1/results/424242: result 424242 not found")
    for typed in ("abc", "0"):
        wrong = _cli("repro", typed, "--url", api_url, cwd=tmp_path)
        assert wrong.returncode == 2
        assert wrong.stderr.strip() == (f"error: RESULT_ID: {typed!r} is not a result id (a "
                                        "whole number from 1, as run pages show it)")
    (tmp_path / "spec.json").write_text('{"backend": "tensorrtt"}')
    broken = _cli("bench", "--spec", "spec.json", cwd=tmp_path)
    assert broken.returncode == 2 and broken.stderr.startswith("error: --spec (spec.json): ")


SPEC_FILE_MISTAKES = [
    ({"model": "subprocess:getoutput"}, "model: 'subprocess:getoutput': 'subprocess' is "
     "Python's own (the standard library or a private module), not a package of models"),
    ({"model": "code:interact"}, "model: 'code:interact': 'code' is Python's own"),
    ({"model": "os.path:join"}, "model: 'os.path:join': 'os' is Python's own"),
    ({"options": {"threads": "1; id"}}, "options.threads: Input should be a valid integer"),
    ({"options": {"threads": True}}, "options.threads: Input should be a valid integer"),
    ({"batch_size": "1"}, "batch_size: Input should be a valid integer"),
    ({"timing": {"profile": "yes"}}, "timing.profile: Input should be a valid boolean"),
    ({"timing": {"max_host_load": "0.5"}}, "timing.max_host_load: Input should be a valid "
     "number"),
    ({"colour": "red"}, "colour: unknown field"),
]


def test_a_spec_file_is_held_to_the_stored_specs_rules_in_one_line_measuring_nothing(
    tmp_path: Path,
) -> None:
    """A spec file may be someone else's (a repro bundle holds a stored result's spec): the
    schema of stored results and the model rule apply, each mistake is one line naming the
    field, exit 2, and nothing is imported, called or measured."""
    for i, (fields, says) in enumerate(SPEC_FILE_MISTAKES):
        spec = {"model": "resnet18", "width": 8, "image_size": 32, **fields}
        (tmp_path / f"spec{i}.json").write_text(json.dumps(spec))
        done = _cli("bench", "--spec", f"spec{i}.json", "--no-isolate", cwd=tmp_path)
        assert done.returncode == 2, (fields, done.stdout, done.stderr)
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"error: --spec (spec{i}.json): {says}"), line
        assert done.stdout == ""
