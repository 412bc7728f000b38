"""A measuring process of an interpreter that keeps no bytecode keeps it in Speedwatch's own
directory: its imports stop compiling sources every time, and nothing is written beside the
sources. Real interpreters (`python -B`) importing a real module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bytecode import PYCACHE_ENV

PROGRAM = """
import sys
from benchmarks.bytecode import keep_bytecode
print(keep_bytecode())
sys.path.insert(0, sys.argv[1])
import measured_module
print(measured_module.VALUE)
"""


def _run(tmp_path: Path, flags: list[str], setting: str | None) -> list[str]:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "measured_module.py").write_text("VALUE = 42\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    if setting is not None:
        env[PYCACHE_ENV] = setting
    done = subprocess.run([sys.executable, *flags, "-c", PROGRAM, str(source)], env=env,
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.split()


def _pyc_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("measured_module*.pyc"))


def test_an_interpreter_without_bytecode_keeps_it_in_speedwatch_s_directory(
        tmp_path: Path) -> None:
    prefix = tmp_path / "pycache"
    kept, value = _run(tmp_path, ["-B"], str(prefix))

    assert kept == str(prefix)
    assert value == "42"
    assert _pyc_files(prefix), "the imported module's bytecode was not kept"
    assert not _pyc_files(tmp_path / "src"), "bytecode was written beside the source"


def test_the_default_directory_is_in_the_user_s_cache(tmp_path: Path) -> None:
    kept, _ = _run(tmp_path, ["-B"], None)

    assert kept == str(tmp_path / "home" / ".cache" / "speedwatch" / "pycache")
    assert _pyc_files(Path(kept))


@pytest.mark.parametrize(("flags", "setting"), [
    (["-B"], "off"),  # asked to leave it alone
    ([], None),  # an interpreter that keeps bytecode already
])
def test_an_interpreter_is_left_as_it_is(tmp_path: Path, flags: list[str],
                                         setting: str | None) -> None:
    kept, value = _run(tmp_path, flags, setting)

    assert kept == "None"
    assert value == "42"
    assert not _pyc_files(tmp_path / "home")
