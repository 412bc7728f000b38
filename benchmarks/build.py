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
import re
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


# Tuning caches (TensorRT's timing cache, inductor's autotuning under max-autotune) live
# here unless the environment says where:
# one directory per host that every worker's builds share, so the first build's timed
# choices become every later build's.
TUNING_CACHE_ENV = "SPEEDWATCH_TUNING_CACHE_DIR"


def tuning_cache_dir() -> Path:
    """The host's tuning-cache directory: $SPEEDWATCH_TUNING_CACHE_DIR, else
    ~/.cache/speedwatch/tuning. Outside any process's temporary directory on purpose: a
    pinned choice must outlive the process that timed it."""
    configured = os.environ.get(TUNING_CACHE_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "speedwatch" / "tuning"


def cuda_device_key() -> str:
    """'nvidia-h100-sm90': the GPU model and compute capability of torch's current device.

    A tactic timed on one GPU model says nothing about another, so tuning caches are kept
    apart by model (benchmarks.fingerprint's device class: memory and form-factor variants
    share one) and by compute capability, which decides the kernels there are to choose.
    """
    import torch

    from benchmarks.fingerprint import device_class_from_gpu_name

    major, minor = torch.cuda.get_device_capability()
    return f"{device_class_from_gpu_name(torch.cuda.get_device_name())}-sm{major}{minor}"


def tuning_cache_file(tool: str, version: str, suffix: str) -> Path:
    """<tuning dir>/<tool>/<version>-<device>.<suffix>: one file per compiler version and GPU.

    Keyed by exactly what decides the entries, so a cache is never offered to a compiler
    that would refuse it (another version) or to a GPU its timings do not describe.
    """
    safe_version = re.sub(r"[^A-Za-z0-9._+-]+", "_", version)
    return tuning_cache_dir() / tool / f"{safe_version}-{cuda_device_key()}.{suffix}"
