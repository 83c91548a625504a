"""Webhook deliveries.

Revision ID: 0010
Revises: 0009
Created: 2026-12-15

``webhook_deliveries``: one row a delivery of a run's, a sweep's or a game day's webhooks, delivered or not (its
URL as shown, event, format, ok, HTTP status, attempts, error, time), named by ``run_id`` or ``gameday_id``; no
foreign keys (a record of what was said outlives what it told of). Indexed by each owner and the id, which
orders them as they were made. Written out in full, like 0001: a revision records what the schema was.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _text(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.Text(), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        _text("run_id", nullable=True),
        _text("gameday_id", nullable=True),
        _text("event"),
        _text("url"),
        _text("format"),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _text("error", nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
    )
    op.create_index("ix_webhook_deliveries_run_id_id", "webhook_deliveries", ["run_id", "id"])
    op.create_index("ix_webhook_deliveries_gameday_id_id", "webhook_deliveries", ["gameday_id", "id"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")  # its indexes go with it
