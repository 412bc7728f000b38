"""The project file: what `speedwatch submit` sends for this repository, written down once.

`speedwatch.toml` at the repository's root (or a `[tool.speedwatch]` table in its
pyproject.toml) names the project, the server, the environment, the matrix, the timing
and the detection thresholds, so that a CI step is `speedwatch submit --wait` with the
token in SPEEDWATCH_TOKEN. Every flag overrides the file; environment variables that
flags read (SPEEDWATCH_URL) count as flags. Example, every key optional:

    project = "vision"
    url = "http://speedwatch.internal:8000"
    pins = ["onnxruntime==1.22.0"]          # or: interpreter = "trt-10"

    [matrix]
    models = ["mypkg.nets:build", "file:nets/small.pt2"]
    backends = ["onnxruntime", "inductor"]
    weights = ["constant", "tensor"]
    precisions = ["fp32"]
    batch_sizes = [1, 8]
    shape_modes = ["static"]
    device = "cpu"
    threads = 1
    sides = "split"                          # image_size and width: built-in models only

    [timing]
    processes = 3
    max_processes = 6
    budget_seconds = 30                      # any timing flag, by its field's name:
                                             # rounds, warmup_iters, cuda_graphs, builds,
                                             # ... (`speedwatch submit --help`)
    [thresholds]
    threshold = 0.03
    series = { "KEY" = 0.05 }

Where it is looked for: `--config PATH`, else `speedwatch.toml`, then a pyproject.toml
with a `[tool.speedwatch]` table, in the working directory and then each parent up to the
repository's root (the first directory holding `.git`). No file is no error: the flags
(and the server's defaults) say everything.

The thresholds are the project's detection policy, which only an admin token may change:
`speedwatch policy set` applies the file's (flags override them), and `submit` warns when
the server's policy differs from the file, since a CI token cannot change it.

The revision defaults to the CI's commit variable (GITHUB_SHA, CI_COMMIT_SHA, ...) or
`git rev-parse HEAD`, the branch likewise: a CI step names neither.

A token is refused in the file: it belongs in a CI secret, not in the repository.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import tomllib
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from benchmarks.timing_policy import timing_fields, user_timing_fields
from benchmarks.timing_schema import optional_timing_field, timing_model

FILE_NAME = "speedwatch.toml"
PYPROJECT = "pyproject.toml"
# (revision variable, branch variables) of common CI systems, in the order they are read
CI_REVISION_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "CIRCLE_SHA1",
                         "GIT_COMMIT")
CI_BRANCH_VARIABLES = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME",
                       "BUILDKITE_BRANCH", "CIRCLE_BRANCH", "GIT_BRANCH")


class ProjectFileError(Exception):
    """A project file that cannot be used, or a value nobody gave; the message is one line."""


def _listify(value: Any) -> Any:
    """`models = "resnet50"` means `models = ["resnet50"]`."""
    return [value] if isinstance(value, (str, int)) and not isinstance(value, bool) else value


Strings = Annotated[list[Annotated[str, Field(min_length=1)]], BeforeValidator(_listify)]
Ints = Annotated[list[int], BeforeValidator(_listify)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class MatrixTable(_Table):
    models: Strings | None = None
    backends: Strings | None = None
    weights: Strings | None = None
    precisions: Strings | None = None
    batch_sizes: Ints | None = None
    shape_modes: Strings | None = None
    device: str | None = None
    image_size: int | None = None
    width: int | None = None
    threads: int | None = None
    sides: Literal["paired", "split"] | None = None


# The timing fields a project file may set: every field a user may set (each also a flag
# and a field of the API's request); their types, bounds and vocabularies are the fields'
# own (benchmarks.timing_policy.TimingPolicy).
FILE_TIMING_FIELDS = user_timing_fields()


if TYPE_CHECKING:
    class TimingTable(_Table):
        """[timing]: FILE_TIMING_FIELDS of benchmarks.timing_policy.TimingPolicy, each optional."""
else:
    TimingTable = timing_model(
        "TimingTable", _Table,
        lambda kind, _default, knob: optional_timing_field(kind, knob, described=False),
        module=__name__, names=FILE_TIMING_FIELDS)


class ThresholdsTable(_Table):
    threshold: float | None = None
    series: dict[str, float] = Field(default_factory=dict)


class FileContents(_Table):
    project: str | None = None
    url: str | None = None
    pins: Strings | None = None
    interpreter: str | None = None
    matrix: MatrixTable = Field(default_factory=MatrixTable)
    timing: TimingTable = Field(default_factory=TimingTable)
    thresholds: ThresholdsTable = Field(default_factory=ThresholdsTable)


# Numbers a file may write as integers (`budget_seconds = 30`) where a float is meant.
_INT_FIELDS_AS_FLOAT = {("timing", name) for name, kind, _d, _k in timing_fields()
                        if kind is float} | {("thresholds", "threshold")}


@dataclass
class ProjectFile:
    """A loaded project file (`path` None: there was none, every value is None)."""

    path: Path | None = None
    contents: FileContents = field(default_factory=FileContents)

    @property
    def root(self) -> Path:
        """Where revision and branch are read from git: the file's directory, else here."""
        return self.path.parent if self.path is not None else Path.cwd()

    def value(self, key: str) -> Any:
        """The file's value at a dotted key ("matrix.models"), None when it has none."""
        node: Any = self.contents
        for part in key.split("."):
            node = getattr(node, part, None)
            if node is None:
                return None
        return node

    def pick(self, key: str, given: Any) -> Any:
        """The flag's value when given (a non-empty list, or anything not None), else the
        file's; lists come back as strings, as the repeatable flags give them."""
        if given is not None and given != []:
            return given
        value = self.value(key)
        if isinstance(value, list):
            return [str(v) for v in value]
        return value

    def environment(self, pins: list[str] | None,
                    interpreter: str | None) -> tuple[list[str] | None, str | None]:
        """Pins or an interpreter: flags for either replace the file's environment whole
        (an environment is one or the other, never a mix of the file's and the flags')."""
        if pins or interpreter:
            return pins, interpreter
        return self.pick("pins", None), self.contents.interpreter


def find(start: Path | None = None) -> Path | None:
    """The project file for `start` (default: the working directory), or None."""
    directory = (start or Path.cwd()).resolve()
    while True:
        candidate = directory / FILE_NAME
        if candidate.is_file():
            return candidate
        pyproject = directory / PYPROJECT
        if pyproject.is_file() and _has_tool_table(pyproject):
            return pyproject
        if (directory / ".git").exists() or directory.parent == directory:
            return None
        directory = directory.parent


def _has_tool_table(path: Path) -> bool:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # not ours to judge: it is only used when it has our table
    tool = data.get("tool")
    return isinstance(tool, dict) and "speedwatch" in tool


def load(config: Path | None = None) -> ProjectFile:
    """The project file named by `config`, else the one `find` finds, else an empty one.
    Raises ProjectFileError with one line naming the file and the key."""
    path = config if config is not None else find()
    if path is None:
        return ProjectFile()
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProjectFileError(f"--config: {shown} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProjectFileError(f"{shown}: cannot be read ({exc})") from None
    try:
        data: Any = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProjectFileError(f"{shown}: not valid TOML: {exc}") from None
    prefix = ""
    if path.name == PYPROJECT:
        tool = data.get("tool")
        if not isinstance(tool, dict) or not isinstance(tool.get("speedwatch"), dict):
            raise ProjectFileError(f"{shown}: has no [tool.speedwatch] table")
        data, prefix = tool["speedwatch"], "tool.speedwatch."
    if isinstance(data, Mapping) and "token" in data:
        raise ProjectFileError(f"{shown}: {prefix}token: a token does not belong in a file "
                               "of the repository; set SPEEDWATCH_TOKEN (a CI secret)")
    try:
        contents = FileContents.model_validate(_floats(data))
    except ValidationError as exc:
        raise ProjectFileError(f"{shown}: {_first_error(exc, prefix)}") from None
    return ProjectFile(path, contents)


def _floats(data: Any) -> Any:
    """Integers where the file means a number of seconds or a fraction (`budget_seconds =
    30`): TOML tells 30 from 30.0, strict validation would refuse the first."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for table, key in _INT_FIELDS_AS_FLOAT:
        inner = out.get(table)
        if isinstance(inner, dict) and type(inner.get(key)) is int:
            out[table] = {**inner, key: float(inner[key])}
    thresholds = out.get("thresholds")
    if isinstance(thresholds, dict) and isinstance(thresholds.get("series"), dict):
        out["thresholds"] = {**out.get("thresholds", {}), "series": {
            k: float(v) if type(v) is int else v for k, v in thresholds["series"].items()}}
    return out


def _first_error(exc: ValidationError, prefix: str) -> str:
    error = exc.errors()[0]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    loc = prefix + loc.lstrip(".")
    if error["type"] == "extra_forbidden":
        parent = _model_at(error["loc"][:-1])
        known = ", ".join(parent.model_fields) if parent is not None else ""
        return f"{loc}: unknown key" + (f" (known: {known})" if known else "")
    message = str(error["msg"])
    return f"{loc}: {message}" if loc else message


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = FileContents
    for part in loc:
        annotation = model.model_fields.get(str(part))
        target = getattr(annotation, "annotation", None) if annotation is not None else None
        if not (isinstance(target, type) and issubclass(target, BaseModel)):
            return None
        model = target
    return model


# ---- revision and branch ------------------------------------------------------------------

def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and text else None


def revision(given: str | None, root: Path) -> str:
    """The revision under test: the flag, the CI's commit variable, or git's HEAD."""
    if given:
        return given
    for name in CI_REVISION_VARIABLES:
        if os.environ.get(name):
            return os.environ[name]
    head = _git(root, "rev-parse", "HEAD")
    if head is None:
        raise ProjectFileError("--revision: not given, and neither a CI variable ("
                               + ", ".join(CI_REVISION_VARIABLES) + ") nor a git checkout "
                               "names one")
    return head


def branch(given: str | None, root: Path) -> str | None:
    """The branch label: the flag, the CI's branch variable, or git's current branch."""
    if given:
        return given
    for name in CI_BRANCH_VARIABLES:
        if os.environ.get(name):
            return os.environ[name]
    current = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    return None if current in (None, "HEAD") else current


def required(value: Any, flag: str, key: str, env: str | None = None) -> Any:
    """`value`, or ProjectFileError saying every way it could have been given."""
    if value is None or value == "":
        ways = [f"pass {flag}"] + ([f"set {env}"] if env else []) + \
            [f"put `{key}` in {FILE_NAME}"]
        raise ProjectFileError(f"{flag}: not given ({', or '.join(ways)})")
    return value


# ---- thresholds ---------------------------------------------------------------------------

def thresholds_note(file: ProjectFile, server_policy: Mapping[str, Any]) -> str | None:
    """A warning when the file's thresholds are not the project's stored policy (which a
    CI token cannot change), or None when they agree or the file has none."""
    wanted = file.contents.thresholds
    differs = []
    if wanted.threshold is not None and server_policy.get("threshold") != wanted.threshold:
        differs.append(f"threshold {server_policy.get('threshold')} on the server, "
                       f"{wanted.threshold} in the file")
    stored = server_policy.get("series_thresholds") or {}
    if wanted.series and any(stored.get(k) != v for k, v in wanted.series.items()):
        differs.append("series thresholds differ")
    if not differs:
        return None
    where = file.path.name if file.path is not None else FILE_NAME
    return (f"{where}: {'; '.join(differs)}: an admin applies the file's with "
            "`speedwatch policy set` (a CI token cannot change the policy)")


def warn_about_thresholds(file: ProjectFile, url: str, token: str | None, project: str) -> None:
    """Print `thresholds_note` as a warning on stderr when it has one. Best effort: a
    project not created yet, a server that cannot be reached or a token that may not read
    is the trigger's to report, not this note's."""
    wanted = file.contents.thresholds
    if wanted.threshold is None and not wanted.series:
        return
    from urllib.parse import quote

    import typer

    from cli.client import Api, ClientError

    api = Api(url, token, timeout_s=10.0)
    try:
        stored = api._call("GET", f"/api/v1/projects/{quote(project, safe='/')}/detection")
    except ClientError:
        stored = None
    finally:
        api.close()
    policy = stored.get("policy") if isinstance(stored, dict) else None
    note = thresholds_note(file, policy) if isinstance(policy, dict) else None
    if note is not None:
        typer.echo(f"warning: {note}", err=True)
