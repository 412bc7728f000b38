"""Shared pieces of the services: canonical hashes, get-or-create under concurrency, and the
validation of environments and result documents that both triggers and ingest rely on."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.config import Settings
from app.environment_policy import PinError, validate_pins
from app.errors import InvalidRequest
from app.models import Base, Environment, Project, Series
from app.schemas import EnvironmentIn
from benchmarks.result import BenchResult
from benchmarks.spec import BenchSpec, SpecError, model_digest_of, parse_series_key

M = TypeVar("M", bound=Base)


def canonical_hash(value: Any) -> str:
    """sha256 of the canonical JSON of `value` (sorted keys, no whitespace)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def spec_hash(spec: BenchSpec) -> str:
    return canonical_hash(spec.to_dict())


def get_or_create(
    session: Session, model: type[M], lookup: dict[str, Any], defaults: dict[str, Any] | None = None
) -> M:
    """Find the row by `lookup` (a unique key) or insert it; safe against a concurrent insert.

    The insert runs in a savepoint, so losing the race to another transaction only rolls back
    the savepoint and the winner's row is read instead.
    """
    found = session.scalars(select(model).filter_by(**lookup)).first()
    if found is not None:
        return found
    return create_or_get(session, model, lookup, defaults)


def create_or_get(
    session: Session, model: type[M], lookup: dict[str, Any], defaults: dict[str, Any] | None = None
) -> M:
    """Insert the row of `lookup` (a unique key), or read it where a concurrent transaction
    inserted it first: `get_or_create` for a caller that has just looked and not found it."""
    try:
        with session.begin_nested():
            created = model(**lookup, **(defaults or {}))
            session.add(created)
        return created
    except IntegrityError:
        return session.scalars(select(model).filter_by(**lookup)).one()


def get_or_create_project(session: Session, name: str) -> Project:
    return get_or_create(session, Project, {"name": name})


def canonical_environment(env: EnvironmentIn, settings: Settings) -> dict[str, Any]:
    """Validated, normalised environment: {"pins": sorted normalised pins, "interpreter"}.

    Pins go through the policy the workers apply too (app.environment_policy), so the API
    and the worker refuse exactly the same things (a pin refused here could never be
    installed there).
    """
    if env.interpreter is not None:
        return {"pins": [], "interpreter": env.interpreter}
    try:
        pins = validate_pins(env.pins or [], settings.env_allowlist)
    except PinError as exc:
        raise InvalidRequest("environment.pins", str(exc)) from None
    return {"pins": pins, "interpreter": None}


def get_or_create_environment(session: Session, canonical: dict[str, Any]) -> Environment:
    return get_or_create(
        session,
        Environment,
        {"content_hash": canonical_hash(canonical)},
        {"pins": canonical["pins"], "interpreter": canonical["interpreter"], "installed": {}},
    )


def get_or_create_series(session: Session, project_id: int, key: str) -> Series:
    """The project's series of `key` (a checked key), created with its axes on first use.

    Per project: another project's results under the same key are another history.
    """
    # every axis of the key (benchmarks.spec.SERIES_KEY_FIELDS) is a column
    return get_or_create(session, Series, {"project_id": project_id, "key": key},
                         parse_series_key(key))


def check_result_document(result: BenchResult, field: str = "result") -> tuple[BenchSpec, str]:
    """The result's spec and series key, after checking the key is the one its spec and
    fingerprint imply; raises InvalidRequest naming the field otherwise.

    The document's schema (benchmarks.result_schema) already refused wrong types and
    impossible numbers, or for a result a worker built from its processes,
    `BenchResult.check`; this adds what only the store cares about: a spec it could have
    measured, the key (a wrong one would file the point under another series) and finite
    accuracy figures (they become float columns).
    """
    try:
        spec = BenchSpec.from_dict(result.spec).validate()
    except (SpecError, TypeError) as exc:
        raise InvalidRequest(f"{field}.spec", str(exc)) from None
    if spec.child_side is not None:
        raise InvalidRequest(f"{field}.spec.options._side", "one side of a split measurement "
                             "is not a result: merge the processes of both sides first")
    try:
        parse_series_key(result.series_key)
    except SpecError as exc:
        # the message names the field already ("series_key: ..."); say it once
        raise InvalidRequest(f"{field}.series_key",
                             str(exc).removeprefix("series_key: ")) from None
    device_class = result.fingerprint.get("device_class")
    if device_class is None:
        if result.status == "ok":
            raise InvalidRequest(
                f"{field}.fingerprint.device_class", "required for a result with status 'ok'"
            )
        # A cell that failed before the fingerprint was taken still names its device class
        # in the key; everything else in the key must follow from the spec.
        device_class = str(parse_series_key(result.series_key)["device_class"])
    if not isinstance(device_class, str) or not device_class:
        raise InvalidRequest(f"{field}.fingerprint.device_class", "must be a non-empty string")
    try:
        # A model of the user's is named in the key with the digest the worker computed.
        digest = model_digest_of(result.fingerprint)
    except SpecError as exc:
        raise InvalidRequest(f"{field}.fingerprint.model.digest",
                             str(exc).removeprefix("fingerprint.model.digest: ")) from None
    expected = spec.series_key(device_class, result.timing_mode(), model_digest=digest)
    if result.series_key != expected:
        raise InvalidRequest(
            f"{field}.series_key",
            f"{result.series_key!r} does not match its spec and fingerprint ({expected!r})",
        )
    if result.accuracy is not None:
        for name in ("rel_l2", "max_abs", "tolerance"):
            value = getattr(result.accuracy, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InvalidRequest(
                    f"{field}.accuracy.{name}", f"{value!r} is not a non-negative number"
                )
    for name in ("compile_seconds", "duration_seconds"):
        value = getattr(result, name)
        if value is not None and (
            not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
        ):
            raise InvalidRequest(f"{field}.{name}", f"{value!r} is not a non-negative number")
    return spec, expected


def release_connection(session: Session) -> None:
    """End the session's read-only transaction, so that its connection goes back to the
    pool before the caller waits on something else (a package index, a broker). A request
    that waits while holding one can take the pool from everyone else. Refuses a session
    with changes not yet flushed: committing them here would be a surprise."""
    if session.new or session.dirty or session.deleted:
        raise RuntimeError("release_connection: the session has unflushed changes")
    session.commit()
