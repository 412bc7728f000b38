"""No refused pin ever reaches an installer, whichever way it comes in: the API, the worker's
task body (pins that reached the database by another route), or `materialize` directly.

The spy records every command the environment builder runs (`workers.environments._run`)
and refuses to install. It observes the product's real code path: the controls show an
accepted pin does arrive at it, so "nothing recorded" for the refused ones means something.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.config import Settings
from app.environment_policy import PinError
from app.main import create_app
from app.models import Cell, Run
from devkit.factories import bearer, run_request
from tests.workers.helpers import new_run, reload_run
from tests.workers.test_environments import MALICIOUS
from workers.environments import EnvironmentBuildError, materialize
from workers.execution import execute_cell
from workers.local import get_local_executor

ALLOW = ["onnxruntime", "numpy"]

SPY = """#!{python}
import json, subprocess, sys
with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv) + "\\n")
args = sys.argv[1:]
if args[:1] == ["venv"]:  # let `uv venv` make a bare venv so the install step is reached
    python, target = args[args.index("--python") + 1], args[-1]
    sys.exit(subprocess.call([python, "-m", "venv", "--without-pip", target]))
sys.stderr.write("installer spy: not installing\\n")
sys.exit(3)
"""


@pytest.fixture
def installer_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list]:
    """Spy on `workers.environments._run`, the one door every installer command of the
    environment builder goes through (the worker's own pip, run as `python -m pip`, so a
    spy on PATH would see nothing): record each command; let `venv` creation run, refuse
    every install. Returns a function listing the recorded argument lists."""
    import workers.environments as environments

    log: list[list[str]] = []
    real_run = environments._run

    def spy(argv: list[str], **kwargs: object) -> None:
        log.append([str(a) for a in argv])
        if "install" in argv:
            raise EnvironmentBuildError("installer spy: not installing")
        real_run(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(environments, "_run", spy)
    monkeypatch.setenv("SPEEDWATCH_VENV_CACHE_DIR", str(tmp_path / "venvs"))
    return lambda: list(log)


def _installs(calls: list[list[str]]) -> list[list[str]]:
    return [c for c in calls if "install" in c]


def test_control_an_accepted_pin_reaches_the_spy(
    installer_calls: Callable[[], list], tmp_path: Path
) -> None:
    with pytest.raises(EnvironmentBuildError, match="installer spy: not installing"):
        materialize(["onnxruntime==1.22.0"], allowlist=ALLOW, cache_dir=tmp_path / "venvs")
    [install] = _installs(installer_calls())
    assert install[-2:] == ["--", "onnxruntime==1.22.0"]
    assert "--only-binary=:all:" in install


@pytest.mark.parametrize("pin", MALICIOUS)
def test_materialize_never_calls_an_installer_for_a_refused_pin(
    installer_calls: Callable[[], list], tmp_path: Path, pin: str
) -> None:
    with pytest.raises(PinError):
        materialize(["numpy==2.0.0", pin], allowlist=ALLOW, cache_dir=tmp_path / "venvs")
    assert installer_calls() == []


def test_the_api_refuses_every_bad_pin_and_nothing_runs(
    installer_calls: Callable[[], list], settings: Settings, ci_token: str, session: Session
) -> None:
    """With the in-process executor, an accepted trigger would build its environment at
    once; a refused one is a 422 and stores nothing for any executor to pick up."""
    local = create_app(settings.model_copy(update={"executor": "local",
                                                   "env_allowlist": ALLOW}))
    runs_before = session.query(Run).count()
    with TestClient(local) as client:
        for pin in MALICIOUS:
            response = client.post("/api/v1/runs", headers=bearer(ci_token),
                                   json=run_request(environment={"pins": [pin]},
                                                    revision="bad-pin"))
            assert response.status_code == 422, (pin, response.text)
            assert response.json()["detail"]
        assert get_local_executor().wait_idle(60)
        assert installer_calls() == []
        assert session.query(Run).count() == runs_before

        # The control: an accepted pin is built by the executor, so it reaches the spy.
        accepted = client.post("/api/v1/runs", headers=bearer(ci_token),
                               json=run_request(revision="good-pin"))
        assert accepted.status_code == 201, accepted.text
        assert get_local_executor().wait_idle(120)
    assert any("onnxruntime==1.22.0" in call for call in _installs(installer_calls()))


def test_the_worker_refuses_a_bad_pin_that_reached_the_database(
    installer_calls: Callable[[], list], settings: Settings, session: Session
) -> None:
    """A pin the API would refuse, written straight into the store (an older release, a
    hand edit): the task body validates again and fails the cell before any process."""
    run_id, [cell_id] = new_run(session, settings, pins=["onnxruntime==1.22.0"],
                                revision="tampered")
    environment = reload_run(session, run_id).environment
    environment.pins = ["onnxruntime==1.22.0 --index-url=https://evil.example/simple"]
    session.commit()

    assert execute_cell(cell_id, settings) == "failed"
    session.expire_all()
    cell = session.get(Cell, cell_id)
    assert cell is not None and cell.status == "failed"
    assert "URLs and paths are not allowed" in (cell.error or "")
    assert installer_calls() == []
