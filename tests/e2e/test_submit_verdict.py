"""`speedwatch submit --wait` on a run that regresses: it prints the verdict's reasons and
exits 1, as a CI job needs to fail the build and say why."""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
import time

import httpx
from sqlalchemy import select

from app.config import Settings
from app.db import session_scope
from app.models import Cell, Run
from app.services import runs as run_service
from benchmarks.result import Speedup
from benchmarks.spec import BenchSpec
from benchmarks.stats import PROCESSES_METHOD
from cli.client import EXIT_INCONCLUSIVE, EXIT_REGRESSION
from devkit.factories import bearer, tiny_spec
from tests.app.detection_docs import body, measured


def play_worker(settings: Settings, revision: str, speedup: float,
                half_width: float | None = None) -> None:
    """Wait for the run's cell, then record a measured result for it as a worker would
    (`half_width`: a multi-process result whose interval is +-half_width, relative)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with session_scope(settings) as session:
            cell = session.scalars(
                select(Cell).join(Run, Run.id == Cell.run_id)
                .where(Run.revision == revision, Run.kind == "triggered")
            ).first()
            if cell is not None:
                assert run_service.claim_cell(session, cell.id, settings=settings) is not None
                document = measured(speedup, spec=BenchSpec.from_dict(cell.spec))
                if half_width is not None and document.speedup is not None:
                    value = document.speedup.value
                    document.speedup = Speedup(value, value * (1 - half_width),
                                               value * (1 + half_width),
                                               method=PROCESSES_METHOD)
                run_service.record_result(session, cell.id, document)
                run_service.finish_run_if_complete(session, cell.run_id)
                return
        time.sleep(0.1)


def submit_after_baseline(api_url: str, ci_token: str, settings: Settings, speedup: float,
                          half_width: float | None = None) -> subprocess.CompletedProcess[str]:
    """Ingest a 2.0x baseline, then `submit --wait` a run whose cell a playing worker
    records at `speedup` (see play_worker); returns the finished CLI process."""
    project, revision = f"cli-{secrets.token_hex(4)}", f"v2-{secrets.token_hex(4)}"
    # the design the server gives a CPU cell by default, and the one thread `submit` asks
    # for on the CPU by default, so the run lands in this series
    baseline = body(measured(2.0, spec=tiny_spec(weights="constant",
                                                 options={"sides": "split", "threads": 1})),
                    "v1", project=project)
    posted = httpx.post(f"{api_url}/api/v1/results", json=baseline, headers=bearer(ci_token))
    assert posted.status_code == 201, posted.text

    worker = threading.Thread(target=play_worker,
                              args=(settings, revision, speedup, half_width), daemon=True)
    worker.start()
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "submit", "--url", api_url, "--token", ci_token,
         "--project", project, "--revision", revision, "--branch", "main", "--model", "resnet18",
         "--backend", "onnxruntime", "--weights", "constant", "--width", "8",
         "--image-size", "32", "--wait", "--poll", "0.2", "--timeout", "60"],
        capture_output=True, text=True, timeout=90, check=False)
    worker.join(timeout=5)
    return proc


def test_submit_wait_prints_the_reasons_and_exits_1_on_regression(
    api_url: str, ci_token: str, settings: Settings
) -> None:
    proc = submit_after_baseline(api_url, ci_token, settings, 1.6)
    assert proc.returncode == EXIT_REGRESSION, proc.stdout + proc.stderr
    assert "verdict: regression" in proc.stdout
    assert "speedup 2.00x -> 1.60x" in proc.stdout
    assert "slower, past the 3% threshold" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_submit_wait_exits_3_when_the_comparison_is_inconclusive_and_says_why(
    api_url: str, ci_token: str, settings: Settings
) -> None:
    """1% down, measured to +-6%: a 3% drop is not ruled out. Not a pass, not a
    regression: exit 3 with the reason, so CI can re-run or measure longer."""
    proc = submit_after_baseline(api_url, ci_token, settings, 1.98, half_width=0.06)
    assert proc.returncode == EXIT_INCONCLUSIVE, proc.stdout + proc.stderr
    assert "verdict: inconclusive" in proc.stdout
    assert "uncertain: a drop beyond 3% is not ruled out" in proc.stdout
    assert "inconclusive" in proc.stdout.split("verdict:")[0]  # the cell's own column
    assert "Traceback" not in proc.stderr
