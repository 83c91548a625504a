"""API tokens: created once and shown once, stored only as their SHA-256, checked on every request."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Callable
from datetime import datetime

from cliffwatch.domain.runs import ApiToken, Role
from cliffwatch.domain.service_ports import TokenStore

TOKEN_PREFIX = "cw_"


def token_hash(token: str) -> str:
    # A random 256-bit token needs no slow hash: nobody can guess it from its SHA-256.
    return hashlib.sha256(token.encode()).hexdigest()


class TokenService:
    def __init__(self, store: TokenStore, *, now: Callable[[], datetime]) -> None:
        self.store = store
        self.now = now

    async def create(self, name: str, role: Role) -> tuple[ApiToken, str]:
        """A new token with ``role``; returns its record and the token itself, which is never stored."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = ApiToken(id=uuid.uuid4().hex[:12], name=name, role=role, token_hash=token_hash(token),
                          created_at=self.now())  # fmt: skip
        await self.store.add_token(record)
        return record, token

    async def authenticate(self, token: str) -> ApiToken | None:
        """The token's record when it is known and not revoked; None otherwise."""
        if not token.startswith(TOKEN_PREFIX):
            return None
        record = await self.store.token_by_hash(token_hash(token))
        return record if record is not None and record.revoked_at is None else None

    async def all(self) -> list[ApiToken]:
        return await self.store.list_tokens()

    async def revoke(self, token_id: str) -> bool:
        return await self.store.revoke_token(token_id, self.now())
