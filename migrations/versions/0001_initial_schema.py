"""initial schema: projects, environments, runs, cells, series, results, api_tokens

Revision ID: 0001
Revises:
Create Date: 2026-11-22 02:05:07.769602
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# JSONB on PostgreSQL (indexable, compact), plain JSON text on SQLite.
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("scopes", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("name <> ''", name=op.f("ck_api_tokens_name_not_empty")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("pins", JSON_TYPE, nullable=False),
        sa.Column("interpreter", sa.String(length=64), nullable=True),
        sa.Column("installed", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_environments")),
        sa.UniqueConstraint("content_hash", name=op.f("uq_environments_content_hash")),
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("name", name=op.f("uq_projects_name")),
    )
    op.create_table(
        "series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("backend", sa.String(length=50), nullable=False),
        sa.Column("weights", sa.String(length=20), nullable=False),
        sa.Column("precision", sa.String(length=20), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("shape_mode", sa.String(length=20), nullable=False),
        sa.Column("device_class", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_series")),
        sa.UniqueConstraint("key", name=op.f("uq_series_key")),
    )
    op.create_index("ix_series_device_class", "series", ["device_class"], unique=False)
    op.create_index("ix_series_model_backend", "series", ["model", "backend"], unique=False)
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("revision", sa.String(length=200), nullable=False),
        sa.Column("branch", sa.String(length=200), nullable=True),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("reasons", JSON_TYPE, nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("matrix", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('triggered', 'ingest')", name=op.f("ck_runs_kind")),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'done', 'failed')", name=op.f("ck_runs_status")
        ),
        sa.CheckConstraint(
            "verdict IS NULL OR verdict IN ('pass', 'regression', 'error')",
            name=op.f("ck_runs_verdict"),
        ),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.id"],
            name=op.f("fk_runs_environment_id_environments"),
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_runs_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint(
            "project_id", "idempotency_key", name=op.f("uq_runs_project_id_idempotency_key")
        ),
    )
    op.create_index(
        "ix_runs_project_id_created_at", "runs", ["project_id", "created_at"], unique=False
    )
    op.create_index(
        "ix_runs_project_id_request_hash", "runs", ["project_id", "request_hash"], unique=False
    )
    op.create_index("ix_runs_status", "runs", ["status"], unique=False)
    op.create_table(
        "cells",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("spec", JSON_TYPE, nullable=False),
        sa.Column("spec_hash", sa.String(length=64), nullable=False),
        sa.Column("series_key", sa.String(length=300), nullable=False),
        sa.Column("queue", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'done', 'failed', 'skipped')",
            name=op.f("ck_cells_status"),
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_cells_attempts")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_cells_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cells")),
        sa.UniqueConstraint("run_id", "spec_hash", name=op.f("uq_cells_run_id_spec_hash")),
    )
    op.create_index("ix_cells_run_id_status", "cells", ["run_id", "status"], unique=False)
    op.create_index("ix_cells_status_updated_at", "cells", ["status", "updated_at"], unique=False)
    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("document_hash", sa.String(length=64), nullable=False),
        sa.Column("baseline_samples_ms", JSON_TYPE, nullable=False),
        sa.Column("candidate_samples_ms", JSON_TYPE, nullable=False),
        sa.Column("samples_per_side", sa.Integer(), nullable=True),
        sa.Column("baseline_median_ms", sa.Float(), nullable=True),
        sa.Column("baseline_iqr_ms", sa.Float(), nullable=True),
        sa.Column("baseline_p05_ms", sa.Float(), nullable=True),
        sa.Column("baseline_p95_ms", sa.Float(), nullable=True),
        sa.Column("baseline_mean_ms", sa.Float(), nullable=True),
        sa.Column("candidate_median_ms", sa.Float(), nullable=True),
        sa.Column("candidate_iqr_ms", sa.Float(), nullable=True),
        sa.Column("candidate_p05_ms", sa.Float(), nullable=True),
        sa.Column("candidate_p95_ms", sa.Float(), nullable=True),
        sa.Column("candidate_mean_ms", sa.Float(), nullable=True),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("ci_low", sa.Float(), nullable=True),
        sa.Column("ci_high", sa.Float(), nullable=True),
        sa.Column("ci_confidence", sa.Float(), nullable=True),
        sa.Column("ci_method", sa.String(length=64), nullable=True),
        sa.Column("accuracy_rel_l2", sa.Float(), nullable=True),
        sa.Column("accuracy_max_abs", sa.Float(), nullable=True),
        sa.Column("accuracy_tolerance", sa.Float(), nullable=True),
        sa.Column("accuracy_passed", sa.Boolean(), nullable=True),
        sa.Column("compile_seconds", sa.Float(), nullable=True),
        sa.Column("peak_memory_bytes", JSON_TYPE, nullable=False),
        sa.Column("evidence", JSON_TYPE, nullable=False),
        sa.Column("fingerprint", JSON_TYPE, nullable=False),
        sa.Column("installed_versions", JSON_TYPE, nullable=False),
        sa.Column("started_at", sa.String(length=40), nullable=True),
        sa.Column("finished_at", sa.String(length=40), nullable=True),
        sa.Column("duration_seconds", sa.Float(), nullable=True),
        sa.Column("stderr_tail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status <> 'ok' OR speedup IS NOT NULL", name=op.f("ck_results_ok_has_speedup")
        ),
        sa.CheckConstraint("status IN ('ok', 'failed', 'skipped')", name=op.f("ck_results_status")),
        sa.CheckConstraint(
            "(baseline_p05_ms IS NULL OR baseline_p05_ms > 0)"
            " AND (baseline_p95_ms IS NULL OR baseline_p95_ms > 0)"
            " AND (candidate_p05_ms IS NULL OR candidate_p05_ms > 0)"
            " AND (candidate_p95_ms IS NULL OR candidate_p95_ms > 0)",
            name=op.f("ck_results_percentiles_pos"),
        ),
        sa.CheckConstraint(
            "baseline_median_ms IS NULL OR baseline_median_ms > 0",
            name=op.f("ck_results_baseline_median_pos"),
        ),
        sa.CheckConstraint(
            "candidate_median_ms IS NULL OR candidate_median_ms > 0",
            name=op.f("ck_results_candidate_median_pos"),
        ),
        sa.CheckConstraint(
            "speedup IS NULL OR (speedup > 0 AND ci_low > 0 AND ci_low <= speedup"
            " AND speedup <= ci_high)",
            name=op.f("ck_results_speedup_ci"),
        ),
        sa.ForeignKeyConstraint(
            ["cell_id"], ["cells.id"], name=op.f("fk_results_cell_id_cells"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_results_run_id_runs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["series_id"], ["series.id"], name=op.f("fk_results_series_id_series")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        sa.UniqueConstraint("cell_id", name=op.f("uq_results_cell_id")),
    )
    op.create_index("ix_results_run_id", "results", ["run_id"], unique=False)
    op.create_index(
        "ix_results_series_id_created_at", "results", ["series_id", "created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_results_series_id_created_at", table_name="results")
    op.drop_index("ix_results_run_id", table_name="results")
    op.drop_table("results")
    op.drop_index("ix_cells_status_updated_at", table_name="cells")
    op.drop_index("ix_cells_run_id_status", table_name="cells")
    op.drop_table("cells")
    op.drop_index("ix_runs_status", table_name="runs")
    op.drop_index("ix_runs_project_id_request_hash", table_name="runs")
    op.drop_index("ix_runs_project_id_created_at", table_name="runs")
    op.drop_table("runs")
    op.drop_index("ix_series_model_backend", table_name="series")
    op.drop_index("ix_series_device_class", table_name="series")
    op.drop_table("series")
    op.drop_table("projects")
    op.drop_table("environments")
    op.drop_table("api_tokens")
