"""A host's cache of built candidates: with pinned builds a cell builds each side once.

Pinned builds come out the same in every process (on an H100 fresh compiles of one cell
spread 0.07-0.08% with one build fingerprint, equal across runs, GPUs and hosts), yet every
process of every cell compiled from scratch. Here a build's artifacts (inductor's cache
artifacts, the ONNX graph ONNX Runtime starts from, TensorRT's serialized engine) are kept
once per host under a key made of everything that decides the build, and a later process
loads them, checks that the loaded build's fingerprint equals the stored one and says in
its result whether it built or loaded, and how long that took.

The key (`key_parts`) holds the spec's build fields, the model's digest, the environment
(interpreter, every installed distribution with its RECORD hash, the harness's own code:
a changed pipeline is a changed key, never a stale hit), the library variables, and the
device (GPU class, compute capability, driver and CUDA versions; on a CPU its model and
instruction-set flags). `timing.builds = "as-shipped"` never uses the cache: there the
spread between fresh builds is what is measured.

An entry is a directory `<root>/<key>/` holding the artifact files and `entry.json` (each
file's size and SHA-256, the build fingerprint, the seconds the build took). It is written
into a temporary directory and renamed into place, so a reader sees a whole entry or none;
an entry whose files do not match `entry.json` (partial, corrupt, tampered) is removed and
the build is made afresh, never used. The cache is bounded (`SPEEDWATCH_BUILD_CACHE_MAX_BYTES`,
10 GiB by default): after a store the least recently used entries go first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.spec import BenchSpec

ENTRY_FILE = "entry.json"
KEY_CHARS = 32
# Where entries live, and how many bytes they may take together; "off" disables the cache.
BUILD_CACHE_ENV = "SPEEDWATCH_BUILD_CACHE_DIR"
BUILD_CACHE_MAX_ENV = "SPEEDWATCH_BUILD_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 10 * 1024**3
# A file name in an entry: the backend's own, kept to plain names (no paths).
_SAFE_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class BuildCacheError(ValueError):
    """A bad cache setting (a size that is not a number)."""


@dataclass
class Entry:
    """A stored build: its files by name, the fingerprint and seconds of the build."""

    key: str
    files: dict[str, bytes]
    fingerprint: str | None
    build_seconds: float
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Lookup:
    """What a lookup found: the entry, or None with the problem of an entry it removed."""

    entry: Entry | None
    problem: str | None = None


def cache_dir() -> Path | None:
    """$SPEEDWATCH_BUILD_CACHE_DIR, else ~/.cache/speedwatch/builds; None when set to
    "off". Outside any process's temporary directory: a build must outlive its process."""
    configured = os.environ.get(BUILD_CACHE_ENV, "").strip()
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "speedwatch" / "builds"


def max_bytes() -> int:
    raw = os.environ.get(BUILD_CACHE_MAX_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(float(raw))
    except ValueError:
        raise BuildCacheError(f"{BUILD_CACHE_MAX_ENV}: {raw!r} is not a number of bytes") \
            from None
    if value < 0:
        raise BuildCacheError(f"{BUILD_CACHE_MAX_ENV}: {raw!r} must be >= 0")
    return value


def device_key(device: str) -> dict[str, Any]:
    """What of the device decides a build: a GPU's class, compute capability, driver and
    CUDA versions; a CPU's model and instruction-set flags (ONNX Runtime picks kernels by
    them)."""
    if device == "cuda":
        import torch

        from benchmarks.fingerprint import device_class_from_gpu_name

        major, minor = torch.cuda.get_device_capability()
        return {"gpu": device_class_from_gpu_name(torch.cuda.get_device_name()),
                "capability": f"{major}.{minor}", "cuda": torch.version.cuda,
                "driver": _nvidia_driver()}
    return {"cpu": _cpu_model(), "flags": _cpu_flags(), "machine": platform.machine()}


def _nvidia_driver() -> str | None:
    try:
        return Path("/proc/driver/nvidia/version").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None


def _cpuinfo_field(name: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _cpu_model() -> str | None:
    return _cpuinfo_field("model name") or platform.processor() or None


def _cpu_flags() -> str | None:
    flags = _cpuinfo_field("flags")
    return hashlib.sha256(flags.encode()).hexdigest()[:16] if flags else None


def key_parts(spec_fields: dict[str, Any], *, model: str, environment: dict[str, Any],
              device: dict[str, Any]) -> dict[str, Any]:
    """Everything that decides a build, as a JSON-able document (kept in the entry)."""
    return {"spec": spec_fields, "model": model, "environment": environment,
            "device": device}


def key_of(parts: dict[str, Any]) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_CHARS]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BuildCache:
    """One host's entries under `root`, at most `limit` bytes together."""

    def __init__(self, root: Path, limit: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root
        self.limit = limit

    def lookup(self, key: str) -> Lookup:
        """The entry for `key`, whole and as stored, or None. A damaged entry (a file
        missing, cut short or changed; an unreadable entry.json) is removed and named."""
        path = self.root / key
        meta_path = path / ENTRY_FILE
        if not path.is_dir():
            return Lookup(None)
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            files: dict[str, bytes] = {}
            for name, want in dict(meta["files"]).items():
                if not _safe_name(name):
                    raise ValueError(f"file name {name!r}")
                data = (path / name).read_bytes()
                if len(data) != want["bytes"] or _sha256(data) != want["sha256"]:
                    raise ValueError(f"{name} does not match its recorded size and hash")
                files[name] = data
            entry = Entry(key, files, meta.get("fingerprint"),
                          float(meta.get("build_seconds") or 0.0), meta)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.remove(key)
            return Lookup(None, f"entry {key[:12]} was damaged ({_one_line(exc)}): removed, "
                                "built afresh")
        with contextlib.suppress(OSError):
            os.utime(meta_path)  # its last use, for eviction
        return Lookup(entry)

    def store(self, key: str, files: dict[str, bytes], *, fingerprint: str | None,
              build_seconds: float, parts: dict[str, Any]) -> bool:
        """Keep a build under `key`: written aside, then renamed into place whole. False
        when another process stored it first (its entry stays: the builds are the same)."""
        for name in files:
            if not _safe_name(name) or name == ENTRY_FILE:
                raise ValueError(f"build artifact name {name!r}: plain file names only")
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=self.root))
        try:
            for name, data in files.items():
                (tmp / name).write_bytes(data)
            meta = {"key": key, "fingerprint": fingerprint,
                    "build_seconds": round(build_seconds, 3), "created": time.time(),
                    "files": {name: {"bytes": len(data), "sha256": _sha256(data)}
                              for name, data in files.items()},
                    "parts": parts}
            (tmp / ENTRY_FILE).write_text(json.dumps(meta, indent=1, default=str),
                                          encoding="utf-8")
            try:
                os.rename(tmp, self.root / key)
            except OSError:  # already there: another process's build of the same key
                return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.evict(keep=key)
        return True

    def remove(self, key: str) -> None:
        """Out of the way first (a rename), then deleted: no reader sees half an entry."""
        path = self.root / key
        if not path.exists():
            return
        doomed = self.root / f".removed-{key[:12]}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, doomed)
        except OSError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def entries(self) -> list[tuple[str, float, int]]:
        """(key, last use, bytes) of every whole entry."""
        out: list[tuple[str, float, int]] = []
        if not self.root.is_dir():
            return out
        for path in self.root.iterdir():
            meta = path / ENTRY_FILE
            if path.name.startswith(".") or not meta.is_file():
                continue
            with contextlib.suppress(OSError):
                size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
                out.append((path.name, meta.stat().st_mtime, size))
        return out

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove the least recently used entries until the rest fit the bound (the
        entry just stored stays, even alone over it); the keys removed."""
        entries = sorted(self.entries(), key=lambda e: e[1])
        total = sum(size for _, _, size in entries)
        removed = []
        for key, _, size in entries:
            if total <= self.limit:
                break
            if key == keep:
                continue
            self.remove(key)
            removed.append(key)
            total -= size
        return removed


def open_cache() -> BuildCache | None:
    """The host's cache as the environment configures it; None when it is off."""
    root = cache_dir()
    return None if root is None else BuildCache(root, max_bytes())


def _safe_name(name: str) -> bool:
    return bool(name) and set(name) <= _SAFE_NAME and not name.startswith(".")


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]



def spec_fields(spec: BenchSpec) -> dict[str, Any]:
    """The spec's fields that decide its build: all but the timing policy (save `builds`)
    and the harness's own options (a side, a later process: they differ between the
    processes of one cell, whose builds are the same)."""
    fields = spec.to_dict()
    fields.pop("timing", None)
    fields["builds"] = spec.timing.builds
    fields["options"] = {k: v for k, v in (spec.options or {}).items()
                         if not str(k).startswith("_")}
    return fields


def built_or_loaded(spec: BenchSpec, backend: Any, model: Any, example: Any,
                    fresh_model: Any, model_identity: str | None, *,
                    environment: dict[str, Any] | None = None,
                    ) -> tuple[Any, dict[str, Any]]:
    """The candidate for `spec`, loaded from the host's cache where a whole entry with
    the same key exists, else built (and stored); with what happened, for the evidence.

    `fresh_model` makes another copy of the model for a build after a refused load (a
    loaded build whose fingerprint is not the stored one is never timed). `model_identity`
    names the model's weights and code: a built-in model's spec fields, a model of the
    user's digest and fingerprint (None: not known, so not cached; a frozen build holds
    the weights). `environment` is this interpreter's identity.environment_identity()
    (computed here when not given)."""
    from benchmarks import build

    why_not = _uncached_reason(spec, backend) or (
        None if model_identity else "the model's digest is not known")
    cache = None
    if why_not is None:
        cache, why_not = _opened()
    if cache is None:
        start = time.perf_counter()
        compiled = backend.compile(model, example, spec)
        return compiled, {"source": "built", "seconds": round(time.perf_counter() - start, 3),
                          "cached": False, "why_uncached": why_not}
    parts = key_parts(spec_fields(spec), model=str(model_identity),
                      environment=_environment(environment),
                      device=device_key(spec.device))
    key = key_of(parts)
    info: dict[str, Any] = {"key": key[:12], "cached": True}
    found = cache.lookup(key)
    if found.problem:
        info["problem"] = found.problem
    if found.entry is not None:
        start = time.perf_counter()
        compiled = backend.compile_cached(model, example, spec, found.entry.files)
        seconds = time.perf_counter() - start
        loaded = build.fingerprint(compiled.build_choices)
        stored = found.entry.fingerprint
        if stored is None or loaded == stored:
            info.update({"source": "loaded", "seconds": round(seconds, 3),
                         "built_seconds": found.entry.build_seconds})
            info.update({k: v for k, v in (("via", compiled.loaded_via),
                                           ("note", compiled.load_note)) if v})
            return compiled, info
        cache.remove(key)
        info["refused"] = (f"the loaded build's fingerprint {loaded} is not the stored "
                           f"build's {stored}: entry {key[:12]} removed, built afresh")
        model = fresh_model()
    start = time.perf_counter()
    compiled = backend.compile_cached(model, example, spec, None)
    seconds = time.perf_counter() - start
    info.update({"source": "built", "seconds": round(seconds, 3)})
    artifacts = getattr(compiled, "artifacts", None)
    if not artifacts:
        info["stored"] = False
        info["why_uncached"] = getattr(compiled, "artifacts_missing", None) or \
            "the build left nothing to keep"
        return compiled, info
    if "refused" in info:
        info["stored"] = False  # this process loaded another build first: keep none of it
        return compiled, info
    try:
        info["stored"] = cache.store(key, artifacts, fingerprint=build.fingerprint(
            compiled.build_choices), build_seconds=seconds, parts=parts)
    except (OSError, ValueError) as exc:
        info["stored"] = False
        info["problem"] = f"storing the build: {_one_line(exc)}"
    compiled.artifacts = None  # the bytes are on disk now; the process needs none of them
    return compiled, info


def _opened() -> tuple[BuildCache | None, str | None]:
    """The host's cache, or None with why not (turned off, a bad setting)."""
    try:
        cache = open_cache()
    except BuildCacheError as exc:
        return None, str(exc)
    return (cache, None) if cache is not None else (None, f"{BUILD_CACHE_ENV}=off")


def _environment(given: dict[str, Any] | None) -> dict[str, Any]:
    from benchmarks import identity

    return given if given is not None else identity.environment_identity()


def _uncached_reason(spec: BenchSpec, backend: Any) -> str | None:
    if spec.timing.builds != "pinned":
        return "builds=as-shipped: every process builds afresh"
    if not callable(getattr(backend, "compile_cached", None)):
        return f"the {spec.backend} backend keeps no build artifacts"
    return None


def built_model(spec: BenchSpec, *, environment: dict[str, Any] | None = None,
                ) -> tuple[Any, dict[str, Any]]:
    """A built-in model with its seeded weights, from the host's cache where an earlier
    process kept them (a ResNet50's seeded initialisation and batch-norm calibration took
    8.8 s of a unit's start on a busy 2-core machine; loading its state is a file read),
    else built and kept. Keyed like a build: the model's fields, the harness that builds
    it, the interpreter's distributions and the CPU (the calibration pass runs there), so
    the weights are bit for bit the ones `benchmarks.models.build_model` makes here."""
    import io

    import torch

    from benchmarks.models import build_model

    fields = {name: getattr(spec, name) for name in
              ("model", "width", "num_classes", "seed")}
    cache, why = _opened()
    if cache is None:
        return build_model(spec), {"source": "built", "cached": False, "why_uncached": why}
    parts = key_parts({"model_weights": fields}, model=spec.model,
                      environment=_environment(environment), device=device_key("cpu"))
    key = key_of(parts)
    found = cache.lookup(key)
    info: dict[str, Any] = {"key": key[:12]}
    if found.problem:
        info["problem"] = found.problem
    start = time.perf_counter()
    if found.entry is not None:
        model = build_model(spec, initialise=False)
        state = torch.load(io.BytesIO(found.entry.files[MODEL_STATE]), weights_only=True)
        model.load_state_dict(state, assign=True)
        for p in model.parameters():
            p.requires_grad_(False)
        info.update({"source": "loaded", "seconds": round(time.perf_counter() - start, 3)})
        return model.eval(), info
    model = build_model(spec)
    seconds = time.perf_counter() - start
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    try:
        info["stored"] = cache.store(key, {MODEL_STATE: buffer.getvalue()}, fingerprint=None,
                                     build_seconds=seconds, parts=parts)
    except (OSError, ValueError) as exc:
        info.update({"stored": False, "problem": f"storing the model: {_one_line(exc)}"})
    info.update({"source": "built", "seconds": round(seconds, 3)})
    return model, info


MODEL_STATE = "model-state.pt"
