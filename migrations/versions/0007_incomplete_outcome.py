"""The incomplete outcome class.

Revision ID: 0007
Revises: 0006
Created: 2026-12-02

``run_phases.incomplete`` and ``run_seconds.incomplete`` (integer, not null, server default 0): the requests whose
final answer was a 2xx without a whole answer (a stream ended with ``[DONE]`` and no finish_reason, an aborted
generation, a body without choices). Runs stored before it counted those as on time or late, or as errors; the
default of 0 says what they were classed as then. A plain column addition: no table rebuild on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("run_phases", "run_seconds")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("incomplete", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("incomplete")
