"""Game days through the service.

Revision ID: 0009
Revises: 0008
Created: 2026-12-14

``gamedays``: one row per suite started through the API or a schedule, from its start to its verdict, held by
the instance driving it under a lease (``owner``, ``lease_until``) as a run is; its experiments (JSON: each one's
state and run id), verdict, summary and webhook deliveries. One game day per schedule fire, as for runs
(``uq_gamedays_schedule_id_fire_time``). ``schedules.suite`` (nullable JSON): the suite document a schedule
fires instead of a scenario. Written out in full, like 0001: a revision records what the schema was.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _time(name: str, *, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _json(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.JSON(none_as_null=True), nullable=nullable)


def _text(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.Text(), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "gamedays",
        _text("id"),
        _text("name"),
        _json("suite"),
        _text("status"),
        _text("trigger"),
        _text("triggered_by"),
        _time("created_at", nullable=False),
        _json("experiments"),
        _text("schedule_id", nullable=True),
        _time("fire_time", nullable=True),
        _text("owner", nullable=True),
        _time("lease_until", nullable=True),
        _time("finished_at", nullable=True),
        _text("abort_requested", nullable=True),
        _text("reason", nullable=True),
        _text("verdict", nullable=True),
        _text("summary", nullable=True),
        _json("notifications"),
        sa.PrimaryKeyConstraint("id", name="pk_gamedays"),
        sa.UniqueConstraint("schedule_id", "fire_time", name="uq_gamedays_schedule_id_fire_time"),
    )
    op.create_index("ix_gamedays_created_at_id", "gamedays", ["created_at", "id"])
    op.create_index("ix_gamedays_status", "gamedays", ["status"])
    op.add_column("schedules", _json("suite", nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("suite")
    op.drop_index("ix_gamedays_status", table_name="gamedays")
    op.drop_index("ix_gamedays_created_at_id", table_name="gamedays")
    op.drop_table("gamedays")
