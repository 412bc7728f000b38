"""sweeps: runs across released versions of a package (sweeps and bisects), run kind
"sweep", runs.sweep_id, results.sweep_id, environments.build

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 09:00:00

A sweep's results are measurements of other releases on purpose: results.sweep_id keeps
them out of their series' history and baselines (as confirms_result_id does for
re-measures). environments.build is the last build of the environment's cached venv that
a worker reported (seconds, bytes, what pip installed into it).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
KINDS_BEFORE = "kind IN ('triggered', 'ingest', 'confirm')"
KINDS_AFTER = "kind IN ('triggered', 'ingest', 'confirm', 'sweep')"


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("package", sa.String(length=100), nullable=False),
        sa.Column("from_version", sa.String(length=64), nullable=True),
        sa.Column("to_version", sa.String(length=64), nullable=True),
        sa.Column("pre", sa.Boolean(), nullable=False),
        sa.Column("holds", JSON_TYPE, nullable=False),
        sa.Column("versions", JSON_TYPE, nullable=False),
        sa.Column("matrix", JSON_TYPE, nullable=False),
        sa.Column("max_runs", sa.Integer(), nullable=False),
        sa.Column("regression_id", sa.Integer(), nullable=True),
        sa.Column("state", JSON_TYPE, nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('sweep', 'bisect')", name=op.f("ck_sweeps_kind")),
        sa.CheckConstraint("status IN ('running', 'done', 'cancelled', 'failed')",
                           name=op.f("ck_sweeps_status")),
        sa.CheckConstraint("max_runs >= 1", name=op.f("ck_sweeps_max_runs")),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_sweeps_project_id_projects"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["regression_id"], ["regressions.id"],
                                name=op.f("fk_sweeps_regression_id_regressions"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
    )
    op.create_index("ix_sweeps_project_id_id", "sweeps", ["project_id", "id"])
    op.create_index(op.f("ix_sweeps_regression_id"), "sweeps", ["regression_id"])
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_runs_sweep_id_sweeps"), "sweeps", ["sweep_id"],
                                 ["id"], ondelete="CASCADE")
        batch.create_index(op.f("ix_runs_sweep_id"), ["sweep_id"], unique=False)
        batch.drop_constraint(op.f("ck_runs_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_kind"), KINDS_AFTER)
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_results_sweep_id_sweeps"), "sweeps", ["sweep_id"],
                                 ["id"], ondelete="CASCADE")
        batch.create_index(op.f("ix_results_sweep_id"), ["sweep_id"], unique=False)
    with op.batch_alter_table("environments") as batch:
        batch.add_column(sa.Column("build", JSON_TYPE, nullable=True))


def downgrade() -> None:
    # An older server knows no sweeps: their runs (and results) go with them, since they
    # would otherwise become points of their series there.
    op.execute("DELETE FROM runs WHERE kind = 'sweep'")
    with op.batch_alter_table("environments") as batch:
        batch.drop_column("build")
    with op.batch_alter_table("results") as batch:
        batch.drop_index(op.f("ix_results_sweep_id"))
        batch.drop_constraint(op.f("fk_results_sweep_id_sweeps"), type_="foreignkey")
        batch.drop_column("sweep_id")
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint(op.f("ck_runs_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_kind"), KINDS_BEFORE)
        batch.drop_index(op.f("ix_runs_sweep_id"))
        batch.drop_constraint(op.f("fk_runs_sweep_id_sweeps"), type_="foreignkey")
        batch.drop_column("sweep_id")
    op.drop_index(op.f("ix_sweeps_regression_id"), table_name="sweeps")
    op.drop_index("ix_sweeps_project_id_id", table_name="sweeps")
    op.drop_table("sweeps")
