"""What a build chose, and the short fingerprint that says whether two builds run the same code.

A compiler that picks kernels, tiles or tactics by timing them turns timing noise into
different programs: on an H100, six fresh inductor compiles of one ResNet50 picked six
different sets of Triton configs and ran 3.1% apart. A speedup is only repeatable if its
build is, so every backend describes the choices its build made (`Compiled.build_choices`:
inductor's kernels and their launch configs, TensorRT's layers and tactics, ONNX Runtime's
optimized graph) and every result carries a short hash of that description
(`evidence.build_fingerprint`). Two results with the same fingerprint ran the same code;
a changed fingerprint is a finding of its own ("build choices changed").

Which choices are pinned by default (`timing.builds = "pinned"`) and which are left to the
compiler as shipped (`"as-shipped"`) is each backend's business; this module only names the
vocabulary and hashes.
"""

from __future__ import annotations

import hashlib
import json
import os
import typing
from pathlib import Path
from typing import Any, Literal

# How builds make their timing-based choices (TimingPolicy.builds):
# - "pinned" (default): deterministically (inductor's pointwise autotuning off, cuDNN
#   heuristics, ONNX Runtime's cuDNN algorithm search by heuristics), or once per host and
#   reused through a tuning cache keyed by what decides them (TensorRT's timing cache).
# - "as-shipped": as the compiler ships, choices timed afresh by each build; the interval
#   then covers the spread between builds, and the result reports it.
Builds = Literal["pinned", "as-shipped"]
BUILDS: tuple[Builds, ...] = typing.get_args(Builds)
FINGERPRINT_HEX = 12


def fingerprint(choices: Any) -> str | None:
    """A short, stable hash of a JSON-able description of a build's choices (None: none)."""
    if choices is None:
        return None
    text = json.dumps(choices, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:FINGERPRINT_HEX]


TUNING_CACHE_ENV = "SPEEDWATCH_TUNING_CACHE_DIR"


def tuning_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Where a host keeps the choices its builds timed once, for every later build to reuse
    (TensorRT's timing cache, inductor's autotuning under max-autotune): the directory
    `SPEEDWATCH_TUNING_CACHE_DIR` names, else ~/.cache/speedwatch/tuning. Each cache
    beneath it is keyed by what decides its entries (compiler version, GPU)."""
    env = os.environ if environ is None else environ
    named = env.get(TUNING_CACHE_ENV)
    return Path(named) if named else Path.home() / ".cache" / "speedwatch" / "tuning"
