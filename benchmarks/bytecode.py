"""Compiled bytecode for the measuring processes of an interpreter that keeps none.

An interpreter run with PYTHONDONTWRITEBYTECODE (or `-B`), as container images often are,
compiles every module it imports from source every time. A GPU process imports most of
torch's compiler lazily, while it compiles: on a lent H200 whose interpreter kept no
bytecode, a loaded constant-weight build imported 1,643 modules and spent 1.9-2.7 s turning
their sources into code, and the fork server's own imports took about 20 s
(experiments/frozen_load_probe.py). A measuring process of such an interpreter keeps its
bytecode in a directory of Speedwatch's own instead (`sys.pycache_prefix`), so nothing is
written beside the installed sources, which is what the setting asks. Only the start-up
changes: what is imported, compiled and timed is the same.

`SPEEDWATCH_PYCACHE_DIR`: the directory (default `~/.cache/speedwatch/pycache`), or `off`
to leave the interpreter as it is. An interpreter that keeps bytecode already, or has a
prefix of its own, is left alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

PYCACHE_ENV = "SPEEDWATCH_PYCACHE_DIR"
DEFAULT_DIR = "~/.cache/speedwatch/pycache"


def configured_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The directory `PYCACHE_ENV` names, made if need be: None when unset or `off`; a
    ValueError naming the variable when it cannot be made or written. A worker checks it
    at start-up (benchmarks.process_settings): a measuring process could only fall back to
    compiling every module from source, and say so in a log nobody reads."""
    value = (environ if environ is not None else os.environ).get(PYCACHE_ENV, "").strip()
    if not value or value.lower() == "off":
        return None
    path = Path(value).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{PYCACHE_ENV}={value!r}: the directory cannot be made "
                         f"({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{PYCACHE_ENV}={value!r}: the directory is not writable")
    return path


def keep_bytecode(environ: Mapping[str, str] | None = None) -> str | None:
    """Have this interpreter keep bytecode in Speedwatch's directory when it keeps none;
    the directory, or None when the interpreter is left as it was."""
    if not sys.dont_write_bytecode or sys.pycache_prefix:
        return None
    configured = (environ if environ is not None else os.environ).get(PYCACHE_ENV, "").strip()
    if configured.lower() == "off":
        return None
    path = Path(configured or DEFAULT_DIR).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # an unwritable home: import from source, as before
    sys.pycache_prefix = str(path)
    sys.dont_write_bytecode = False
    return str(path)
