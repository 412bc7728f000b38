"""workers: each worker's own account of itself (queues, host, GPUs, interpreters, heartbeat)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 19:30:00

The reconciler decides whether a queue has a consumer from these heartbeats, and the API
checks a requested interpreter against the names workers announce. Nothing else refers to
the table, so a downgrade drops it; workers write their rows again when they next beat.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", JSON_TYPE, nullable=False),
        sa.Column("interpreters", JSON_TYPE, nullable=False),
        sa.Column("gpus", JSON_TYPE, nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
        sa.UniqueConstraint("name", name=op.f("uq_workers_name")),
    )
    op.create_index(op.f("ix_workers_last_heartbeat_at"), "workers", ["last_heartbeat_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_workers_last_heartbeat_at"), table_name="workers")
    op.drop_table("workers")
