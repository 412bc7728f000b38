"""confirmation re-measures: run kind "confirm", runs.confirms_cell_id,
results.confirms_result_id

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS_BEFORE = "kind IN ('triggered', 'ingest')"
KINDS_AFTER = "kind IN ('triggered', 'ingest', 'confirm')"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("confirms_cell_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_runs_confirms_cell_id_cells"), "cells",
                                 ["confirms_cell_id"], ["id"], ondelete="CASCADE")
        batch.create_index(op.f("ix_runs_confirms_cell_id"), ["confirms_cell_id"],
                           unique=False)
        batch.drop_constraint(op.f("ck_runs_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_kind"), KINDS_AFTER)
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("confirms_result_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_results_confirms_result_id_results"), "results",
                                 ["confirms_result_id"], ["id"], ondelete="CASCADE")


def downgrade() -> None:
    op.execute("DELETE FROM runs WHERE kind = 'confirm'")
    with op.batch_alter_table("results") as batch:
        batch.drop_constraint(op.f("fk_results_confirms_result_id_results"),
                              type_="foreignkey")
        batch.drop_column("confirms_result_id")
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint(op.f("ck_runs_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_kind"), KINDS_BEFORE)
        batch.drop_index(op.f("ix_runs_confirms_cell_id"))
        batch.drop_constraint(op.f("fk_runs_confirms_cell_id_cells"), type_="foreignkey")
        batch.drop_column("confirms_cell_id")
