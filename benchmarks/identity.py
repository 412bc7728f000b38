"""What software a measurement ran: an identity two results can be compared by.

On a 2-core virtual machine two runs of unchanged code land 2-4% (SD) apart, and no clock
removes that: fresh processes settle at their own levels. Whether the software changed needs
no timing at all, though. Two results whose identities are equal ran the same code, so
whatever separates their speedups is the host's, and a verdict can say so instead of
calling it a regression or leaving it undecided (app.detection.verdict).

The identity hashes everything that decides what code runs:

- `environment`: the interpreter (implementation, version, build) and every installed
  distribution on `sys.path` with its version and a hash of its RECORD, the list of its
  files with their own hashes (a reinstall of a rebuilt wheel with the same version number
  is a different distribution); Speedwatch's own distribution is left out there and
  counted as `harness`;
- `harness`: a hash of the measuring code itself (the `benchmarks` package's sources);
- `model`: the model's digest (a model of the user's) or the spec fields that build a
  built-in one;
- `build`: the build fingerprint, what the compiler chose (benchmarks.build).

`environment_identity` needs no measurement (a worker asks it of an environment before it
decides how to measure: `python -m benchmarks.identity` prints it); `software_identity`
adds the model and the build once a child has built them.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
import sys
from functools import lru_cache
from importlib import machinery, metadata
from pathlib import Path
from typing import Any

DIGEST_CHARS = 12
# Speedwatch's own distribution: its measuring code is the harness component; the rest
# (service, CLI) runs in no benchmark child.
OWN_DISTRIBUTION = "speedwatch"
_PACKAGE_DIR = Path(__file__).resolve().parent


def digest(value: Any) -> str:
    """A short stable hash of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def distributions() -> dict[str, str]:
    """Installed distributions on this interpreter's path: normalized name -> "version
    record-hash" (the first distribution of a name on the path wins, as imports do)."""
    return dict(_installed()[0])


@lru_cache(maxsize=1)
def _installed() -> tuple[dict[str, str], dict[str, set[str]]]:
    """One pass over the installed distributions: `distributions()`'s entries, and the
    top-level import names each one provides (normalized name -> names), read from the
    RECORD already in hand. `importlib.metadata.packages_distributions()` reads every
    RECORD again and checks that each listed file exists: 1.9 s of a loaded GPU process's
    2 s after its timing, on an H200 with 101 distributions. Read once per process: a
    measuring process's distributions do not change while it runs."""
    out: dict[str, str] = {}
    provides: dict[str, set[str]] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if not name:
            continue
        key = _normalize(name)
        if key in out or key == OWN_DISTRIBUTION:
            continue
        record = dist.read_text("RECORD") or dist.read_text("installed-files.txt") or ""
        out[key] = f"{dist.version} {hashlib.sha256(record.encode()).hexdigest()[:8]}"
        provides[key] = _top_level_names(dist.read_text("top_level.txt"), record)
    return dict(sorted(out.items())), provides


def _top_level_names(declared: str | None, record: str) -> set[str]:
    """The import names a distribution provides: its top_level.txt where it has one, else
    the first part of each code file it installed (a module file's own name), as
    `importlib.metadata.packages_distributions` infers them. Stubs (`.pyi`) and data are
    not code a process runs: a stubs package names no module."""
    if declared and declared.strip():
        return set(declared.split())
    names = set()
    for line in record.splitlines():
        path = line.split(",", 1)[0].strip().strip('"')
        if not path.endswith(_CODE_SUFFIXES):
            continue
        first, _, rest = path.partition("/")
        name = first if rest else (inspect.getmodulename(first) or first)
        if name and "." not in name:
            names.add(name)
    return names


_CODE_SUFFIXES = (".py", *machinery.EXTENSION_SUFFIXES)


@lru_cache(maxsize=1)
def harness_digest() -> str:
    """A hash of the `benchmarks` package's Python sources (paths and bytes)."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(_PACKAGE_DIR)
        if "results" in rel.parts or "__pycache__" in rel.parts:
            continue
        h.update(str(rel).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:DIGEST_CHARS]


def interpreter() -> str:
    build = " ".join(platform.python_build())
    return f"{platform.python_implementation()} {platform.python_version()} ({build})"


# Environment variables that change what a library runs (thread pools, kernels, preloaded
# code) or, where faults are allowed, the harness's own test knobs. Paths of caches are
# left out: a process gets fresh ones (benchmarks.isolation), and they choose no code.
_VARIABLE_PREFIXES = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "LD_PRELOAD", "SPEEDWATCH_FAULT_",
                      "SPEEDWATCH_ALLOW_FAULTS")


def variables() -> dict[str, str]:
    return {name: value for name, value in sorted(os.environ.items())
            if name.startswith(_VARIABLE_PREFIXES)}


def environment_identity() -> dict[str, Any]:
    """This interpreter's environment: what `software_identity` holds before the model and
    the build are known. `environment` is its digest."""
    dists = distributions()
    parts = {"interpreter": interpreter(), "distributions": dists, "harness": harness_digest(),
             "variables": variables()}
    return {"environment": digest(parts), "interpreter": parts["interpreter"],
            "harness": parts["harness"], "variables": parts["variables"],
            "distributions": dists}


# The harness's test knobs that act on the candidate's calls alone (benchmarks.child): the
# baseline side's own identity leaves them out. SPEEDWATCH_ALLOW_FAULTS only lets them, or a
# spec's `_fault` option, act; the spec is the same for every side of a comparison.
CANDIDATE_ONLY_VARIABLES = ("SPEEDWATCH_FAULT_SLOW_CANDIDATE", "SPEEDWATCH_FAULT_SLOW_MODULE",
                            "SPEEDWATCH_ALLOW_FAULTS")


def loaded_distributions(dists: dict[str, str] | None = None) -> dict[str, str]:
    """The installed distributions this process has imported code from (its side's
    software: eager's process imports torch and numpy, not onnxruntime), by
    `distributions()`'s entries."""
    installed, provides = _installed()
    dists = installed if dists is None else dists
    top = {name.split(".")[0] for name in list(sys.modules)}
    loaded = {key for key, names in provides.items() if names & top}
    return {name: value for name, value in dists.items() if name in loaded}


def side_identity(environment: dict[str, Any], side: str, *, loaded: dict[str, str],
                  model: str, build: str | None) -> str:
    """The digest of one side's software as its process ran it: the interpreter, the
    harness, the distributions it imported, the variables that act on it, the model, and
    (the candidate) the build. Two environments that differ only in what one side never
    loads (a package the candidate imports, a candidate-only knob) run the other side's very
    code, so a comparison of the two may leave that side's noise out
    (benchmarks.adaptive.AdaptiveMeasurement). `loaded`: `loaded_distributions()` as the
    timing ended, before passes that import more (a profile) and that only some processes
    of a cell run."""
    variables = {k: v for k, v in (environment.get("variables") or {}).items()
                 if side != "baseline" or k not in CANDIDATE_ONLY_VARIABLES}
    return digest([environment.get("interpreter"), environment.get("harness"), variables,
                   loaded, model, build if side != "baseline" else None, side])


def software_identity(environment: dict[str, Any], *, model: str,
                      build: str | None) -> dict[str, Any]:
    """The whole identity of one measured side: the environment's, the model, the build.
    `digest` is what two results are compared by."""
    return {**environment, "model": model, "build": build,
            "digest": digest([environment["environment"], model, build])}


def with_build(software: dict[str, Any], build: str | None) -> dict[str, Any]:
    """The identity with another build fingerprint (a merged result's, over its processes)."""
    env = {k: v for k, v in software.items() if k not in ("build", "digest")}
    return software_identity(env, model=str(software.get("model")), build=build)


def of(fingerprint: Any) -> dict[str, Any] | None:
    """A result fingerprint's identity, if it has one (results from before have none)."""
    software = fingerprint.get("software") if isinstance(fingerprint, dict) else None
    return software if isinstance(software, dict) and software.get("digest") else None


def model_identity(spec_fields: dict[str, Any], own_digest: str | None) -> str:
    """A model's part of the identity: a model of the user's by its digest, a built-in one
    by the spec fields that build it."""
    if own_digest:
        return own_digest
    return digest(spec_fields)


def differences(old: dict[str, Any], new: dict[str, Any], limit: int = 4) -> list[str]:
    """What differs between two identities, in words ("onnxruntime 1.22.0 -> 1.23.0",
    "+ six 1.16.0", "the harness", "the build"), at most `limit` items and a count."""
    out: list[str] = []
    a, b = old.get("distributions") or {}, new.get("distributions") or {}
    if isinstance(a, dict) and isinstance(b, dict):
        for name in sorted(set(a) | set(b)):
            va, vb = a.get(name), b.get(name)
            if va == vb:
                continue
            if va is None:
                out.append(f"+ {name} {str(vb).split()[0]}")
            elif vb is None:
                out.append(f"- {name} {str(va).split()[0]}")
            else:
                ver_a, ver_b = str(va).split()[0], str(vb).split()[0]
                out.append(f"{name} {ver_a} -> {ver_b}" if ver_a != ver_b
                           else f"{name} {ver_a} rebuilt")
    for key, words in (("interpreter", "the interpreter"), ("harness", "the harness"),
                       ("variables", "the environment variables"),
                       ("model", "the model"), ("build", "the build")):
        if old.get(key) != new.get(key):
            out.append(words)
    if len(out) > limit:
        out = [*out[:limit], f"and {len(out) - limit} more"]
    return out


def main() -> int:
    print(json.dumps(environment_identity()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
