"""A game day's idempotency key.

Revision ID: 0011
Revises: 0010
Created: 2026-12-15

``gamedays.idempotency_key`` (nullable, unique): a client repeating ``POST /api/v1/gamedays`` with the same
``Idempotency-Key`` (a CI job retried after a timeout, say) gets the game day its first request started, not a
second suite loading the same target. Added with a batch (SQLite rebuilds the table) so its unique constraint is
a constraint, named as the metadata names it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gamedays") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.Text(), nullable=True))
        batch.create_unique_constraint("uq_gamedays_idempotency_key", ["idempotency_key"])


def downgrade() -> None:
    with op.batch_alter_table("gamedays") as batch:
        batch.drop_constraint("uq_gamedays_idempotency_key", type_="unique")
        batch.drop_column("idempotency_key")
