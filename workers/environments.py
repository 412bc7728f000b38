"""Environments under test: the cached virtualenvs built from validated version pins.

An environment is either a list of pins (`onnxruntime==1.22.0`) or a named interpreter the
worker was configured with. What may be asked for is decided in app.environment_policy,
the one policy the API and the workers share: `materialize` validates the pins there again,
whoever called, *before* any process starts. pip is then invoked with an argument list,
never a shell: the worker's own pip (`pip --python <venv>`), so its configuration
(PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX, pip.conf) is the one index that both the
builds and the versions a sweep lists (`index_versions`) read, and a private mirror works.

Layout of a materialized environment (content-addressed, so equal pins share one venv):

    <venv_cache_dir>/<key>/            key = sha256(layout version, python, sorted pins)
        bin/python
        lib/pythonX.Y/site-packages/
            <the pinned packages and their dependencies>
            speedwatch-overlay.pth     the benchmarks source root, then the worker's own
                                       site-packages *after* the pinned packages
        installed.json                 {name: version} as the child will import them
        build.json                     the build: seconds, bytes, what pip put in the venv
        last-used                      touched on every use (least-recently-used eviction)

The overlay is deliberate: pins say what differs from the worker's base environment (for
example another onnxruntime), and everything else (torch, numpy...) falls through to the
worker's packages, so pinning one package does not download a multi-GB torch. Pinned
packages come first on sys.path and so win. `installed.json` records what is effectively
importable, which is what each result stores.

Companion versions: the overlay is in place *before* pip runs, so pip resolves the pins
against the worker's packages and installs into the venv only what they need beyond them.
A pin whose requirements the worker's packages already meet adds nothing else; one that
needs another version (torch-tensorrt==2.7.0 requires torch 2.7) gets it installed into
the venv, where it wins over the worker's. pip never touches the worker's own copy (it
refuses to uninstall anything outside the venv). `build.json` says which packages pip put
into the venv, so a result can tell a pinned torch from the worker's.

Disk budget: after each build, the least recently used environments are deleted until
the cache fits `venv_cache_max_bytes`, never one that a cell is measuring in (`in_use`
holds a shared lock on it) nor one used within EVICT_GRACE_S.

Wheels only (`--only-binary=:all:`): building an sdist runs arbitrary code from the package
at install time, needs compilers the worker may not have, and is slow and not reproducible.
A pin with no wheel for the worker's platform fails with pip's own message.

Two workers on one host may want the same environment at once: a lock file serialises the
build, the venv is built in a temporary directory and renamed into place only when complete,
so a reader sees either no venv or a whole one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.environment_policy import validate_pins
from app.ports import PackageIndexError

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)

# Bump when the venv layout changes, so old cache entries are never reused.
LAYOUT_VERSION = "2"
BUILD_TIMEOUT_S = 1800.0
OVERLAY_PTH = "speedwatch-overlay.pth"
BUILD_JSON = "build.json"
LAST_USED = "last-used"
# An environment used this recently is never evicted: it may be between its resolution and
# its first child process.
EVICT_GRACE_S = 600.0
# `pip --python` (install into another interpreter with this pip) needs pip 22.3.
PIP_PYTHON_OPTION = (22, 3)


class EnvironmentBuildError(RuntimeError):
    """Building a validated environment failed (no such version, no wheel, pip error)."""


def python_tag() -> str:
    """What a venv depends on in its interpreter: implementation, full version, ABI."""
    impl = sys.implementation.name
    v = sys.version_info
    return f"{impl}-{v.major}.{v.minor}.{v.micro}-{sys.abiflags}-{sys.platform}"


def cache_key(normalized_pins: Sequence[str], python: str | None = None) -> str:
    """Content address of an environment: equal requirement sets map to one directory."""
    doc = json.dumps(
        {"layout": LAYOUT_VERSION, "python": python or python_tag(),
         "pins": sorted(normalized_pins)},
        sort_keys=True,
    )
    return hashlib.sha256(doc.encode()).hexdigest()[:32]


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def source_root() -> Path:
    """The directory that holds the `benchmarks` package the worker itself runs."""
    import benchmarks

    return Path(benchmarks.__file__).resolve().parent.parent


def materialize(
    requirements: Sequence[str],
    *,
    allowlist: Iterable[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    timeout_s: float = BUILD_TIMEOUT_S,
    max_bytes: int | None = None,
) -> str:
    """Return the python interpreter of the environment for `requirements`, building it once.

    No pins means the worker's own interpreter. Allowlist, cache directory and disk budget
    default to the settings; the pins are validated again here, whoever called. After a
    build, least recently used environments are evicted down to `max_bytes` (None: the
    setting venv_cache_max_bytes; 0: no budget).
    """
    if allowlist is None or cache_dir is None or max_bytes is None:
        from app.config import get_settings

        settings = get_settings()
        allowlist = settings.env_allowlist if allowlist is None else allowlist
        cache_dir = settings.venv_cache_dir if cache_dir is None else cache_dir
        max_bytes = settings.venv_cache_max_bytes if max_bytes is None else max_bytes
    pins = validate_pins(list(requirements), allowlist)
    if not pins:
        return sys.executable
    root = Path(cache_dir).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    key = cache_key(pins)
    final = root / key
    if venv_python(final).exists():
        _touch(final)
        return str(venv_python(final))
    with _file_lock(root / f"{key}.lock"):
        if venv_python(final).exists():  # another worker finished it while we waited
            _touch(final)
            return str(venv_python(final))
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{key[:12]}-", dir=root))
        try:
            os.chmod(tmp, 0o755)
            _build(tmp, pins, timeout_s=timeout_s)
            os.rename(tmp, final)
            _touch(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log.info("built environment %s for %s", final, " ".join(pins))
    if max_bytes:
        evict(root, max_bytes, keep={key})
    return str(venv_python(final))


def build_record(python: str) -> dict[str, Any] | None:
    """The build.json of the cached venv `python` belongs to; None for any other python."""
    path = Path(python).parent.parent / BUILD_JSON
    if Path(python) == Path(sys.executable) or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ---- disk budget -------------------------------------------------------------------------

def _touch(venv: Path) -> None:
    with contextlib.suppress(OSError):
        (venv / LAST_USED).touch()


def _last_used(venv: Path) -> float:
    for name in (LAST_USED, BUILD_JSON, "installed.json"):
        with contextlib.suppress(OSError):
            return (venv / name).stat().st_mtime
    return 0.0


def directory_bytes(path: Path) -> int:
    """Bytes of the files under `path` (links not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


@dataclasses.dataclass(frozen=True)
class CachedEnvironment:
    key: str
    path: Path
    size_bytes: int
    last_used: float
    pins: list[str]


def cached_environments(root: Path) -> list[CachedEnvironment]:
    """The complete venvs in the cache, least recently used first."""
    out: list[CachedEnvironment] = []
    if not root.is_dir():
        return out
    for venv in root.iterdir():
        if venv.name.startswith(".") or not venv_python(venv).exists():
            continue
        record = build_record(str(venv_python(venv))) or {}
        size = record.get("size_bytes")
        out.append(CachedEnvironment(
            venv.name, venv, int(size) if isinstance(size, int) else directory_bytes(venv),
            _last_used(venv), list(record.get("pins") or [])))
    return sorted(out, key=lambda e: e.last_used)


def evict(root: Path, max_bytes: int, *, keep: Iterable[str] = (),
          now: float | None = None) -> list[CachedEnvironment]:
    """Delete least recently used environments until the cache holds at most `max_bytes`;
    returns what it deleted. Never one in `keep`, one used within EVICT_GRACE_S, or one a
    cell holds (`in_use`)."""
    now = time.time() if now is None else now
    cached = cached_environments(root)
    total = sum(e.size_bytes for e in cached)
    evicted: list[CachedEnvironment] = []
    for entry in cached:
        if total <= max_bytes:
            break
        if entry.key in set(keep) or now - entry.last_used < EVICT_GRACE_S:
            continue
        with open(root / f"{entry.key}.use", "a") as use:
            try:
                fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a cell is measuring in it
            try:
                trash = root / f".evicted-{entry.key}-{os.getpid()}"
                os.rename(entry.path, trash)  # gone at once for readers, then deleted
                shutil.rmtree(trash, ignore_errors=True)
            finally:
                fcntl.flock(use, fcntl.LOCK_UN)
        total -= entry.size_bytes
        evicted.append(entry)
        log.info("evicted environment %s (%s, %.1f MB, last used %.0f s ago) to stay "
                 "under %.1f MB", entry.key, " ".join(entry.pins) or "?",
                 entry.size_bytes / 1e6, now - entry.last_used, max_bytes / 1e6)
    if total > max_bytes:
        log.warning("environment cache %s holds %.1f MB, over its budget of %.1f MB: the "
                    "rest is in use or was used in the last %.0f s", root, total / 1e6,
                    max_bytes / 1e6, EVICT_GRACE_S)
    return evicted


@contextlib.contextmanager
def in_use(pythons: Iterable[str]) -> Iterator[None]:
    """Hold the cached venvs of `pythons` against eviction while cells measure in them."""
    with contextlib.ExitStack() as stack:
        for python in dict.fromkeys(pythons):
            venv = Path(python).parent.parent
            if Path(python) == Path(sys.executable) or not (venv / BUILD_JSON).is_file():
                continue
            use = stack.enter_context(open(venv.parent / f"{venv.name}.use", "a"))
            fcntl.flock(use, fcntl.LOCK_SH)
            _touch(venv)
        yield


def installed_versions(python: str) -> dict[str, str]:
    """The versions `python` imports: from installed.json of a cached venv, else measured."""
    path = Path(python).parent.parent / "installed.json"
    if Path(python) != Path(sys.executable) and path.is_file():
        data = json.loads(path.read_text())
        return {str(k): str(v) for k, v in data.items()}
    return _measure_versions(python)


_VERSIONS_SCRIPT = """
import importlib.metadata as m, json, re, sys
out = {}
for d in m.distributions():
    name = d.metadata["Name"]
    if name:
        out.setdefault(re.sub(r"[-_.]+", "-", name).lower(), d.version)
json.dump(out, sys.stdout, sort_keys=True)
"""


def _measure_versions(python: str) -> dict[str, str]:
    # distributions() walks sys.path in order, so the first hit per name is what imports.
    proc = subprocess.run(
        [python, "-I", "-c", _VERSIONS_SCRIPT], capture_output=True, text=True, timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise EnvironmentBuildError(f"listing packages failed: {_tail(proc.stderr)}")
    data = json.loads(proc.stdout)
    return {str(k): str(v) for k, v in data.items()}


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: list[str], *, timeout_s: float, what: str) -> None:
    log.info("%s: %s", what, " ".join(argv))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentBuildError(f"{what}: timed out after {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        log.warning("%s failed (exit %s): %s", what, proc.returncode, _tail(proc.stderr))
        raise EnvironmentBuildError(
            f"{what} failed (exit {proc.returncode}): {_tail(redacted(proc.stderr))}")


def _tail(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


def redacted(text: str) -> str:
    """pip's error as a cell's error may tell it (it reaches every ci token of the
    project): credentials in an index URL masked, and the list of every version the index
    holds cut to its count (a private mirror's listing is the operator's). The worker's
    log keeps the whole text."""
    text = _URL_CREDENTIALS.sub(r"\1***@", text)

    def count(match: re.Match[str]) -> str:
        listed = [v for v in match.group(1).split(",") if v.strip() and v.strip() != "none"]
        return f"(from versions: {len(listed)} on the index)" if listed else match.group(0)

    return _FROM_VERSIONS.sub(count, text)


def _pip_python_option() -> bool:
    """Whether the worker's pip can install into another interpreter (`pip --python`)."""
    try:
        version = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return False
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    return parts >= PIP_PYTHON_OPTION


def _build(venv: Path, pins: list[str], *, timeout_s: float) -> None:
    """Create the venv with the overlay, let pip install the pins (wheels only) and what
    they need beyond the worker's packages, record versions and the build."""
    started = time.monotonic()
    python = venv_python(venv)
    # The venv is made from the *base* interpreter: a venv of a venv would point `home` at
    # the worker's venv and still not see its packages.
    base = getattr(sys, "_base_executable", sys.executable)
    quiet = ["--quiet", "--no-input", "--disable-pip-version-check"]
    if _pip_python_option():
        # The worker's pip installs into the venv: no pip of its own (seconds and 15 MB
        # saved per environment) and the worker's pip configuration throughout.
        _run([base, "-m", "venv", "--without-pip", str(venv)], timeout_s=300,
             what="python -m venv")
        install = [sys.executable, "-m", "pip", "--python", str(python), "install", *quiet]
    else:
        _run([base, "-m", "venv", str(venv)], timeout_s=300, what="python -m venv")
        install = [str(python), "-m", "pip", "install", *quiet]
    site_dir = _site_packages(python)
    before = set(_own_distributions(site_dir))
    lines = [str(source_root())]
    lines += [f"import site; site.addsitedir({p!r})" for p in _worker_site_dirs()]
    (site_dir / OVERLAY_PTH).write_text("\n".join(lines) + "\n")
    # The pins were validated (no leading '-'); "--" ends option parsing all the same.
    _run([*install, "--only-binary=:all:", "--", *pins], timeout_s=timeout_s,
         what="install " + " ".join(pins))
    versions = _measure_versions(str(python))
    for pin in pins:
        name, version = pin.split("==")
        if versions.get(name) != version:
            raise EnvironmentBuildError(
                f"{pin}: the environment has {name} {versions.get(name, 'missing')} instead"
            )
    (venv / "installed.json").write_text(json.dumps(versions, indent=1, sort_keys=True))
    own = {n: v for n, v in _own_distributions(site_dir).items() if n not in before}
    record = {
        "pins": pins, "host": socket.gethostname(), "python": python_tag(),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 2),
        "size_bytes": directory_bytes(venv),
        # what pip installed into the venv (the pins and the companions they needed);
        # everything else is the worker's own
        "venv_packages": dict(sorted(own.items())),
    }
    (venv / BUILD_JSON).write_text(json.dumps(record, indent=1, sort_keys=True))


def _own_distributions(site_dir: Path) -> dict[str, str]:
    """name -> version of the distributions installed in this site directory itself."""
    out: dict[str, str] = {}
    for meta in site_dir.glob("*.dist-info/METADATA"):
        name = version = None
        with contextlib.suppress(OSError), open(meta, encoding="utf-8",
                                                errors="replace") as fh:
            for line in fh:
                if line.startswith("Name:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
                if (name and version) or not line.strip():
                    break
        if name and version:
            out[re.sub(r"[-_.]+", "-", name).lower()] = version
    return out


# ---- the package index (app.ports.PackageIndex) --------------------------------------------

INDEX_TIMEOUT_S = 120.0
_AVAILABLE = "Available versions:"


def index_versions(package: str, *, pre: bool = False,
                   timeout_s: float = INDEX_TIMEOUT_S) -> list[str]:
    """The versions of `package` pip can install here as a wheel, as pip lists them.

    `pip index versions` reads pip's own configuration (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL,
    PIP_FIND_LINKS, PIP_NO_INDEX, pip.conf), so a private mirror or a wheel directory is
    read as the environment builds will read it; `--only-binary=:all:` keeps out releases
    with no wheel for this interpreter and platform, which `_build` could not install.
    The name was validated by the caller (an allowlisted PEP 503 name, no option).
    """
    argv = [sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check",
            "--no-input", "--only-binary=:all:"]
    if pre:
        argv.append("--pre")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        proc = subprocess.run([*argv, "--", package], capture_output=True, text=True,
                              timeout=timeout_s, env=env, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PackageIndexError(f"pip index versions {package}: no answer within "
                                f"{timeout_s:.0f} s") from None
    for line in proc.stdout.splitlines():
        if line.startswith(_AVAILABLE):
            return [v.strip() for v in line[len(_AVAILABLE):].split(",") if v.strip()]
    if "No matching distribution found" in proc.stderr:
        return []
    errors = [line for line in proc.stderr.splitlines()
              if line.strip() and not line.startswith("WARNING:")]
    raise PackageIndexError(f"pip index versions {package} failed (exit {proc.returncode}): "
                            f"{_tail(redacted(chr(10).join(errors) or proc.stderr), 300)}")


# How long the service keeps pip's answer for one package. Each POST /api/v1/sweeps read
# the index by starting pip (0.4 s here): 549 generated sweep requests took 97 s of the
# API fuzz test, and a client sending many kept the API's threads in pip. A release
# published within this long after a sweep's request may be missed by the next one.
INDEX_CACHE_SECONDS = 60.0
_PIP_CONFIG_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX",
                   "PIP_CONFIG_FILE")


class PipPackageIndex:
    """app.ports.PackageIndex: pip's configured index, read by `index_versions`, each
    answer kept for `ttl_s` per package and pip configuration (a failure is not kept)."""

    def __init__(self, ttl_s: float = INDEX_CACHE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: dict[tuple[Any, ...], tuple[float, list[str]]] = {}

    def versions(self, package: str, *, pre: bool, settings: Settings) -> list[str]:
        key = (package, pre, *(os.environ.get(name) for name in _PIP_CONFIG_ENV))
        with self._lock:
            kept = self._answers.get(key)
            if kept is not None and self._clock() - kept[0] < self._ttl_s:
                return list(kept[1])
        found = index_versions(package, pre=pre)
        with self._lock:
            now = self._clock()
            # what expired goes: the keys are allowlisted packages, so this stays small
            self._answers = {k: v for k, v in self._answers.items()
                             if now - v[0] < self._ttl_s}
            self._answers[key] = (now, found)
        return list(found)


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()
    return Path(out)


def _worker_site_dirs() -> list[str]:
    """Site directories of the worker's interpreter, in its own import order."""
    dirs: list[str] = []
    for d in [*site.getsitepackages(), site.getusersitepackages()]:
        if d not in dirs and os.path.isdir(d):
            dirs.append(d)
    return dirs
