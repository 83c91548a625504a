"""Dashboard sessions: what a login leaves on the server, and the port that keeps it.

A session is found by the SHA-256 of its id (the cookie's value), never by the id itself: a copy of the
table gives nobody a way in. It belongs to the API token that logged in, so it never outlives that token:
the store answers a lookup only while the token is not revoked, and only before the session expires.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from cliffwatch.domain.service.runs import ApiToken


@dataclass(frozen=True, kw_only=True)
class UiSession:
    id_hash: str  # SHA-256 (hex) of the session id; the id itself is only ever in the cookie
    token_id: str  # the API token that logged in: its role is the session's
    created_at: datetime
    expires_at: datetime


class SessionStore(Protocol):
    async def add_session(self, session: UiSession) -> None:
        """Stores a new session (its hash is new: ids are random)."""

    async def session_by_hash(self, id_hash: str, *, now: datetime) -> tuple[UiSession, ApiToken] | None:
        """The session and its token; None when there is no such session, it expired before ``now``, or its
        token is revoked (or gone)."""

    async def delete_session(self, id_hash: str) -> bool:
        """Removes the session (logout); True when there was one."""

    async def delete_expired_sessions(self, now: datetime) -> int:
        """Removes every session expired before ``now``, and those of revoked tokens; returns how many."""
