"""api_tokens.projects: a token may be limited to some projects (NULL: every project)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # Nullable without a default: every existing token keeps reaching every project.
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("projects", JSON_TYPE, nullable=True))


def downgrade() -> None:
    # An older server knows no limits: it would let a limited token reach every project.
    # Such tokens are revoked instead (they answer 401 there; make unlimited ones if needed).
    tokens = sa.table("api_tokens", sa.column("id", sa.Integer()),
                      sa.column("projects", JSON_TYPE),
                      sa.column("revoked_at", sa.DateTime(timezone=True)))
    bind = op.get_bind()
    limited = [token_id for token_id, projects in bind.execute(
        sa.select(tokens.c.id, tokens.c.projects).where(tokens.c.revoked_at.is_(None)))
        if projects]
    if limited:
        bind.execute(tokens.update().where(tokens.c.id.in_(limited))
                     .values(revoked_at=sa.func.current_timestamp()))
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("projects")
