"""Sweeps as a run kind.

Revision ID: 0002
Revises: 0001
Created: 2026-12-07

``runs.kind`` ('run' or 'sweep'; existing rows are runs), ``runs.sweep`` (the sweep's parameters, JSON),
``runs.usable_rps`` (a finished sweep's usable capacity, for trends without reading documents), and
``schedules.kind`` and ``schedules.sweep`` likewise. Plain column additions: no table rebuild on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _kind() -> sa.Column[object]:
    return sa.Column("kind", sa.Text(), server_default="run", nullable=False)


def _sweep() -> sa.Column[object]:
    return sa.Column("sweep", sa.JSON(none_as_null=True), nullable=True)


def upgrade() -> None:
    op.add_column("runs", _kind())
    op.add_column("runs", _sweep())
    op.add_column("runs", sa.Column("usable_rps", sa.Double(), nullable=True))
    op.add_column("schedules", _kind())
    op.add_column("schedules", _sweep())


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("sweep")
        batch.drop_column("kind")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("usable_rps")
        batch.drop_column("sweep")
        batch.drop_column("kind")
