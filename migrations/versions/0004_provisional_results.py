"""A running sweep's provisional result.

Revision ID: 0004
Revises: 0003
Created: 2026-12-10

``runs.provisional_result`` (JSON): a running sweep's document so far, replaced by its worker after every
step so the API and the dashboard can show the steps measured while it runs. A final ``result`` clears it.
A plain column addition: no table rebuild on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("provisional_result", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("provisional_result")
