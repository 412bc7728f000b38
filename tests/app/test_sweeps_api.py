"""Sweeps over HTTP and the CLI: one run per release the package index lists (read through
pip's own configuration, here a wheel directory), refused input named by field, progress,
cancelling, and results that stay out of their series' history.

Measurements are stood in (tests.app.sweep_driver): what is tested is what the service
does with the releases and the results, not the benchmark.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from app import ports
from app.config import Settings, get_settings
from app.db import session_scope
from app.errors import ServiceUnavailable
from app.main import create_app
from app.models import Cell, Run, Sweep
from app.schemas import SweepCreate
from app.services.sweeps import create_sweep
from cli.main import cli
from devkit.factories import bearer
from devkit.ports import free_port
from tests.app.sweep_driver import allowing, drive, releases

PKG = "swsweep"
RELEASES = ["0.9", "1.0", "1.1", "1.2rc1", "1.2", "2.0"]
PROJECT = "sweeps-api"
MATRIX = {"models": ["resnet18"], "backends": ["onnxruntime"], "width": 8, "image_size": 32,
          "weights": ["constant", "tensor"]}


def sweep_body(**overrides: Any) -> dict[str, Any]:
    return {"project": PROJECT, "package": PKG, "from_version": "1.0", "to_version": "1.2",
            "holds": ["numpy==1.26.4"], "matrix": MATRIX, **overrides}


@pytest.fixture
def local(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    releases(tmp_path, monkeypatch, {PKG: RELEASES})
    allowed = allowing(settings, PKG)
    monkeypatch.setenv("SPEEDWATCH_ENV_ALLOWLIST",
                       "[" + ",".join(f'"{n}"' for n in allowed.env_allowlist) + "]")
    get_settings.cache_clear()
    return allowed


@pytest.fixture
def api(local: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(local)) as client:
        yield client


def test_a_sweep_is_one_run_per_release_in_range_oldest_first_with_the_holds(
    api: TestClient, ci_token: str, local: Settings,
) -> None:
    created = api.post("/api/v1/sweeps", json=sweep_body(), headers=bearer(ci_token))
    assert created.status_code == 201, created.text
    sweep = created.json()
    # 0.9 and 2.0 are out of range, 1.2rc1 a pre-release nobody asked for
    assert sweep["versions"] == ["1.0", "1.1", "1.2"]
    assert [r["version"] for r in sweep["runs"]] == ["1.0", "1.1", "1.2"]
    assert [r["pins"] for r in sweep["runs"]] == [
        ["numpy==1.26.4", f"{PKG}=={v}"] for v in ("1.0", "1.1", "1.2")]
    assert all(len(r["cells"]) == 2 for r in sweep["runs"])  # constant and tensor
    assert (sweep["status"], sweep["progress"]["total"], sweep["created_by"]) == (
        "running", 3, "test-ci")
    with session_scope(local) as session:
        kinds = {r.kind for r in session.scalars(
            select(Run).where(Run.sweep_id == sweep["id"])).unique()}
    assert kinds == {"sweep"}

    with_pre = api.post("/api/v1/sweeps", json=sweep_body(pre=True), headers=bearer(ci_token))
    assert with_pre.json()["versions"] == ["1.0", "1.1", "1.2rc1", "1.2"]


@pytest.mark.parametrize(("overrides", "field", "words"), [
    ({"package": "left-pad"}, "package", "not on the allowlist"),
    ({"from_version": "1.x"}, "from_version", "not a plain release version"),
    ({"from_version": "3.0", "to_version": "4.0"}, "to_version",
     "lists no release of swsweep from 3.0 to 4.0"),
    ({"max_versions": 2}, "max_versions", "swsweep has 3 releases from 1.0 to 1.2"),
    ({"max_versions": 500}, "max_versions", "more than this server's limit of 40"),
    ({"holds": [f"{PKG}==1.0"]}, "holds", "is the package swept"),
    ({"holds": ["numpy>=1.26"]}, "holds", "only exact pins"),
    ({"matrix": {**MATRIX, "device": "tpu"}}, "matrix.device", "is not one of"),
])
def test_a_sweep_that_cannot_run_is_refused_naming_the_field(
    api: TestClient, ci_token: str, overrides: dict[str, Any], field: str, words: str,
) -> None:
    refused = api.post("/api/v1/sweeps", json=sweep_body(**overrides), headers=bearer(ci_token))
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["errors"]
    assert error["field"] == field and words in error["message"], error
    assert api.get("/api/v1/sweeps", headers=bearer(ci_token)).json()["items"] == []


def test_an_unreadable_package_index_is_a_503_not_a_sweep_of_nothing(
    local: Settings,
) -> None:
    class Unreachable:
        def versions(self, package: str, *, pre: bool, settings: Settings) -> list[str]:
            raise ports.PackageIndexError("pip index versions swsweep failed: network down")

    cells, deliveries = ports.cell_queue(), ports.delivery_queue()
    ports.wire(cells=cells, deliveries=deliveries, index=Unreachable())
    try:
        with pytest.raises(ServiceUnavailable, match="network down"), \
                session_scope(local) as session:
            create_sweep(session, SweepCreate.model_validate(sweep_body()), settings=local)
    finally:
        ports.wire(cells=cells, deliveries=deliveries, index=None)
        allowing(local)


def test_a_finished_sweep_shows_its_speedups_and_the_change_between_releases(
    api: TestClient, ci_token: str, local: Settings,
) -> None:
    sweep = api.post("/api/v1/sweeps", json=sweep_body(), headers=bearer(ci_token)).json()
    done = drive(local, sweep["id"], lambda pins: 1.0 if pins[PKG] == "1.2" else 2.0)
    assert (done.status, done.outcome) == ("done", f"3 versions of {PKG} measured")

    read = api.get(f"/api/v1/sweeps/{sweep['id']}", headers=bearer(ci_token)).json()
    speedups = {r["version"]: [round(c["speedup"], 1) for c in r["cells"]] for r in read["runs"]}
    assert speedups == {"1.0": [2.0, 2.0], "1.1": [2.0, 2.0], "1.2": [1.0, 1.0]}
    assert {(c["weights"], c["before"], c["after"], c["direction"]) for c in read["changes"]} \
        == {("constant", "1.1", "1.2", "regression"), ("tensor", "1.1", "1.2", "regression")}
    assert all(round(c["change"], 2) == -0.5 for c in read["changes"])
    assert {r["verdict"] for r in read["runs"]} == {"pass"}  # a sweep's run judges nothing

    # measurements of old releases on purpose: no point of their series, no regression
    series = api.get("/api/v1/series", params={"project": PROJECT},
                     headers=bearer(ci_token)).json()["items"]
    assert series and all(s["latest"] is None for s in series)
    assert api.get("/api/v1/regressions", params={"project": PROJECT},
                   headers=bearer(ci_token)).json()["items"] == []
    page = api.get(f"/sweeps/{sweep['id']}", cookies={"speedwatch_token": ci_token})
    assert page.status_code == 200 and 'id="sweep-chart"' in page.text
    assert "-50.0%" in page.text


def test_cancelling_fails_what_has_not_started_and_a_second_cancel_is_409(
    api: TestClient, ci_token: str, local: Settings,
) -> None:
    sweep = api.post("/api/v1/sweeps", json=sweep_body(), headers=bearer(ci_token)).json()
    with session_scope(local) as session:  # a worker is measuring the first release
        first = session.scalars(select(Cell).join(Run, Run.id == Cell.run_id)
                                .where(Run.sweep_id == sweep["id"]).order_by(Cell.id)).first()
        assert first is not None
        first.status = "running"
    cancelled = api.post(f"/api/v1/sweeps/{sweep['id']}/cancel", headers=bearer(ci_token))
    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert body["status"] == "cancelled" and body["outcome"] == "cancelled by test-ci"
    cells = [c for r in body["runs"] for c in r["cells"]]
    assert [c["status"] for c in cells] == ["running"] + ["failed"] * 5
    assert all("cancelled before this cell started" in c["error"] for c in cells[1:])
    again = api.post(f"/api/v1/sweeps/{sweep['id']}/cancel", headers=bearer(ci_token))
    assert again.status_code == 409 and "is cancelled" in again.json()["detail"]
    assert api.post("/api/v1/sweeps/999999/cancel", headers=bearer(ci_token)).status_code == 404
    with session_scope(local) as session:
        row = session.get(Sweep, sweep["id"])
        assert row is not None and row.status == "cancelled"


# ---- the CLI against a real server ---------------------------------------------------------

@pytest.fixture
def server_url(local: Settings) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(local), host="127.0.0.1", port=port,
                                           log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def _cli(url: str, token: str, *args: str) -> Any:
    return CliRunner().invoke(cli, [*args, "--url", url, "--token", token])


def test_the_cli_sweeps_follows_progress_and_prints_the_table(
    server_url: str, ci_token: str, local: Settings,
) -> None:
    def measure() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with session_scope(local) as session:
                sweep_id = session.scalar(select(Sweep.id))
            if sweep_id is not None:
                drive(local, sweep_id, lambda pins: 1.0 if pins[PKG] == "1.2" else 2.0)
                return
            time.sleep(0.1)

    worker = threading.Thread(target=measure)
    worker.start()
    result = _cli(server_url, ci_token, "sweep", "--project", PROJECT, "--package", PKG,
                  "--from", "1.0", "--to", "1.2", "--hold", "numpy==1.26.4",
                  "--model", "resnet18", "--width", "8", "--image-size", "32",
                  "--weights", "constant,tensor", "--wait", "--poll", "0.2")
    worker.join()
    assert result.exit_code == 0, result.output
    assert f"sweep 1: 3 releases of {PKG} (1.0 ... 1.2), one run each" in result.output
    assert "2.000x" in result.output and "1.000x" in result.output
    assert "regression: weights constant 1.1 -> 1.2: -50.0%" in result.output
    assert "Traceback" not in result.output

    again = _cli(server_url, ci_token, "cancel", "1")
    assert again.exit_code == 2
    assert again.output.strip().splitlines() == [
        "error: HTTP 409 from POST /api/v1/sweeps/1/cancel: sweep 1 is done; only a running "
        "one can be cancelled"]


def test_the_cli_refuses_bad_input_in_one_line(server_url: str, ci_token: str) -> None:
    result = _cli(server_url, ci_token, "sweep", "--project", PROJECT, "--package",
                  "left-pad", "--from", "1.0", "--to", "1.2")
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: --package: 'left-pad' is not on the allowlist")
    both = _cli(server_url, ci_token, "bisect", "--project", PROJECT)
    assert both.exit_code == 2
    assert both.output.strip() == "error: give --regression ID, or --good and --bad pins"


def test_the_cli_starts_a_bisect_and_cancels_it(server_url: str, ci_token: str) -> None:
    started = _cli(server_url, ci_token, "bisect", "--project", PROJECT, "--good",
                   f"{PKG}==1.0", "--bad", f"{PKG}==2.0", "--model", "resnet18", "--width",
                   "8", "--image-size", "32")
    assert started.exit_code == 0, started.output
    assert f"bisect 1: {PKG} 1.0 (good) .. 2.0 (bad), at most 16 runs; step 1: " \
        f"{PKG}==1.0" in started.output
    cancelled = _cli(server_url, ci_token, "cancel", "1")
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.output.startswith("bisect 1 cancelled: 0 runs done, 1 failed")


def test_an_environments_build_is_shown_as_the_worker_reported_it(
    api: TestClient, ci_token: str, local: Settings,
) -> None:
    """Build time, size and what pip put into the venv travel with each result
    (fingerprint.environment.build) onto the environment."""
    from app.services.runs import claim_cell, record_result
    from benchmarks.spec import BenchSpec
    from tests.app.detection_docs import measured

    sweep = api.post("/api/v1/sweeps", json=sweep_body(to_version="1.0"),
                     headers=bearer(ci_token)).json()
    build = {"host": "worker-1", "seconds": 4.2, "size_bytes": 21_000_000,
             "built_at": "2026-11-24T20:00:00+00:00",
             "venv_packages": {PKG: "1.0", "numpy": "1.26.4"}}
    with session_scope(local) as session:
        cell = session.scalars(select(Cell).join(Run, Run.id == Cell.run_id)
                               .where(Run.sweep_id == sweep["id"])).first()
        assert cell is not None and claim_cell(session, cell.id) is not None
        document = measured(2.0, spec=BenchSpec.from_dict(cell.spec))
        document.fingerprint["environment"] = {"requested": [], "build": build}
        assert record_result(session, cell.id, document) is not None

    (env,) = api.get("/api/v1/environments", headers=bearer(ci_token)).json()["items"]
    assert env["pins"] == ["numpy==1.26.4", f"{PKG}==1.0"]
    assert env["build"] == build and env["runs"] == 1 and env["projects"] == [PROJECT]
    page = api.get("/environments", cookies={"speedwatch_token": ci_token})
    assert page.status_code == 200
    assert "4.2 s" in page.text and "21.0 MB" in page.text and "numpy 1.26.4" in page.text


def test_the_cli_follows_a_bisect_to_its_answer(
    server_url: str, ci_token: str, local: Settings,
) -> None:
    def measure() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with session_scope(local) as session:
                sweep_id = session.scalar(select(Sweep.id))
            if sweep_id is not None:
                drive(local, sweep_id, lambda pins: 1.0 if pins[PKG] >= "1.2" else 2.0)
                return
            time.sleep(0.1)

    worker = threading.Thread(target=measure)
    worker.start()
    result = _cli(server_url, ci_token, "bisect", "--project", PROJECT, "--good",
                  f"{PKG}==0.9", "--bad", f"{PKG}==2.0", "--model", "resnet18", "--width",
                  "8", "--image-size", "32", "--wait", "--poll", "0.2")
    worker.join()
    assert result.exit_code == 0, result.output
    assert f"first slower in {PKG} 1.2 (1.1 fine): -50.0%" in result.output
    assert "bisect 1: swsweep 0.9 (good) .. 2.0 (bad)" in result.output  # the table's title
    assert "Traceback" not in result.output
