"""The whole path on real parts: CI's `speedwatch submit` -> API process -> Redis -> a Celery
worker process -> benchmark child processes -> PostgreSQL -> verdict.

Parallel test sessions must not steal each other's cells: the worker and the API use a queue
name unique to this session (SPEEDWATCH_CPU_QUEUE) and their own database (pg_url).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import session_scope
from app.models import Cell, Result, Run
from app.services.tokens import create_token
from devkit.ports import free_port
from tests.workers.helpers import TINY_TIMING, inject_fault, new_run, reload_run
from workers.dispatch import enqueue_cells

pytestmark = pytest.mark.slow

BROKER = "redis://127.0.0.1:6379/0"
RUN_TIMEOUT_S = 300


class Stack:
    """The API and one CPU worker as subprocesses sharing one environment."""

    def __init__(self, env: dict[str, str], url: str, queue: str, logs: Path) -> None:
        self.env, self.url, self.queue, self.logs = env, url, queue, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (lives with the process)
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "cli", *args], env=self.env, stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-4000:]

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def stack(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    queue = f"cpu-e2e-{secrets.token_hex(4)}"
    port = free_port()
    logs = tmp_path_factory.mktemp("e2e-logs")
    env = {
        **os.environ,
        "SPEEDWATCH_DATABASE_URL": pg_url,
        "SPEEDWATCH_BROKER_URL": BROKER,
        "SPEEDWATCH_EXECUTOR": "celery",
        "SPEEDWATCH_CPU_QUEUE": queue,
        "SPEEDWATCH_PUBLIC_READS": "true",
        "SPEEDWATCH_ENVIRONMENT": "development",
        "SPEEDWATCH_VENV_CACHE_DIR": str(logs / "venvs"),
        "SPEEDWATCH_ALLOW_FAULTS": "1",  # honoured by benchmark children only; see below
    }
    s = Stack(env, f"http://127.0.0.1:{port}", queue, logs)
    s.start("worker", "worker", "--queues", queue, "--concurrency", "1")
    s.start("api", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-migrate")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert s.alive("api"), s.log("api")
            assert s.alive("worker"), s.log("worker")
            try:
                if httpx.get(f"{s.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "API did not answer /healthz:\n" + s.log("api")
            time.sleep(0.5)
        yield s
    finally:
        s.stop()
        client = redis.Redis.from_url(BROKER)
        client.delete(queue)
        client.close()


def _wait_finished(session: Session, run_id: int, stack: Stack) -> Run:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        run = reload_run(session, run_id)
        if run.status in ("done", "failed"):
            return run
        assert stack.alive("worker"), "worker died:\n" + stack.log("worker")
        assert time.monotonic() < deadline, f"run {run_id} stuck:\n" + stack.log("worker")
        time.sleep(1)


def test_ci_triggers_over_http_and_a_real_worker_stores_results_in_postgresql(
    stack: Stack, session: Session, settings: Settings
) -> None:
    with session_scope(settings) as s:
        _, token = create_token(s, "ci", "e2e")
    submit = subprocess.run(
        [sys.executable, "-m", "cli", "submit", "--url", stack.url, "--token", token,
         "--project", "e2e", "--revision", f"rev-{secrets.token_hex(3)}",
         "--model", "resnet18", "--backend", "eager,onnxruntime", "--weights", "constant",
         "--batch", "1", "--width", "8", "--image-size", "32",
         "--rounds", str(TINY_TIMING["rounds"]), "--iters-per-round", "2", "--warmup", "1",
         # default processes (3) and adaptive additions, bounded to keep the test short
         "--max-processes", "4",
         "--wait", "--timeout", str(RUN_TIMEOUT_S), "--poll", "1"],
        env=stack.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S + 60, check=False,
    )
    assert submit.returncode == 0, (submit.stdout + submit.stderr
                                    + "\nworker log:\n" + stack.log("worker"))
    assert "verdict: pass" in submit.stdout

    run = session.scalars(select(Run).where(Run.revision.like("rev-%"))
                          .order_by(Run.id.desc())).first()
    assert run is not None
    assert (run.status, run.verdict) == ("done", "pass")
    assert sorted(c.spec["backend"] for c in run.cells) == ["eager", "onnxruntime"]
    assert all(c.status == "done" and c.attempts == 1 for c in run.cells)
    results = session.scalars(select(Result).where(Result.run_id == run.id)).all()
    assert len(results) == 2
    for result in results:
        assert result.status == "ok"
        assert result.speedup is not None and result.ci_low <= result.speedup <= result.ci_high
        assert result.installed_versions["torch"]
        assert result.fingerprint["device_class"] == "cpu"
        # measured adaptively in separate processes, the interval covering their spread
        adaptive = result.evidence["adaptive"]
        assert 3 <= adaptive["processes"] <= 4 and adaptive["timing_seconds"] > 0
        assert adaptive["stopped_by"] in ("decided", "max_processes", "budget")
        assert result.ci_method == "processes-variance-components"
    # the API reports the same, with per-cell progress
    body = httpx.get(f"{stack.url}/api/v1/runs/{run.id}", timeout=10).json()
    assert body["progress"]["done"] == 2 and body["verdict"] == "pass"
    # each cell's evidence, fingerprint and judgement come with the run; no silent pass
    for cell in body["cells"]:
        assert cell["result"]["evidence"]["timing"]["mode"] == "nographs"
        assert cell["result"]["fingerprint"]["device_class"] == "cpu"
        assert cell["judgement"]["verdict"] == "pass"
    assert any("no baseline yet" in reason for reason in body["reasons"])
    assert "measurement:" in submit.stdout


def test_a_crashing_cell_fails_alone_and_the_worker_takes_the_next_one(
    stack: Stack, session: Session, settings: Settings
) -> None:
    run_id, [crash, fine] = new_run(session, settings, revision="crash",
                                    weights=["constant", "tensor"])
    inject_fault(session, crash, "segfault")
    celery = settings.model_copy(update={"executor": "celery", "cpu_queue": stack.queue,
                                         "broker_url": BROKER})
    enqueue_cells([(crash, stack.queue), (fine, stack.queue)], celery)

    run = _wait_finished(session, run_id, stack)

    cells = {c.id: c for c in run.cells}
    assert cells[crash].status == "failed" and "SIGSEGV" in (cells[crash].error or "")
    assert cells[fine].status == "done"
    assert (run.status, run.verdict) == ("failed", "error")
    assert stack.alive("worker")
    # each cell ran exactly once although the first one crashed its child
    assert session.scalar(select(func.count()).select_from(Result)
                          .where(Result.run_id == run_id)) == 2
    assert session.scalar(select(func.max(Cell.attempts)).where(Cell.run_id == run_id)) == 1
