"""Each stored request's traffic class, conversation and turn.

Revision ID: 0008
Revises: 0007
Created: 2026-12-02

``request_outcomes.traffic_class`` (integer, not null, server default 0: the index of the request's class in
the scenario's classes; a run stored before classes had one), ``conversation`` and ``turn`` (nullable: a
request that was not a conversation's turn, as every one stored before them). Plain column additions.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("request_outcomes", sa.Column("traffic_class", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("request_outcomes", sa.Column("conversation", sa.BigInteger(), nullable=True))
    op.add_column("request_outcomes", sa.Column("turn", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("request_outcomes") as batch:
        batch.drop_column("turn")
        batch.drop_column("conversation")
        batch.drop_column("traffic_class")
