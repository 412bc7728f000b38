"""API shapes shared by every resource: strict request models, public response models,
the checks on names and labels, and the error body."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from benchmarks import model_ref
from benchmarks.spec import (
    ALL_OPT_LEVELS,
    BACKENDS,
    PRECISIONS,
    SHAPE_MODES,
    WEIGHTS,
)


class StrictModel(BaseModel):
    """A request body: unknown fields refused, and every value of its JSON type (strict):
    "0.5" or true is no number, "yes", "true" or 1 no boolean, "3" no integer. Coercing
    them let a typo pass as a value nobody sent (a string "false" read as true)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class PublicModel(BaseModel):
    model_config = ConfigDict(from_attributes=True)


def _one_of(allowed: tuple[str, ...]) -> AfterValidator:
    """Restrict a string to `allowed`, with a message that lists them."""

    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
        return value

    return AfterValidator(check)


def _enum(allowed: tuple[str, ...]) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "enum": list(allowed)})


def _model_reference(value: str) -> str:
    """A model by a form the API accepts (benchmarks.model_ref): syntax only, here; whether
    a factory's package may be imported is the server's setting (expand_matrix), whether
    it imports is only known to the worker that measures it (a skipped cell says why)."""
    try:
        model_ref.parse(value)
    except model_ref.ModelRefError as exc:
        raise ValueError(str(exc)) from None
    return value


ModelName = Annotated[
    str, AfterValidator(_model_reference),
    WithJsonSchema({
        "type": "string", "maxLength": model_ref.MAX_REFERENCE,
        "pattern": model_ref.API_PATTERN,
        "description": f"{model_ref.FORMS_HELP}: a factory's package must be one the server "
                       "lists (SPEEDWATCH_MODEL_PACKAGES); a file is relative to the worker's "
                       "model path (SPEEDWATCH_MODEL_PATH); nothing is downloaded",
        "examples": ["resnet50", "mypkg.nets:build", "torchvision:resnet18",
                     "file:nets/small.pt2"]})]


BackendName = Annotated[str, _one_of(BACKENDS), _enum(BACKENDS)]


WeightsName = Annotated[str, _one_of(WEIGHTS), _enum(WEIGHTS)]


PrecisionName = Annotated[str, _one_of(PRECISIONS), _enum(PRECISIONS)]


ShapeModeName = Annotated[str, _one_of(SHAPE_MODES), _enum(SHAPE_MODES)]


OptLevelName = Annotated[str, _one_of(ALL_OPT_LEVELS), _enum(ALL_OPT_LEVELS)]


# Ids are PostgreSQL `integer`s: a larger number in a path or cursor is a 422, not a 500.
ID_MAX = 2**31 - 1


# What a label may not hold: C0/C1 controls, and characters that make it display as
# something else (zero-width, bidi embeddings/overrides/isolates, line separators, BOM).
LABEL_FORBIDDEN = (r"\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                   r"\u2060-\u2069\ufeff")


_LABEL_FORBIDDEN_RE = re.compile(f"[{LABEL_FORBIDDEN}]")


def _plain_label(value: str) -> str:
    bad = _LABEL_FORBIDDEN_RE.search(value)
    if bad:
        raise ValueError(f"must not contain control, zero-width or bidi-override characters "
                         f"(U+{ord(bad.group()):04X} at position {bad.start()})")
    return value


Label = Annotated[str, Field(min_length=1, max_length=200,
                             json_schema_extra={"pattern": f"^[^{LABEL_FORBIDDEN}]+$"}),
                  AfterValidator(_plain_label)]


# Also checked by app.services.tokens for the projects a token is limited to (the CLI
# creates tokens without going through these models).
PROJECT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"


PROJECT_NAME_MAX = 100


ProjectName = Annotated[
    str, Field(min_length=1, max_length=PROJECT_NAME_MAX, pattern=PROJECT_NAME_PATTERN)
]


class FieldErrorPublic(BaseModel):
    field: str
    message: str


class ErrorPublic(BaseModel):
    detail: str
    errors: list[FieldErrorPublic] | None = None
