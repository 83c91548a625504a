"""``SqlSessionStore``: dashboard sessions on the service's database (SQLite or PostgreSQL).

A lookup is one statement joining the session to its token, so a revoked token ends its sessions at once,
on every instance sharing the database, with nothing to notify.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import delete, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.tables import api_tokens, ui_sessions
from cliffwatch.domain.service.runs import ApiToken, TokenRole
from cliffwatch.domain.service.sessions import UiSession
from cliffwatch.services.store_values import utc_now


class SqlSessionStore:
    """Implements ``SessionStore``; the engine is the caller's."""

    def __init__(self, engine: AsyncEngine, *, now: Callable[[], datetime] = utc_now) -> None:
        self._db = Database(engine, now=now)

    async def add_session(self, session: UiSession) -> None:
        row = {"id_hash": session.id_hash, "token_id": session.token_id, "created_at": session.created_at,
               "expires_at": session.expires_at}  # fmt: skip
        async with self._db.write() as conn:
            await conn.execute(ui_sessions.insert().values(row))

    async def session_by_hash(self, id_hash: str, *, now: datetime) -> tuple[UiSession, ApiToken] | None:
        live = (
            select(ui_sessions, *[c.label(f"tok_{c.name}") for c in api_tokens.c])
            .join(api_tokens, api_tokens.c.id == ui_sessions.c.token_id)
            .where(ui_sessions.c.id_hash == id_hash, ui_sessions.c.expires_at > now, api_tokens.c.revoked_at.is_(None))
        )
        async with self._db.read() as conn:
            row = (await conn.execute(live)).mappings().first()
        if row is None:
            return None
        session = UiSession(id_hash=row["id_hash"], token_id=row["token_id"], created_at=row["created_at"],
                            expires_at=row["expires_at"])  # fmt: skip
        token = ApiToken(id=row["tok_id"], name=row["tok_name"], role=TokenRole(row["tok_role"]),
                         token_hash=row["tok_token_hash"], created_at=row["tok_created_at"],
                         revoked_at=row["tok_revoked_at"])  # fmt: skip
        return session, token

    async def delete_session(self, id_hash: str) -> bool:
        async with self._db.write() as conn:
            return (await conn.execute(delete(ui_sessions).where(ui_sessions.c.id_hash == id_hash))).rowcount == 1

    async def delete_expired_sessions(self, now: datetime) -> int:
        revoked = select(api_tokens.c.id).where(api_tokens.c.revoked_at.is_not(None))
        dead = delete(ui_sessions).where(or_(ui_sessions.c.expires_at <= now, ui_sessions.c.token_id.in_(revoked)))
        async with self._db.write() as conn:
            return int((await conn.execute(dead)).rowcount)
