"""`speedwatch upload FILE...` stores what `speedwatch bench --json` wrote elsewhere, through
the real API on a socket: every document, once, in as few requests as the server takes; a
file or document it cannot store is one line naming it, and nothing of that request is
stored."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import httpx

from cli.client import EXIT_ERROR
from cli.upload import BATCH_DOCUMENTS, Document, batches
from devkit.factories import bearer, bench_result, tiny_spec

ROOT = Path(__file__).resolve().parents[2]


def _upload(cwd: Path, url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEEDWATCH_")}
    return subprocess.run(
        [sys.executable, "-m", "cli", "upload", "--url", url, *args], cwd=cwd,
        env={**env, "SPEEDWATCH_TOKEN": token, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120, check=False)


def _bench_json(path: Path, *batch_sizes: int) -> Path:
    """What `speedwatch bench --json` writes: a list of result documents."""
    path.write_text(json.dumps([bench_result(tiny_spec(batch_size=b)).to_dict()
                                for b in batch_sizes]))
    return path


def test_upload_stores_every_document_once_and_again_stores_nothing(
    tmp_path: Path, api_url: str, token: str
) -> None:
    project = f"up-{secrets.token_hex(3)}"
    files = [str(_bench_json(tmp_path / "a.json", 1, 2)), str(_bench_json(tmp_path / "b.json", 4))]
    args = ["--project", project, "--revision", "r1", "--pin", "onnxruntime==1.22.0", *files]
    first = _upload(tmp_path, api_url, token, *args)
    assert first.returncode == 0, first.stderr
    assert "3 stored, 0 stored already" in first.stdout
    run_url = first.stdout.rsplit("run ", 1)[1].strip()
    run = httpx.get(run_url.replace("/runs/", "/api/v1/runs/"), headers=bearer(token)).json()
    assert sorted(c["series_key"].split("/")[4] for c in run["cells"]) == ["bs1", "bs2", "bs4"]
    again = _upload(tmp_path, api_url, token, *args)
    assert again.returncode == 0 and "0 stored, 3 stored already" in again.stdout


def test_a_refused_document_is_named_by_its_file_and_nothing_of_it_is_stored(
    tmp_path: Path, api_url: str, token: str
) -> None:
    project = f"up-{secrets.token_hex(3)}"
    docs = [bench_result(tiny_spec(batch_size=b)).to_dict() for b in (1, 2)]
    docs[1]["spec"]["model"] = "subprocess:getoutput"
    (tmp_path / "bad.json").write_text(json.dumps(docs))
    done = _upload(tmp_path, api_url, token, "--project", project, "--revision", "r1",
                   "--pin", "onnxruntime==1.22.0", "bad.json")
    assert done.returncode == EXIT_ERROR
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.json[1]" in lines[0] and "standard library" in lines[0]
    assert "Traceback" not in done.stderr
    runs = httpx.get(f"{api_url}/api/v1/runs", params={"project": project},
                     headers=bearer(token))
    assert runs.json()["items"] == []


def test_bad_files_are_one_line_naming_the_file(
    tmp_path: Path, api_url: str, token: str
) -> None:
    (tmp_path / "notes.txt").write_text("not json")
    (tmp_path / "numbers.json").write_text("[1, 2]")
    base = ["--project", "p", "--revision", "r1"]
    for args, words in (
        ([*base, "--pin", "onnxruntime==1.22.0", "notes.txt"], "notes.txt: not JSON"),
        ([*base, "--pin", "onnxruntime==1.22.0", "numbers.json"], "numbers.json[0]: not a"),
        ([*base, "--pin", "onnxruntime==1.22.0", "missing.json"], "missing.json: cannot read"),
    ):
        done = _upload(tmp_path, api_url, token, *args)
        assert done.returncode == EXIT_ERROR, done.stdout
        assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr


def test_documents_go_in_requests_of_at_most_the_bound_and_about_a_mebibyte() -> None:
    small = [Document(f"f[{i}]", {}, 1_000) for i in range(BATCH_DOCUMENTS * 2 + 5)]
    assert [len(b) for b in batches(small)] == [BATCH_DOCUMENTS, BATCH_DOCUMENTS, 5]
    large = [Document(f"g[{i}]", {}, 400_000) for i in range(5)]
    assert [len(b) for b in batches(large)] == [2, 2, 1]
    assert batches([]) == []
