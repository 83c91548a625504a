"""Dashboard sessions.

Revision ID: 0003
Revises: 0002
Created: 2026-12-08

``ui_sessions``: one row per dashboard login, keyed by the SHA-256 of the session id (the id itself is only
in the user's cookie), with the API token that logged in (deleted with it) and when it expires. Written
out in full, like 0001: a revision records what the schema was.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id_hash", sa.Text(), nullable=False),
        sa.Column("token_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name="fk_ui_sessions_token_id_api_tokens", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id_hash", name="pk_ui_sessions"),
    )
    op.create_index("ix_ui_sessions_expires_at", "ui_sessions", ["expires_at"])
    op.create_index("ix_ui_sessions_token_id", "ui_sessions", ["token_id"])


def downgrade() -> None:
    op.drop_index("ix_ui_sessions_token_id", table_name="ui_sessions")
    op.drop_index("ix_ui_sessions_expires_at", table_name="ui_sessions")
    op.drop_table("ui_sessions")
