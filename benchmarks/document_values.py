"""The bounds and value types a result document is checked with: every string safe to
show, every timestamp ISO 8601, every open-ended value bounded JSON, and the two kinds of
part (closed: known keys only; open: known keys and room for a newer writer's)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from benchmarks import text_safety
from benchmarks.schema_version import RESULT_SCHEMA_VERSION

# Rounds per side, over all processes: the default timing writes at most 2000 rounds per
# GPU process and 8 processes (16,000), 200 per CPU process and 6 processes.
MAX_ROUNDS = 1_000_000


# Samples in one round (`iters_per_round`; the API allows up to 10,000).
MAX_ROUND_SAMPLES = 100_000


# Samples of one side in all: a bound on memory whatever the shape of the rounds.
MAX_SAMPLES_PER_SIDE = 5_000_000


MAX_PROCESSES = 64  # evidence.processes entries (the API allows 32 processes)


# A speedup is the ratio of the document's own medians (benchmarks.runner and isolation write
# exactly that; 165 stored documents agree to the last digit): beyond this, it contradicts them.
SPEEDUP_TOLERANCE = 1e-6


MAX_NAME = 200  # identifiers: keys, package names, versions, methods


MAX_LINE = 1_000  # one line of description: platform, CPU and GPU names, hostnames


MAX_PATH = 4_096  # a filesystem path


MAX_TEXT = 10_000  # free text: reasons, error messages, strings in open-ended evidence


MAX_STDERR_TAIL = 16_384  # benchmarks.isolation keeps 4 KiB of a child's output


MAX_SERIES_KEY = 300  # the store's column


MAX_TIMESTAMP = 40  # ISO 8601; the store's column


MAX_OPEN_KEYS = 256  # keys of evidence, fingerprint, spec options and other open maps


MAX_DISTRIBUTIONS = 4_096  # installed distributions one environment's identity lists


MAX_JSON_DEPTH = 8  # nesting of an open-ended value (a scalar is depth 0)


MAX_JSON_ITEMS = 1_000  # elements of a list, or keys of a map, inside an open-ended value


INT64 = 2**63 - 1  # integers a reader in any language (and PostgreSQL's bigint) can hold


# log of a ratio's half-width: exp() of more overflows a float (the verdict takes expm1)
MAX_LOG_HALF_WIDTH = 700.0


def _safe_line(value: str) -> str:
    why = text_safety.problem(value, line=True)
    if why is not None:
        raise ValueError(why)
    return value


def _safe_text(value: str) -> str:
    why = text_safety.problem(value, line=False)
    if why is not None:
        raise ValueError(why)
    return value


SafeLine, SafeText = AfterValidator(_safe_line), AfterValidator(_safe_text)


Name = Annotated[str, Field(strict=True, max_length=MAX_NAME), SafeLine]


Line = Annotated[str, Field(strict=True, max_length=MAX_LINE), SafeLine]


FilePath = Annotated[str, Field(strict=True, max_length=MAX_PATH), SafeLine]


Text = Annotated[str, Field(strict=True, max_length=MAX_TEXT), SafeText]


def _iso_timestamp(value: str) -> str:
    """An ISO 8601 time, as the runner writes (datetime.isoformat); kept as written."""
    from datetime import datetime

    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not an ISO 8601 time") from None
    return value


Timestamp = Annotated[str, Field(strict=True, max_length=MAX_TIMESTAMP),
                      AfterValidator(_iso_timestamp)]


SeriesKey = Annotated[str, Field(strict=True, min_length=1, max_length=MAX_SERIES_KEY),
                      SafeLine]


DeviceClass = Annotated[str, Field(strict=True, min_length=1, max_length=100),  # the column
                        SafeLine]


StderrTail = Annotated[str, Field(strict=True, max_length=MAX_STDERR_TAIL), SafeText]


Method = Annotated[str, Field(strict=True, min_length=1, max_length=64),  # the column
                   SafeLine]


# strict: a bool or a string is not a number; allow_inf_nan=False: NaN and +-infinity are
# refused (Python's json module reads them, and 1e400, from a body); an integer no float
# holds (10**400) fails as "not a valid number", which errors.py spells out.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]


NonNegative = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]


Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]


Fraction = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, lt=1)]


Int = Annotated[int, Field(strict=True, ge=-INT64 - 1, le=INT64)]


Count = Annotated[int, Field(strict=True, ge=0, le=INT64)]


LogHalfWidth = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0,
                                      le=MAX_LOG_HALF_WIDTH)]


Side = Literal["baseline", "candidate"]


TimingMode = Literal["graphs", "nographs"]


def _json_error(loc: tuple[int | str, ...], kind: str, message: str, value: Any) -> ValidationError:
    return ValidationError.from_exception_data("BoundedJson", [InitErrorDetails(
        type=PydanticCustomError(kind, message), loc=loc, input=value)])


def _check_json(value: Any, loc: tuple[int | str, ...], depth: int) -> None:
    """Refuse what is not a bounded JSON value, naming the place inside it; never recurses
    deeper than MAX_JSON_DEPTH, whatever it is given."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -INT64 - 1 <= value <= INT64:
            raise _json_error(loc, "json_int_range", "integer outside the 64-bit range", value)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _json_error(loc, "finite_number", "Input should be a finite number", value)
        return
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise _json_error(loc, "json_string_too_long",
                              f"string longer than {MAX_TEXT} characters", value)
        why = text_safety.problem(value, line=False)
        if why is not None:
            raise _json_error(loc, "unsafe_text", why, value[:100])
        return
    if isinstance(value, (list, dict)):
        if depth >= MAX_JSON_DEPTH:
            raise _json_error(loc, "json_too_deep",
                              f"nested deeper than {MAX_JSON_DEPTH} levels", value)
        if len(value) > MAX_JSON_ITEMS:
            raise _json_error(loc, "json_too_long",
                              f"more than {MAX_JSON_ITEMS} items", value)
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_json(item, (*loc, i), depth + 1)
            return
        for key, item in value.items():
            if not isinstance(key, str) or len(key) > MAX_NAME:
                raise _json_error((*loc, str(key)[:MAX_NAME]), "json_key",
                                  f"keys are strings of at most {MAX_NAME} characters", key)
            why = text_safety.problem(key, line=True)
            if why is not None:
                raise _json_error(loc, "unsafe_key", f"a key {why}", key[:100])
            _check_json(item, (*loc, key), depth + 1)
        return
    raise _json_error(loc, "json_type", "not a JSON value", value)


def _bounded_json(value: Any) -> Any:
    _check_json(value, (), 0)
    return value


BoundedJson = Annotated[Any, PlainValidator(_bounded_json), WithJsonSchema({
    "description": f"any JSON value nested at most {MAX_JSON_DEPTH} levels: lists and maps "
                   f"of at most {MAX_JSON_ITEMS} items, strings of at most {MAX_TEXT} "
                   f"characters, finite numbers, 64-bit integers",
})]


NameMap = Annotated[dict[Name, Name], Field(max_length=MAX_OPEN_KEYS)]


ShortDigest = Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{12}$")]


def _version(value: int) -> int:
    if value != RESULT_SCHEMA_VERSION:
        raise ValueError(f"{value!r} is not supported (this server reads "
                         f"{RESULT_SCHEMA_VERSION})")
    return value


SchemaVersion = Annotated[int, Field(strict=True), AfterValidator(_version),
                          WithJsonSchema({"type": "integer", "const": RESULT_SCHEMA_VERSION})]


def _raise_at(loc: tuple[int | str, ...], kind: str, message: str, value: Any) -> None:
    """A model-level rule's error, placed on the field it is about."""
    raise ValidationError.from_exception_data("BenchResultDocument", [InitErrorDetails(
        type=PydanticCustomError(kind, message), loc=loc, input=value)])


class Closed(BaseModel):
    """A part whose keys are all known: an unknown key is a mistake, refused."""

    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    """A part with known keys (typed) and room for more: any other key holds a bounded JSON
    value, at most MAX_OPEN_KEYS keys in all. Writers add evidence faster than readers learn
    it; refusing new keys would refuse a newer writer's documents."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"maxProperties": MAX_OPEN_KEYS})
    __pydantic_extra__: dict[str, BoundedJson] = Field(init=False)  # typed extra keys

    @model_validator(mode="before")
    @classmethod
    def _bounded_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if len(data) > MAX_OPEN_KEYS:
                raise ValueError(f"more than {MAX_OPEN_KEYS} keys")
            long = next((k for k in data if isinstance(k, str) and len(k) > MAX_NAME), None)
            if long is not None:
                raise ValueError(f"key {long[:40]!r}... is longer than {MAX_NAME} characters")
            for key in data:
                why = text_safety.problem(key, line=True) if isinstance(key, str) else None
                if why is not None:
                    raise ValueError(f"a key {why}")
        return data
