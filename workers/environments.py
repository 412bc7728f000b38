"""Environments under test: the cached virtualenvs built from validated version pins.

An environment is either a list of pins (`onnxruntime==1.22.0`) or a named interpreter the
worker was configured with. What may be asked for is decided in app.environment_policy,
the one policy the API and the workers share: `materialize` validates the pins there again,
whoever called, *before* any process starts. pip and uv are then invoked with an argument
list, never a shell.

Layout of a materialized environment (content-addressed, so equal pins share one venv):

    <venv_cache_dir>/<key>/            key = sha256(layout version, python, sorted pins)
        bin/python
        lib/pythonX.Y/site-packages/
            <the pinned packages and their dependencies>
            speedwatch-overlay.pth     the benchmarks source root, then the worker's own
                                       site-packages *after* the pinned packages
        installed.json                 {name: version} as the child will import them

The overlay is deliberate: pins say what differs from the worker's base environment (for
example another onnxruntime), and everything else (torch, numpy...) falls through to the
worker's packages, so pinning one package does not download a multi-GB torch. Pinned
packages come first on sys.path and so win. `installed.json` records what is effectively
importable, which is what each result stores.

Wheels only (`--only-binary=:all:`): building an sdist runs arbitrary code from the package
at install time, needs compilers the worker may not have, and is slow and not reproducible.
A pin with no wheel for the worker's platform fails with pip's own message.

Two workers on one host may want the same environment at once: a lock file serialises the
build, the venv is built in a temporary directory and renamed into place only when complete,
so a reader sees either no venv or a whole one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.environment_policy import validate_pins
from app.ports import PackageIndexError

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)

# Bump when the venv layout changes, so old cache entries are never reused.
LAYOUT_VERSION = "1"
BUILD_TIMEOUT_S = 1800.0
OVERLAY_PTH = "speedwatch-overlay.pth"


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
) -> str:
    """Return the python interpreter of the environment for `requirements`, building it once.

    No pins means the worker's own interpreter. Allowlist and cache directory default to
    the settings; the pins are validated again here, whoever called.
    """
    if allowlist is None or cache_dir is None:
        from app.config import get_settings

        settings = get_settings()
        allowlist = settings.env_allowlist if allowlist is None else allowlist
        cache_dir = settings.venv_cache_dir if cache_dir is None else cache_dir
    pins = validate_pins(list(requirements), allowlist)
    if not pins:
        return sys.executable
    root = Path(cache_dir).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    key = cache_key(pins)
    final = root / key
    if venv_python(final).exists():
        return str(venv_python(final))
    with _file_lock(root / f"{key}.lock"):
        if venv_python(final).exists():  # another worker finished it while we waited
            return str(venv_python(final))
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{key[:12]}-", dir=root))
        try:
            os.chmod(tmp, 0o755)
            _build(tmp, pins, timeout_s=timeout_s)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log.info("built environment %s for %s", final, " ".join(pins))
    return str(venv_python(final))


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
        raise EnvironmentBuildError(f"{what} failed (exit {proc.returncode}): {_tail(proc.stderr)}")


def _tail(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _build(venv: Path, pins: list[str], *, timeout_s: float) -> None:
    """Create the venv, install the pins (wheels only), add the overlay, record versions."""
    uv = shutil.which("uv")
    python = venv_python(venv)
    # The venv is made from the *base* interpreter: a venv of a venv would point `home` at
    # the worker's venv and still not see its packages.
    base = getattr(sys, "_base_executable", sys.executable)
    if uv:
        _run([uv, "venv", "--quiet", "--python", base, str(venv)], timeout_s=300, what="uv venv")
        install = [uv, "pip", "install", "--quiet", "--python", str(python)]
    else:
        _run([base, "-m", "venv", str(venv)], timeout_s=300, what="python -m venv")
        install = [str(python), "-m", "pip", "install", "--quiet", "--no-input",
                   "--disable-pip-version-check"]
    # The pins were validated (no leading '-'); "--" ends option parsing all the same.
    _run([*install, "--only-binary=:all:", "--", *pins], timeout_s=timeout_s,
         what="install " + " ".join(pins))
    site_dir = _site_packages(python)
    lines = [str(source_root())]
    lines += [f"import site; site.addsitedir({p!r})" for p in _worker_site_dirs()]
    (site_dir / OVERLAY_PTH).write_text("\n".join(lines) + "\n")
    versions = _measure_versions(str(python))
    for pin in pins:
        name, version = pin.split("==")
        if versions.get(name) != version:
            raise EnvironmentBuildError(
                f"{pin}: the environment has {name} {versions.get(name, 'missing')} instead"
            )
    (venv / "installed.json").write_text(json.dumps(versions, indent=1, sort_keys=True))


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
                            f"{_tail(chr(10).join(errors) or proc.stderr, 300)}")


class PipPackageIndex:
    """app.ports.PackageIndex: pip's configured index, read by `index_versions`."""

    def versions(self, package: str, *, pre: bool, settings: Settings) -> list[str]:
        return index_versions(package, pre=pre)


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
