"""detection policy per project, cell judgements, regressions, webhook deliveries

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 03:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
ACTIVE = "status IN ('open', 'acknowledged')"


def upgrade() -> None:
    op.add_column("projects", sa.Column("detection", JSON_TYPE, nullable=True))
    op.add_column("cells", sa.Column("judgement", JSON_TYPE, nullable=True))
    op.create_index("ix_results_series_id_id", "results", ["series_id", "id"], unique=False)
    op.create_table(
        "regressions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("opened_by_run_id", sa.Integer(), nullable=False),
        sa.Column("opened_by_result_id", sa.Integer(), nullable=False),
        sa.Column("baseline_result_id", sa.Integer(), nullable=True),
        sa.Column("baseline_kind", sa.String(length=16), nullable=False),
        sa.Column("baseline_description", sa.Text(), nullable=False),
        sa.Column("baseline_speedup", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("resolved_by_result_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("magnitude", sa.Float(), nullable=True),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("reasons", JSON_TYPE, nullable=False),
        sa.Column("acknowledged_by", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('open', 'acknowledged', 'resolved')", name=op.f("ck_regressions_status")
        ),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE",
                                name=op.f("fk_regressions_project_id_projects")),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"], ondelete="CASCADE",
                                name=op.f("fk_regressions_series_id_series")),
        sa.ForeignKeyConstraint(["opened_by_run_id"], ["runs.id"], ondelete="CASCADE",
                                name=op.f("fk_regressions_opened_by_run_id_runs")),
        sa.ForeignKeyConstraint(["opened_by_result_id"], ["results.id"], ondelete="CASCADE",
                                name=op.f("fk_regressions_opened_by_result_id_results")),
        sa.ForeignKeyConstraint(["baseline_result_id"], ["results.id"], ondelete="SET NULL",
                                name=op.f("fk_regressions_baseline_result_id_results")),
        sa.ForeignKeyConstraint(["resolved_by_result_id"], ["results.id"], ondelete="SET NULL",
                                name=op.f("fk_regressions_resolved_by_result_id_results")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regressions")),
        sa.UniqueConstraint("opened_by_result_id",
                            name=op.f("uq_regressions_opened_by_result_id")),
    )
    op.create_index("ix_regressions_one_active_per_series", "regressions",
                    ["project_id", "series_id"], unique=True,
                    postgresql_where=sa.text(ACTIVE), sqlite_where=sa.text(ACTIVE))
    op.create_index("ix_regressions_project_id_status", "regressions",
                    ["project_id", "status"], unique=False)
    op.create_index("ix_regressions_status", "regressions", ["status"], unique=False)
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("regression_id", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts_log", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('pending', 'delivered', 'failed')",
                           name=op.f("ck_webhook_deliveries_status")),
        sa.CheckConstraint("kind IN ('json', 'slack')", name=op.f("ck_webhook_deliveries_kind")),
        sa.ForeignKeyConstraint(["regression_id"], ["regressions.id"], ondelete="CASCADE",
                                name=op.f("fk_webhook_deliveries_regression_id_regressions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index("ix_webhook_deliveries_regression_id", "webhook_deliveries",
                    ["regression_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_regression_id", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_regressions_status", table_name="regressions")
    op.drop_index("ix_regressions_project_id_status", table_name="regressions")
    op.drop_index("ix_regressions_one_active_per_series", table_name="regressions")
    op.drop_table("regressions")
    op.drop_index("ix_results_series_id_id", table_name="results")
    with op.batch_alter_table("cells") as batch:
        batch.drop_column("judgement")
    with op.batch_alter_table("projects") as batch:
        batch.drop_column("detection")
