"""What an environment under test may contain: exact pins from an allowlist, or a named
interpreter a worker was configured with. The one policy both sides apply.

A trigger comes from CI over HTTP, so its pins are untrusted. The API refuses a bad pin
with a 422 (app.services.common.canonical_environment) and the worker refuses it again
before any process starts (workers.environments.materialize); both call `validate_pins`
here, so they refuse exactly the same things and a pin accepted by the API can always be
installed by a worker. `validate_pins` accepts exactly `name==version` with the name on an
allowlist and refuses everything pip would read as an option, a URL, a path, an extra or a
marker: a narrow language accepted, instead of every dangerous one recognised.

A named interpreter is checked where it runs: only a worker knows which interpreters it
has (`settings.interpreters`), so `named_interpreter` is the worker's check.

A model of the user's is code too: `package.module:factory` is imported and called in the
cell's child process, so the API and the worker both accept it only from the top-level
packages the server lists (`model_refusal`, SPEEDWATCH_MODEL_PACKAGES); otherwise a CI
token could import any module the worker can and call any of its callables. `file:`
archives are read only from the worker's model path (relative, never `..`: loading a
`.pt2` unpickles what it holds); torchvision and timm models are built by name through
those libraries' own registries.

Release order (`release_order`, `releases_between`) is PEP 440's, as pip's: a sweep's
versions and a bisect's range are read from the package index and ordered here.

Plain functions of their arguments: no store, no settings lookup, no process started.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from packaging.version import InvalidVersion, Version

from benchmarks import model_ref

MAX_PINS = 32
MAX_PIN_LENGTH = 120

# A distribution name as PEP 508 allows it (letters, digits, and . _ - inside), ASCII only.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
# A PEP 440 version without epochs or wildcards: release, pre, post, dev, local label.
_VERSION = (
    r"[0-9]+(?:\.[0-9]+)*"
    r"(?:(?:a|b|rc)[0-9]+)?"
    r"(?:\.post[0-9]+)?"
    r"(?:\.dev[0-9]+)?"
    r"(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?"
)
PIN_RE = re.compile(rf"(?P<name>{_NAME})==(?P<version>{_VERSION})", re.ASCII)
_SHELL_METACHARACTERS = set("$`|&;<>()*?!{}\\'\"#~%^")


class PinError(ValueError):
    """A requested pin that will not be installed; the message names the pin and why."""


class InterpreterError(ValueError):
    """A named interpreter this worker cannot run; the message says which ones it has."""


def normalize_name(name: str) -> str:
    """PEP 503 normalisation: `Torch_TensorRT` and `torch-tensorrt` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _refusal(pin: str) -> str:
    """The most specific reason a pin is not `name==version`, for the error message."""
    if pin.startswith("-"):
        return "pip options (-e, -i, --index-url, --extra-index-url, ...) are not allowed"
    if "://" in pin or pin.startswith(("/", ".", "~")) or "/" in pin or "@" in pin:
        return "URLs and paths are not allowed"
    if "[" in pin or "]" in pin:
        return "extras ([...]) are not allowed"
    if ";" in pin:
        return "environment markers (;) are not allowed"
    if any(c.isspace() for c in pin):
        return "whitespace is not allowed"
    if "==" not in pin or re.search(r"[<>~!]|===|\*", pin):
        return "only exact pins name==version are allowed (no ranges or wildcards)"
    if any(c in _SHELL_METACHARACTERS for c in pin):
        return "shell metacharacters are not allowed"
    return "must be name==version with a plain release version such as 1.22.0"


def validate_pins(pins: Sequence[str], allowlist: Iterable[str]) -> list[str]:
    """Return the pins normalised (`name==version`, name PEP 503) and sorted, or raise PinError.

    Only this function decides what reaches pip, so it accepts a narrow language instead of
    trying to recognise every dangerous one.
    """
    if isinstance(pins, str):
        raise PinError("environment pins: expected a list of strings, got one string")
    if len(pins) > MAX_PINS:
        raise PinError(f"environment pins: at most {MAX_PINS} pins, got {len(pins)}")
    allowed = {normalize_name(a) for a in allowlist}
    seen: dict[str, str] = {}
    for pin in pins:
        if not isinstance(pin, str):
            raise PinError(f"pin {pin!r}: expected a string")
        if len(pin) > MAX_PIN_LENGTH:
            raise PinError(f"pin {pin[:40]!r}...: longer than {MAX_PIN_LENGTH} characters")
        match = PIN_RE.fullmatch(pin)
        if match is None:
            raise PinError(f"pin {pin!r}: {_refusal(pin)}")
        name = normalize_name(match["name"])
        if name not in allowed:
            listed = ", ".join(sorted(allowed)) or "nothing (set SPEEDWATCH_ENV_ALLOWLIST)"
            raise PinError(f"pin {pin!r}: {name!r} is not on the allowlist ({listed})")
        version = match["version"]
        if name in seen and seen[name] != version:
            raise PinError(f"pin {pin!r}: {name} is pinned twice ({seen[name]} and {version})")
        seen[name] = version
    return [f"{n}=={v}" for n, v in sorted(seen.items())]


def named_interpreter(
    interpreter: str, pins: Sequence[str], interpreters: Mapping[str, str]
) -> str:
    """The python path of a configured interpreter, or raise InterpreterError.

    An environment is either pins or an interpreter, never both: pins are installed into a
    venv of the worker's own interpreter, and a named interpreter is used as it is.
    """
    if interpreter not in interpreters:
        raise InterpreterError(
            f"interpreter {interpreter!r} is not configured on this worker "
            f"(known: {', '.join(sorted(interpreters)) or 'none'}; see SPEEDWATCH_INTERPRETERS)"
        )
    if pins:
        raise InterpreterError("an environment is either pins or an interpreter")
    return interpreters[interpreter]


ANY_PACKAGE = "*"


def model_refusal(reference: str, model_packages: Sequence[str], *,
                  allow_absolute: bool = False) -> str | None:
    """Why a run may not name this model here (one line), or None when it may.

    The form must be one the API accepts (a relative `file:` path, no URL; an absolute one
    only with `allow_absolute`, for a result measured on the user's own machine), never
    the standard library, and a factory's top-level package must be in `model_packages`
    ("*": any, for a single-user host). The same rule for a trigger and for a stored
    result: a stored spec is what a repro bundle measures again on someone's machine.
    """
    try:
        ref = model_ref.parse(reference, allow_absolute=allow_absolute)
    except model_ref.ModelRefError as exc:
        return str(exc)
    if ref.kind != "factory":
        return None
    assert ref.module is not None
    package = ref.module.split(".", 1)[0]
    if ANY_PACKAGE in model_packages or package in model_packages:
        return None
    listed = ", ".join(model_packages) or "none"
    return (f"package {package!r} is not one this server imports models from (listed in "
            f"SPEEDWATCH_MODEL_PACKAGES: {listed})")
# ---- release order ------------------------------------------------------------------------

def parse_version(version: str) -> Version:
    """The version as PEP 440 orders it; PinError if it is not one a pin may name."""
    if not isinstance(version, str) or PIN_RE.fullmatch(f"x=={version}") is None:
        raise PinError(f"{version!r} is not a plain release version such as 1.22.0")
    try:
        return Version(version)
    except InvalidVersion:
        raise PinError(f"{version!r} is not a PEP 440 version") from None


def release_order(versions: Iterable[str], *, pre: bool = False) -> list[str]:
    """The versions oldest first, duplicates and anything a pin could not name left out;
    pre-releases and dev releases only if `pre`."""
    seen: dict[Version, str] = {}
    for text in versions:
        try:
            parsed = parse_version(text)
        except PinError:
            continue
        if (parsed.is_prerelease or parsed.is_devrelease) and not pre:
            continue
        seen.setdefault(parsed, text)
    return [seen[v] for v in sorted(seen)]


def releases_between(versions: Iterable[str], low: str, high: str, *,
                     pre: bool = False) -> list[str]:
    """The versions from `low` to `high` (both included, in whichever order they are
    given), oldest first; PinError if either bound is not a version."""
    a, b = sorted((parse_version(low), parse_version(high)))
    return [v for v in release_order(versions, pre=pre) if a <= Version(v) <= b]
