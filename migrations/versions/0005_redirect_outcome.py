"""The redirect outcome class.

Revision ID: 0005
Revises: 0004
Created: 2026-12-14

``run_phases.redirect`` and ``run_seconds.redirect`` (integer, not null, server default 0): the requests whose
final answer was a 3xx the client did not follow. Runs stored before it had none (their redirects were
followed), which the default says. A plain column addition: no table rebuild on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("run_phases", "run_seconds")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("redirect", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("redirect")
