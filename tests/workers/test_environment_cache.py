"""The environment builder resolves companions and keeps its cache within a disk budget.

Companions: pip resolves a pin against the worker's own packages (the overlay is in place
before it runs), so it installs into the venv only what the pin needs beyond them: a
requirement the worker meets adds nothing, one it does not gets its own version in the
venv, which wins there, and the worker's copy is never touched. Real pip installs from a
wheel directory the tests write (no network).

Budget: least recently used environments go first, never one a cell measures in, one
used in the last minutes, or the one just built.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.workers.wheels import use_only, write_wheel
from workers import environments
from workers.environments import (
    BUILD_JSON,
    LAST_USED,
    cached_environments,
    evict,
    in_use,
    materialize,
    venv_python,
)

ALLOW = ["swcomp", "swdep", "iniconfig"]


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "wheels"
    directory.mkdir()
    write_wheel(directory, "swcomp", "1.0", requires=["packaging"])
    write_wheel(directory, "swcomp", "2.0", requires=["swdep==2.0"])
    write_wheel(directory, "swdep", "2.0")
    # a release that needs an older iniconfig than the worker's own (pytest's)
    write_wheel(directory, "swcomp", "3.0", requires=["iniconfig==0.0.1"])
    write_wheel(directory, "iniconfig", "0.0.1")
    use_only(monkeypatch, directory)
    return directory


def _build(pins: list[str], cache: Path) -> tuple[str, dict[str, object]]:
    python = materialize(pins, allowlist=ALLOW, cache_dir=cache, max_bytes=0)
    record = json.loads((Path(python).parent.parent / BUILD_JSON).read_text())
    return python, record


@pytest.mark.slow
def test_pip_installs_into_the_venv_only_what_the_pin_needs_beyond_the_worker(
    wheels: Path, tmp_path: Path,
) -> None:
    cache = tmp_path / "venvs"
    worker_iniconfig = importlib.metadata.version("iniconfig")

    _, met = _build(["swcomp==1.0"], cache)  # needs packaging: the worker has it
    assert met["venv_packages"] == {"swcomp": "1.0"}
    _, missing = _build(["swcomp==2.0"], cache)  # needs swdep: the worker has none
    assert missing["venv_packages"] == {"swcomp": "2.0", "swdep": "2.0"}
    python, other = _build(["swcomp==3.0"], cache)  # needs another iniconfig than the worker's
    assert other["venv_packages"] == {"iniconfig": "0.0.1", "swcomp": "3.0"}
    probe = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('iniconfig'))"],
        capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "0.0.1"  # the venv's own wins there...
    assert importlib.metadata.version("iniconfig") == worker_iniconfig  # ...and only there
    for record in (met, missing, other):
        assert float(record["seconds"]) > 0 and int(record["size_bytes"]) > 0  # type: ignore[arg-type]
        assert record["host"] and record["built_at"]
    assert environments.build_record(python) == other


def _fake_venv(root: Path, key: str, size: int, used_ago_s: float, now: float) -> Path:
    """A cache entry as `materialize` leaves one, with a recorded size and last use."""
    venv = root / key
    (venv / "bin").mkdir(parents=True)
    venv_python(venv).write_text("")
    (venv / BUILD_JSON).write_text(json.dumps({"pins": [f"{key}==1.0"], "size_bytes": size}))
    (venv / LAST_USED).touch()
    os.utime(venv / LAST_USED, (now - used_ago_s, now - used_ago_s))
    return venv


def test_the_least_recently_used_environments_go_first_until_the_cache_fits(
    tmp_path: Path,
) -> None:
    now = time.time()
    for key, used_ago in (("oldest", 9000), ("old", 8000), ("recent", 7000), ("new", 10)):
        _fake_venv(tmp_path, key, 100, used_ago, now)
    assert [e.key for e in cached_environments(tmp_path)] == ["oldest", "old", "recent", "new"]

    evicted = evict(tmp_path, max_bytes=250, now=now)

    assert [e.key for e in evicted] == ["oldest", "old"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".use")) == [
        "new", "recent"]


def test_an_environment_in_use_just_used_or_just_built_is_never_evicted(tmp_path: Path) -> None:
    now = time.time()
    busy = _fake_venv(tmp_path, "busy", 100, 9000, now)
    _fake_venv(tmp_path, "built", 100, 8000, now)
    _fake_venv(tmp_path, "fresh", 100, 60, now)  # between its resolution and its first child
    _fake_venv(tmp_path, "idle", 100, 7000, now)

    with in_use([str(venv_python(busy))]):
        evicted = evict(tmp_path, max_bytes=0, keep={"built"}, now=time.time())

    assert [e.key for e in evicted] == ["idle"]
    assert {e.key for e in cached_environments(tmp_path)} == {"busy", "built", "fresh"}


@pytest.mark.slow
def test_materialize_evicts_down_to_the_budget_after_a_build(
    wheels: Path, tmp_path: Path,
) -> None:
    cache = tmp_path / "venvs"
    first = materialize(["swcomp==1.0"], allowlist=ALLOW, cache_dir=cache, max_bytes=0)
    # make it look unused for an hour, then build another with no room for both
    stamp = Path(first).parent.parent / LAST_USED
    os.utime(stamp, (time.time() - 3600, time.time() - 3600))
    second = materialize(["swcomp==2.0"], allowlist=ALLOW, cache_dir=cache, max_bytes=1)
    assert not Path(first).exists() and Path(second).exists()
