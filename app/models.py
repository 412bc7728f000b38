"""The ORM: what the service stores, and the invariants the database itself enforces.

Storage classes only; API shapes live in app/schemas.py so storage fields never leak.
Statuses are short strings with CHECK constraints (not native enums) so that SQLite and
PostgreSQL run the same migrations and adding a status is a one-line migration.

Shape of the data:
  project 1-n run n-1 environment;  run 1-n cell 1-1 result n-1 series n-1 project
  project 1-n sweep 1-n run (kind "sweep": one per version a sweep or bisect measured)
A result always belongs to a cell. Results measured elsewhere (POST /api/v1/results) get an
"ingest" run per project + revision + environment, and one cell per spec in it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

from benchmarks.result import Speedup

RUN_STATUSES = ("queued", "running", "done", "failed")
RUN_TERMINAL = ("done", "failed")
VERDICTS = ("pass", "regression", "inconclusive", "error")
CELL_STATUSES = ("queued", "running", "done", "failed", "skipped")
CELL_TERMINAL = ("done", "failed", "skipped")
RESULT_STATUSES = ("ok", "failed", "skipped")
TOKEN_SCOPES = ("read", "ci", "admin")
RUN_KINDS = ("triggered", "ingest", "confirm", "sweep")
SWEEP_KINDS = ("sweep", "bisect")
SWEEP_STATUSES = ("running", "done", "cancelled", "failed")
REGRESSION_STATUSES = ("open", "acknowledged", "resolved")
REGRESSION_ACTIVE = ("open", "acknowledged")
DELIVERY_STATUSES = ("pending", "delivered", "failed")
WEBHOOK_KINDS = ("json", "slack")
TIMING_MODES = ("graphs", "nographs")  # benchmarks.spec.TIMING_MODES

JSONType = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored with time zone on PostgreSQL and read back as aware UTC everywhere.

    SQLite drops the zone; without this, the same query would give naive datetimes on the
    embedded default and aware ones in production.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        if value is not None and dialect.name == "sqlite":
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # Detection policy (app.detection.policy.DetectionPolicy); NULL means the defaults.
    detection: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Environment(Base):
    """Software under test: requested pins (or a named interpreter) and what got installed.

    `content_hash` identifies the request (sorted, normalised pins or the interpreter name),
    which is also what a worker's cached virtualenv is keyed by.
    """

    __tablename__ = "environments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    pins: Mapped[list[str]] = mapped_column(JSONType, default=list)
    interpreter: Mapped[str | None] = mapped_column(String(64))
    # name -> version as last reported by a worker for this environment
    installed: Mapped[dict[str, str]] = mapped_column(JSONType, default=dict)
    # The last build of its cached venv a worker reported (workers.environments): host,
    # seconds, bytes on disk, what pip put into the venv itself; NULL: never built (no
    # pins, a named interpreter, or no result since builds were recorded).
    build: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Sweep(Base):
    """Runs across released versions of one package: a sweep measures every release in a
    range; a bisect measures releases between a good and a bad environment by binary
    search until it names the first slower one (app.services.sweeps, sweep_progress).

    Its runs have kind "sweep" and point back here (`runs.sweep_id`); their results are
    real measurements but never points of their series nor anyone's baseline, so a sweep
    of old releases cannot rewrite a project's history. `state` holds what a bisect has
    learnt so far (its steps, the range still in doubt, the answer).
    """

    __tablename__ = "sweeps"
    __table_args__ = (
        Index("ix_sweeps_project_id_id", "project_id", "id"),
        CheckConstraint(_in("kind", SWEEP_KINDS), name="kind"),
        CheckConstraint(_in("status", SWEEP_STATUSES), name="status"),
        CheckConstraint("max_runs >= 1", name="max_runs"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="running")
    # the package swept (a sweep), or the first one a bisect follows; PEP 503 normalised
    package: Mapped[str] = mapped_column(String(100))
    from_version: Mapped[str | None] = mapped_column(String(64))
    to_version: Mapped[str | None] = mapped_column(String(64))
    pre: Mapped[bool] = mapped_column(Boolean, default=False)
    # pins held fixed in every run (normalised name==version)
    holds: Mapped[list[str]] = mapped_column(JSONType, default=list)
    # a sweep: the releases it measures, oldest first, as read from the package index
    versions: Mapped[list[str]] = mapped_column(JSONType, default=list)
    matrix: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # the most versions (sweep) or steps (bisect) it may run
    max_runs: Mapped[int] = mapped_column(Integer)
    regression_id: Mapped[int | None] = mapped_column(
        ForeignKey("regressions.id", ondelete="SET NULL", use_alter=True), index=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    outcome: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    project: Mapped[Project] = relationship(lazy="joined", innerjoin=True)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("project_id", "idempotency_key"),
        Index("ix_runs_project_id_created_at", "project_id", "created_at"),
        Index("ix_runs_project_id_request_hash", "project_id", "request_hash"),
        # a revision's runs (`speedwatch report`, GET /api/v1/runs?revision=) without
        # walking the project's whole history
        Index("ix_runs_project_id_revision", "project_id", "revision"),
        Index("ix_runs_status", "status"),
        CheckConstraint(_in("status", RUN_STATUSES), name="status"),
        CheckConstraint(f"verdict IS NULL OR {_in('verdict', VERDICTS)}", name="verdict"),
        CheckConstraint(_in("kind", RUN_KINDS), name="kind"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    kind: Mapped[str] = mapped_column(String(16), default="triggered")
    revision: Mapped[str] = mapped_column(String(200))
    branch: Mapped[str | None] = mapped_column(String(200))
    trigger: Mapped[str] = mapped_column(String(32), default="api")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    verdict: Mapped[str | None] = mapped_column(String(16))
    reasons: Mapped[list[str]] = mapped_column(JSONType, default=list)
    # The client's Idempotency-Key, or "sha256:<request_hash>" when none was sent, so the
    # unique constraint also settles two identical requests racing each other.
    idempotency_key: Mapped[str] = mapped_column(String(200))
    request_hash: Mapped[str] = mapped_column(String(64))
    matrix: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # kind "confirm": the cell of a triggered run whose candidate regression this run
    # re-measures (app.services.confirmation); NULL for every other kind.
    confirms_cell_id: Mapped[int | None] = mapped_column(
        ForeignKey("cells.id", ondelete="CASCADE", use_alter=True), index=True)
    # kind "sweep": the sweep or bisect that made it; NULL for every other kind.
    sweep_id: Mapped[int | None] = mapped_column(
        ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    project: Mapped[Project] = relationship(lazy="joined", innerjoin=True)
    environment: Mapped[Environment] = relationship(lazy="joined", innerjoin=True)
    cells: Mapped[list[Cell]] = relationship(
        back_populates="run", order_by="Cell.id", cascade="all, delete-orphan",
        foreign_keys="Cell.run_id",
    )


class Cell(Base):
    """One matrix point of a run: the unit a worker claims, runs and reports."""

    __tablename__ = "cells"
    __table_args__ = (
        UniqueConstraint("run_id", "spec_hash"),
        Index("ix_cells_run_id_status", "run_id", "status"),
        Index("ix_cells_status_updated_at", "status", "updated_at"),
        # the reconciler's sweeps: cells not judged yet (a few, however long the history),
        # and the latest start of a queue's cells
        Index("ix_cells_unjudged", "run_id", postgresql_where="judgement IS NULL",
              sqlite_where="judgement IS NULL"),
        Index("ix_cells_queue_started_at", "queue", "started_at"),
        CheckConstraint(_in("status", CELL_STATUSES), name="status"),
        CheckConstraint("attempts >= 0", name="attempts"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    spec_hash: Mapped[str] = mapped_column(String(64))
    # Predicted from the requested device when queued; replaced by the result's key (which
    # carries the device class the worker actually ran on) when the result lands.
    series_key: Mapped[str] = mapped_column(String(300))
    queue: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    # Set once the cell's id was handed to the broker; NULL means "never enqueued" (broker
    # down at trigger time) and tells the reconciler / a retried trigger to enqueue it.
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The cell's verdict once judged ({"verdict", "reasons", "suspect"} or {"note"} for a
    # skip): a stored result never changes, so detection judges each cell once.
    judgement: Mapped[dict[str, Any] | None] = mapped_column(JSONType)

    run: Mapped[Run] = relationship(back_populates="cells", foreign_keys=[run_id])
    result: Mapped[Result | None] = relationship(back_populates="cell", uselist=False)


class Series(Base):
    """Everything that must stay equal for two results to compare, within one project.

    A series belongs to a project: two projects measuring the same matrix point keep two
    histories (one project's run is never another's baseline, nor its `latest`). The key
    (benchmarks.spec.series_key) holds every axis that changes what is measured; the axes
    are also parsed into columns for filters. The same key may exist in several projects.
    """

    __tablename__ = "series"
    __table_args__ = (
        UniqueConstraint("project_id", "key"),
        # lookups by key alone (a URL without ?project=, regressions ?series=) and the
        # keyset order of the series list (key, id)
        Index("ix_series_key_id", "key", "id"),
        Index("ix_series_model_backend", "model", "backend"),
        Index("ix_series_device_class", "device_class"),
        CheckConstraint(_in("timing_mode", TIMING_MODES), name="timing_mode"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(300))
    model: Mapped[str] = mapped_column(String(100))
    backend: Mapped[str] = mapped_column(String(50))
    weights: Mapped[str] = mapped_column(String(20))
    precision: Mapped[str] = mapped_column(String(20))
    batch_size: Mapped[int] = mapped_column(Integer)
    shape_mode: Mapped[str] = mapped_column(String(20))
    device_class: Mapped[str] = mapped_column(String(100))
    threads: Mapped[int | None] = mapped_column(Integer)  # NULL: the library's default
    timing_mode: Mapped[str] = mapped_column(String(16))  # "graphs" | "nographs"
    # benchmarks.spec.measurement_options: "" when the spec has none
    options: Mapped[str] = mapped_column(String(300), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    project: Mapped[Project] = relationship(lazy="joined", innerjoin=True)


class Result(Base):
    """One measured (or failed/skipped) cell: raw samples, summaries, speedup CI, evidence."""

    __tablename__ = "results"
    __table_args__ = (
        Index("ix_results_series_id_created_at", "series_id", "created_at"),
        # detection's "latest earlier result of this series" walks this backwards
        Index("ix_results_series_id_id", "series_id", "id"),
        # the points of each series (series_point()), newest last, with what a sparkline
        # and the "latest point" probe read: both are index-only scans of a few entries per
        # series, however long its history
        Index("ix_results_series_points", "series_id", "created_at", "id",
              postgresql_include=["status", "speedup"],
              postgresql_where="confirms_result_id IS NULL AND sweep_id IS NULL",
              sqlite_where="confirms_result_id IS NULL AND sweep_id IS NULL"),
        Index("ix_results_run_id", "run_id"),
        CheckConstraint(_in("status", RESULT_STATUSES), name="status"),
        CheckConstraint(
            "baseline_median_ms IS NULL OR baseline_median_ms > 0", name="baseline_median_pos"
        ),
        CheckConstraint(
            "candidate_median_ms IS NULL OR candidate_median_ms > 0", name="candidate_median_pos"
        ),
        CheckConstraint(
            "(baseline_p05_ms IS NULL OR baseline_p05_ms > 0)"
            " AND (baseline_p95_ms IS NULL OR baseline_p95_ms > 0)"
            " AND (candidate_p05_ms IS NULL OR candidate_p05_ms > 0)"
            " AND (candidate_p95_ms IS NULL OR candidate_p95_ms > 0)",
            name="percentiles_pos",
        ),
        CheckConstraint(
            "speedup IS NULL OR (speedup > 0 AND ci_low > 0 AND ci_low <= speedup"
            " AND speedup <= ci_high)",
            name="speedup_ci",
        ),
        CheckConstraint("status <> 'ok' OR speedup IS NOT NULL", name="ok_has_speedup"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cell_id: Mapped[int] = mapped_column(ForeignKey("cells.id", ondelete="CASCADE"), unique=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    series_id: Mapped[int] = mapped_column(ForeignKey("series.id"))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    schema_version: Mapped[int] = mapped_column(Integer)
    # sha256 of the canonical document: an identical re-POST is recognised as a retry.
    document_hash: Mapped[str] = mapped_column(String(64))
    baseline_samples_ms: Mapped[list[list[float]]] = mapped_column(JSONType, default=list)
    candidate_samples_ms: Mapped[list[list[float]]] = mapped_column(JSONType, default=list)
    samples_per_side: Mapped[int | None] = mapped_column(Integer)
    baseline_median_ms: Mapped[float | None] = mapped_column(Float)
    baseline_iqr_ms: Mapped[float | None] = mapped_column(Float)
    baseline_p05_ms: Mapped[float | None] = mapped_column(Float)
    baseline_p95_ms: Mapped[float | None] = mapped_column(Float)
    baseline_mean_ms: Mapped[float | None] = mapped_column(Float)
    candidate_median_ms: Mapped[float | None] = mapped_column(Float)
    candidate_iqr_ms: Mapped[float | None] = mapped_column(Float)
    candidate_p05_ms: Mapped[float | None] = mapped_column(Float)
    candidate_p95_ms: Mapped[float | None] = mapped_column(Float)
    candidate_mean_ms: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    ci_confidence: Mapped[float | None] = mapped_column(Float)
    ci_method: Mapped[str | None] = mapped_column(String(64))
    accuracy_rel_l2: Mapped[float | None] = mapped_column(Float)
    accuracy_max_abs: Mapped[float | None] = mapped_column(Float)
    accuracy_tolerance: Mapped[float | None] = mapped_column(Float)
    accuracy_passed: Mapped[bool | None] = mapped_column(Boolean)
    compile_seconds: Mapped[float | None] = mapped_column(Float)
    peak_memory_bytes: Mapped[dict[str, int]] = mapped_column(JSONType, default=dict)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    installed_versions: Mapped[dict[str, str]] = mapped_column(JSONType, default=dict)
    started_at: Mapped[str | None] = mapped_column(String(40))  # as reported (ISO 8601)
    finished_at: Mapped[str | None] = mapped_column(String(40))
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    stderr_tail: Mapped[str | None] = mapped_column(Text)
    # Set on a re-measure made to confirm a candidate regression (a result of a "confirm"
    # run): the result it re-measured. Such results are real measurements but never points
    # of their series, nor anyone's baseline (see app.services.series, detection).
    confirms_result_id: Mapped[int | None] = mapped_column(
        ForeignKey("results.id", ondelete="CASCADE"))
    # Set on a result of a sweep's or bisect's run (kind "sweep"): measured at an old or
    # intermediate release on purpose, so, like a re-measure, no point of its series.
    sweep_id: Mapped[int | None] = mapped_column(
        ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    cell: Mapped[Cell] = relationship(back_populates="result")
    series: Mapped[Series] = relationship()

    def stored_speedup(self) -> Speedup | None:
        """The speedup and interval as the harness reported them, from this row's columns;
        None where the row has no complete interval (a failed cell, an old partial row).
        The one place a stored interval is read back (documents, references, bisects)."""
        if self.speedup is None or self.ci_low is None or self.ci_high is None:
            return None
        return Speedup(self.speedup, self.ci_low, self.ci_high,
                       self.ci_confidence or 0.95, self.ci_method or "unknown")


def series_point() -> ColumnElement[bool]:
    """Results that are points of their series' history (and so may be a baseline): not a
    confirmation's re-measure, not a sweep's or bisect's measurement of another release."""
    return (Result.confirms_result_id.is_(None)) & (Result.sweep_id.is_(None))


class ApiToken(Base):
    """A bearer token; only its sha256 is stored, the plaintext is shown once at creation."""

    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint("name <> ''", name="name_not_empty"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[str]] = mapped_column(JSONType, default=list)
    # Names of the projects it may touch; NULL (or empty): every project. Names rather than
    # ids, so a token can be made for a project before its first run creates it.
    projects: Mapped[list[str] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Regression(Base):
    """A speedup drop (or accuracy loss) in one series, from the run that showed it until the
    series recovers against the same baseline.

    At most one regression per series and project is active (open or acknowledged): a
    partial unique index says so, so two runs finishing at once cannot open two.
    """

    __tablename__ = "regressions"
    __table_args__ = (
        Index("ix_regressions_one_active_per_series", "project_id", "series_id", unique=True,
              postgresql_where="status IN ('open', 'acknowledged')",
              sqlite_where="status IN ('open', 'acknowledged')"),
        Index("ix_regressions_project_id_status", "project_id", "status"),
        Index("ix_regressions_status", "status"),
        CheckConstraint(_in("status", REGRESSION_STATUSES), name="status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    series_id: Mapped[int] = mapped_column(ForeignKey("series.id", ondelete="CASCADE"))
    opened_by_run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    opened_by_result_id: Mapped[int] = mapped_column(
        ForeignKey("results.id", ondelete="CASCADE"), unique=True)
    baseline_result_id: Mapped[int | None] = mapped_column(
        ForeignKey("results.id", ondelete="SET NULL"))
    baseline_kind: Mapped[str] = mapped_column(String(16))
    baseline_description: Mapped[str] = mapped_column(Text)
    baseline_speedup: Mapped[float | None] = mapped_column(Float)
    threshold: Mapped[float] = mapped_column(Float)
    resolved_by_result_id: Mapped[int | None] = mapped_column(
        ForeignKey("results.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16), default="open")
    # relative speedup change (new / baseline - 1); NULL for an accuracy-only regression
    magnitude: Mapped[float | None] = mapped_column(Float)
    evidence: Mapped[str] = mapped_column(Text, default="")
    reasons: Mapped[list[str]] = mapped_column(JSONType, default=list)
    acknowledged_by: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    acknowledged_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    project: Mapped[Project] = relationship(lazy="joined", innerjoin=True)
    series: Mapped[Series] = relationship(lazy="joined", innerjoin=True)


class WebhookDelivery(Base):
    """One notification of one regression event to one webhook, with its last attempt."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_regression_id", "regression_id"),
        CheckConstraint(_in("status", DELIVERY_STATUSES), name="status"),
        CheckConstraint(_in("kind", WEBHOOK_KINDS), name="kind"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    regression_id: Mapped[int] = mapped_column(ForeignKey("regressions.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(32))  # "opened" | "resolved"
    url: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    # every attempt: {"attempt", "at", "status_code", "error"}
    attempts_log: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class Worker(Base):
    """A worker process as it announces itself: which queues it consumes, on which host and
    GPUs, with which named interpreters, and when it last said so.

    The reconciler decides "no worker consumes queue X" from these heartbeats instead of
    inferring it from cells that did not start (a broker outage stops cells, not workers),
    and the API refuses an interpreter no worker announces. A row is the worker's own
    account: it writes it at start, on every heartbeat, and at a clean stop.
    """

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # Celery's node name (`speedwatch-cpu@host`): unique among live workers, reused by a
    # worker restarted under the same name, which then takes over its row.
    name: Mapped[str] = mapped_column(String(200), unique=True)
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[list[str]] = mapped_column(JSONType, default=list)
    # Names only (SPEEDWATCH_INTERPRETERS keys): the paths are the worker's business.
    interpreters: Mapped[list[str]] = mapped_column(JSONType, default=list)
    # [{"index", "name", "device_class", "memory_total_bytes"}] from NVML; [] on a CPU host.
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    concurrency: Mapped[int] = mapped_column(Integer, default=1)
    version: Mapped[str] = mapped_column(String(64), default="")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    # Set by a clean shutdown; a worker that was killed keeps NULL and goes stale instead.
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
