"""Dashboard logins: an API token in, a session out; the session's id back in, its token (and role) out.

The session id is 256 random bits, sent only in an HttpOnly cookie; the store keeps its SHA-256. The CSRF
token of a session is derived from its id (an HMAC), so it needs no storage, is the same in every form of
the session, and nobody without the session id can compute it. ``InMemorySessionStore`` is the twin the
tests and the contract suite use beside the SQL store.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from cliffwatch.domain.ports import SessionStore, TokenStore
from cliffwatch.domain.service.runs import ApiToken
from cliffwatch.domain.service.sessions import UiSession
from cliffwatch.services.tokens import TokenService

_CSRF_PURPOSE = b"cliffwatch dashboard csrf v1"


def session_hash(session_id: str) -> str:
    # 256 random bits need no slow hash (as for API tokens): the hash only keeps a stolen table useless.
    return hashlib.sha256(session_id.encode()).hexdigest()


def csrf_token(session_id: str) -> str:
    """The session's CSRF token: HMAC-SHA-256 of a fixed purpose, keyed by the session id."""
    return hmac.new(session_id.encode(), _CSRF_PURPOSE, hashlib.sha256).hexdigest()


def csrf_matches(session_id: str, offered: str | None) -> bool:
    """Whether ``offered`` is the session's CSRF token (compared in constant time)."""
    return offered is not None and hmac.compare_digest(csrf_token(session_id), offered)


@dataclass(frozen=True, kw_only=True)
class LoggedIn:
    session_id: str  # for the cookie, once; never stored
    session: UiSession
    token: ApiToken


class SessionService:
    def __init__(self, store: SessionStore, tokens: TokenService, *, ttl_s: float, now: Callable[[], datetime]) -> None:
        if ttl_s <= 0:
            raise ValueError(f"a session lifetime must be positive, got {ttl_s}")
        self.store = store
        self.tokens = tokens
        self.ttl = timedelta(seconds=ttl_s)
        self.now = now

    async def login(self, token: str) -> LoggedIn | None:
        """A new session for a valid, unrevoked API token; None for any other text (the reason is not told)."""
        record = await self.tokens.authenticate(token)
        if record is None:
            return None
        now = self.now()
        await self.store.delete_expired_sessions(now)  # housekeeping where sessions are made: no timer needed
        session_id = secrets.token_urlsafe(32)
        session = UiSession(id_hash=session_hash(session_id), token_id=record.id, created_at=now,
                            expires_at=now + self.ttl)  # fmt: skip
        await self.store.add_session(session)
        return LoggedIn(session_id=session_id, session=session, token=record)

    async def resolve(self, session_id: str) -> tuple[UiSession, ApiToken] | None:
        """The live session with this id and its token; None when unknown, expired or its token revoked."""
        if not session_id or len(session_id) > 200:
            return None
        return await self.store.session_by_hash(session_hash(session_id), now=self.now())

    async def logout(self, session_id: str) -> bool:
        """Ends the session on the server (the cookie alone is then worthless); True when it existed."""
        return await self.store.delete_session(session_hash(session_id))


class InMemorySessionStore:
    """``SessionStore`` in memory, over a ``TokenStore`` for the tokens' revocation."""

    def __init__(self, tokens: TokenStore) -> None:
        self.tokens = tokens
        self.sessions: dict[str, UiSession] = {}

    async def add_session(self, session: UiSession) -> None:
        if session.id_hash in self.sessions:
            raise ValueError("a session with this id is already stored")
        self.sessions[session.id_hash] = session

    async def _token(self, token_id: str) -> ApiToken | None:
        found = [t for t in await self.tokens.list_tokens() if t.id == token_id and t.revoked_at is None]
        return found[0] if found else None

    async def session_by_hash(self, id_hash: str, *, now: datetime) -> tuple[UiSession, ApiToken] | None:
        session = self.sessions.get(id_hash)
        if session is None or session.expires_at <= now:
            return None
        token = await self._token(session.token_id)
        return None if token is None else (session, token)

    async def delete_session(self, id_hash: str) -> bool:
        return self.sessions.pop(id_hash, None) is not None

    async def delete_expired_sessions(self, now: datetime) -> int:
        dead = [h for h, s in self.sessions.items() if s.expires_at <= now or await self._token(s.token_id) is None]
        for id_hash in dead:
            del self.sessions[id_hash]
        return len(dead)
