"""What a spec's `model` may name, and how that name is written in a series key.

Five forms (`parse` says which, or why the text is none of them):

| form                     | example                     | built by                              |
| ------------------------ | --------------------------- | ------------------------------------- |
| a built-in name          | `resnet50`                  | benchmarks.models (seeded ResNets)    |
| `package.module:factory` | `mypkg.nets:build`          | the user's code, imported in the cell |
| `torchvision:NAME`       | `torchvision:resnet18`      | torchvision, random weights           |
| `timm:NAME`              | `timm:resnet18`             | timm, random weights                  |
| `file:PATH.pt2`          | `file:nets/small.pt2`       | a `torch.export` archive on the host  |

Only the host that measures can build a model that is not built in, so only it can say
what the model is: the series key of such a model carries a fingerprint of its
architecture and input shapes (`label`, with the digest benchmarks.own_models computes),
and a model that changed starts a series of its own instead of being compared with the
old one. `file:` paths are refused when they could leave the directories they are looked
up in (`..`, a URL, a backslash); absolute paths only where the caller allows them (the
local `speedwatch bench`, never the API). The prefixes `file`, `torchvision` and `timm`
are reserved: a Python package of one of those names cannot be named by the factory form,
and neither can the standard library (`not_a_model_package`): this rule holds wherever a
spec is read (the API, a worker, `speedwatch bench --spec`, a stored result).

No torch here: the API validates with this module and never imports torch.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Literal

BUILTIN_MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet50-customop")
HUB_PREFIXES = ("torchvision", "timm")
RESERVED_PREFIXES = ("file", *HUB_PREFIXES)
ARCHIVE_SUFFIX = ".pt2"
# Series.model is a 100-character column: the label is the reference (or, for a file,
# `file:` and the file's name) plus "@" and the digest.
DIGEST_CHARS = 12
MAX_REFERENCE = 87
MAX_ARCHIVE_NAME = 80
MAX_LOCAL_PATH = 1000

Kind = Literal["builtin", "factory", "torchvision", "timm", "pt2"]

# `\Z`, not `$`: in Python `$` also matches before a trailing newline, and "mypkg.nets:build\n"
# would name a series its own points route cannot reach.
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_IDENT}(?:\.{_IDENT})*"
_FACTORY_RE = re.compile(rf"^({_DOTTED}):({_DOTTED})\Z")
# The factory is one name the module defines: an attribute path (`os.system`,
# `build.__globals__`) would reach past the module into whatever it imported.
_FACTORY_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*\Z")
_HUB_RE = re.compile(r"^(torchvision|timm):([A-Za-z0-9][A-Za-z0-9_.\-]*)\Z")
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+\-]*\Z")
_DIGEST_RE = re.compile(rf"^[0-9a-f]{{{DIGEST_CHARS}}}\Z")

# One pattern for the API's JSON schema (the relative `file:` form only; lengths are
# checked apart): documentation for clients, the validator below is what decides.
API_PATTERN = (
    rf"^(?:{'|'.join(BUILTIN_MODELS)}"  # plain names: letters, digits and '-'
    rf"|{_DOTTED}:{_DOTTED}"
    r"|(?:torchvision|timm):[A-Za-z0-9][A-Za-z0-9_.\-]*"
    r"|file:(?:[A-Za-z0-9_][A-Za-z0-9_.+\-]*/)*[A-Za-z0-9_][A-Za-z0-9_.+\-]*\.pt2)$"
)

FORMS_HELP = ("a built-in model (" + ", ".join(BUILTIN_MODELS) + "), package.module:factory, "
              "torchvision:NAME, timm:NAME or file:PATH.pt2")


class ModelRefError(ValueError):
    """Text that names no model; the message says what the forms are."""


@dataclass(frozen=True)
class ModelRef:
    kind: Kind
    text: str
    # factory: the module to import and the name of the factory it defines
    module: str | None = None
    attr: str | None = None
    # torchvision / timm: the model's name in that library
    name: str | None = None
    # pt2: the path as written (relative: looked up in the model path)
    path: str | None = None

    @property
    def builtin(self) -> bool:
        return self.kind == "builtin"

    @property
    def archive_name(self) -> str | None:
        """The `.pt2` file's own name (no directories), for a `file:` reference."""
        return None if self.path is None else self.path.rsplit("/", 1)[-1]

    def label(self, digest: str | None) -> str:
        """How the model is written in a series key (never with a "/": keys split on it).

        A file is named by its file name alone, so the same archive measured from two
        directories (a CI checkout and a worker's model path) lands in one series when
        its fingerprint agrees. `digest` None: what the API predicts before the host that
        measures has fingerprinted the model (the result's key then replaces it).
        """
        base = f"file:{self.archive_name}" if self.kind == "pt2" else self.text
        return f"{base}@{digest}" if digest else base


def parse(text: object, *, allow_absolute: bool = False) -> ModelRef:
    """The model `text` names; raises ModelRefError saying why it names none."""
    if not isinstance(text, str) or not text:
        raise ModelRefError(f"{text!r} is not a model: expected {FORMS_HELP}")
    if text in BUILTIN_MODELS:
        return ModelRef("builtin", text)
    prefix, sep, rest = text.partition(":")
    if not sep:
        raise ModelRefError(f"{text!r} is not one of {', '.join(BUILTIN_MODELS)}; a model "
                            "of your own is package.module:factory, torchvision:NAME, "
                            "timm:NAME or file:PATH.pt2")
    if "://" in text or text.startswith(("http:", "https:")):
        raise ModelRefError(f"{text!r}: URLs are not models here (nothing is downloaded); "
                            "name a file on the host with file:PATH.pt2")
    if prefix == "file":
        return _parse_file(text, rest, allow_absolute=allow_absolute)
    if len(text) > MAX_REFERENCE:
        raise ModelRefError(f"{text[:40]!r}...: a model name has at most {MAX_REFERENCE} "
                            "characters")
    if prefix in HUB_PREFIXES:
        match = _HUB_RE.match(text)
        if match is None:
            raise ModelRefError(f"{text!r}: expected {prefix}:NAME with a name of letters, "
                                "digits, '_', '.' and '-'")
        kind: Kind = "torchvision" if prefix == "torchvision" else "timm"
        return ModelRef(kind, text, name=match.group(2))
    match = _FACTORY_RE.match(text)
    if match is None:
        raise ModelRefError(f"{text!r}: expected package.module:factory (Python names "
                            "separated by dots, one ':' before the factory)")
    attr = match.group(2)
    package = match.group(1).split(".", 1)[0]
    if not_a_model_package(package):
        raise ModelRefError(f"{text!r}: {package!r} is Python's own (the standard library "
                            "or a private module), not a package of models; name a factory "
                            "that your own package defines")
    if not _FACTORY_NAME_RE.match(attr):
        raise ModelRefError(f"{text!r}: the factory is one name defined in the module "
                            f"({attr!r} is an attribute path or a private name; write "
                            "package.module:factory)")
    return ModelRef("factory", text, module=match.group(1), attr=attr)


def not_a_model_package(package: str) -> bool:
    """Whether a top-level name is Python's own: a module of the standard library (or
    one built into the interpreter) or a private name (`__main__`, `_thread`). A function
    of those called with the batch size is a command, not a model (`subprocess:getoutput`
    ran one; `code:interact` opens a console), and it is importable everywhere a spec may
    be measured or reproduced, whatever the server lists."""
    return (package in sys.stdlib_module_names or package in sys.builtin_module_names
            or package.startswith("_"))


def _parse_file(text: str, path: str, *, allow_absolute: bool) -> ModelRef:
    absolute = path.startswith("/")
    if absolute and not allow_absolute:
        raise ModelRefError(f"{text!r}: name the archive relative to the worker's model "
                            "path (SPEEDWATCH_MODEL_PATH), not by an absolute path")
    if "\\" in path:
        raise ModelRefError(f"{text!r}: use '/' between directories")
    if not path.endswith(ARCHIVE_SUFFIX):
        raise ModelRefError(f"{text!r}: a model file is a torch.export archive ending in "
                            f"{ARCHIVE_SUFFIX}")
    segments = path[1:].split("/") if absolute else path.split("/")
    limit = MAX_LOCAL_PATH if absolute else MAX_REFERENCE
    if len(text) > limit:
        raise ModelRefError(f"{text[:40]!r}...: at most {limit} characters")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise ModelRefError(f"{text!r}: empty, '.' and '..' path parts are refused "
                                "(a model file stays inside the directories searched)")
        if not _SEGMENT_RE.match(segment):
            raise ModelRefError(f"{text!r}: path part {segment!r} may hold letters, digits, "
                                "'_', '.', '+' and '-', and not start with '.', '+' or '-'")
    if len(segments[-1]) > MAX_ARCHIVE_NAME:
        raise ModelRefError(f"{text!r}: the file name has at most {MAX_ARCHIVE_NAME} "
                            "characters")
    return ModelRef("pt2", text, path=path)


def check_digest(value: object) -> str:
    """A model digest as results carry it (12 lowercase hex); raises ModelRefError."""
    if not isinstance(value, str) or not _DIGEST_RE.match(value):
        raise ModelRefError(f"{value!r} is not {DIGEST_CHARS} lowercase hex digits")
    return value
