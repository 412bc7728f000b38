"""Real wheels of a tiny package, written by the tests themselves into a directory that pip
reads through its own configuration (PIP_FIND_LINKS, PIP_NO_INDEX): releases to sweep and
bisect without a network.

Each release is a pure-Python wheel whose module holds `SLOW_CANDIDATE`: the benchmark
child's test-only hook (SPEEDWATCH_FAULT_SLOW_MODULE, honoured only with
SPEEDWATCH_ALLOW_FAULTS=1) makes every timed candidate call that much longer, so the
installed release decides the measured speedup, as an upgraded backend would.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(directory: Path, name: str, version: str, slow_candidate: float = 0.0,
                requires: Iterable[str] = ()) -> Path:
    """One release of `name` (a py3-none-any wheel, installable by pip) in `directory`;
    `requires` are its Requires-Dist lines (`swdep==2.0`)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": (f'"""Test package: release {version}."""\n'
                                f'__version__ = "{version}"\n'
                                f"SLOW_CANDIDATE = {slow_candidate!r}\n").encode(),
        f"{dist_info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\n"
                                  f"Version: {version}\nSummary: speedwatch test package\n"
                                  + "".join(f"Requires-Dist: {r}\n" for r in requires)
                                  ).encode(),
        f"{dist_info}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: speedwatch-tests\n"
                               b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    }
    record = "\n".join([*(_record_line(p, d) for p, d in files.items()),
                        f"{dist_info}/RECORD,,"]) + "\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist_info}/RECORD", record)
    return path


def install_beside(directory: Path, name: str, version: str,
                   slow_candidate: float = 0.0) -> Path:
    """A release of `name` really installed by pip into `directory`/site (its wheel written
    into `directory`/wheels): a directory to put on a child's path. `directory` is new."""
    wheels, site = directory / "wheels", directory / "site"
    wheels.mkdir(parents=True)
    write_wheel(wheels, name, version, slow_candidate=slow_candidate)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                    "--no-deps", "--find-links", str(wheels), "--target", str(site),
                    f"{name}=={version}"], check=True)
    return site


def write_releases(directory: Path, name: str, versions: Iterable[str],
                   slow: dict[str, float]) -> list[str]:
    """A wheel per version; `slow[v]` is release v's candidate slowdown (default 0)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for version in versions:
        write_wheel(directory, name, version, slow.get(version, 0.0))
        out.append(version)
    return out


def use_only(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """Make pip (here and in every venv a worker builds) read `directory` and no index."""
    monkeypatch.setenv("PIP_FIND_LINKS", str(directory))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
