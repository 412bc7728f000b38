"""indexes for a long history: the points of a series, runs by project and revision,
unjudged cells, a queue's latest start

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 19:00:00

Each replaces a scan that grew with every result ever stored (scripts/capacity.py measured
them on 10k, 100k and 1M results; docs/operations.md "Capacity"):
- the overview's sparklines and every "latest point" read the newest points of each series
  from the heap, row by row: ix_results_series_points (partial: points only; status and
  speedup included) answers both from the index alone;
- `GET /api/v1/runs?project=&revision=` (how `speedwatch report` finds a revision's run)
  walked the runs newest first until it met the revision: ix_runs_project_id_revision;
- the reconciler's sweep for ingested results nobody judged read every cell to find the
  few without a judgement: ix_cells_unjudged holds only those (partial);
- the reconciler's "when did a cell of this queue last start" read every cell of the
  queue: ix_cells_queue_started_at.
Plain CREATE INDEX: on PostgreSQL it blocks writes to the table while it builds (seconds
on a million cells; the measured time is in docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNJUDGED = "judgement IS NULL"
POINTS = "confirms_result_id IS NULL AND sweep_id IS NULL"  # app.models.series_point


def upgrade() -> None:
    op.create_index("ix_results_series_points", "results", ["series_id", "created_at", "id"],
                    postgresql_include=["status", "speedup"],
                    postgresql_where=sa.text(POINTS), sqlite_where=sa.text(POINTS))
    op.create_index("ix_runs_project_id_revision", "runs", ["project_id", "revision"])
    op.create_index("ix_cells_unjudged", "cells", ["run_id"],
                    postgresql_where=sa.text(UNJUDGED), sqlite_where=sa.text(UNJUDGED))
    op.create_index("ix_cells_queue_started_at", "cells", ["queue", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_cells_queue_started_at", table_name="cells")
    op.drop_index("ix_cells_unjudged", table_name="cells")
    op.drop_index("ix_runs_project_id_revision", table_name="runs")
    op.drop_index("ix_results_series_points", table_name="results")
