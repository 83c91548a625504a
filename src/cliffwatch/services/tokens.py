"""API tokens: created once and shown once, stored only as their SHA-256, checked on every request.

Every check asks the database, so a revocation holds at once on every instance. When the database cannot
answer, a token this instance saw valid before is still accepted (``KNOWN_TOKENS`` of them, by hash): the
emergency stop and aborts must reach this instance's runs while its database is down, and they need an
authenticated caller. Nothing else works without the database anyway; a token revoked through another
instance during the outage is refused again as soon as the database answers.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

import structlog

from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.domain.ports import TokenStore
from cliffwatch.domain.service.runs import ApiToken, TokenRole

log = structlog.get_logger(__name__)

TOKEN_PREFIX = "cw_"
KNOWN_TOKENS = 1_000


def token_hash(token: str) -> str:
    # A random 256-bit token needs no slow hash: nobody can guess it from its SHA-256.
    return hashlib.sha256(token.encode()).hexdigest()


class TokenService:
    def __init__(self, store: TokenStore, *, now: Callable[[], datetime]) -> None:
        self.store = store
        self.now = now
        self._known: OrderedDict[str, ApiToken] = OrderedDict()  # valid when last asked, most recent last

    async def create(self, name: str, role: TokenRole) -> tuple[ApiToken, str]:
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
        digest = token_hash(token)
        try:
            record = await self.store.token_by_hash(digest)
        except StoreUnavailable:
            known = self._known.get(digest)
            if known is None:
                raise
            log.warning("database unavailable: token accepted as it was last seen", token=known.name)
            return known
        if record is None or record.revoked_at is not None:
            self._known.pop(digest, None)
            return None
        self._known[digest] = record
        self._known.move_to_end(digest)
        while len(self._known) > KNOWN_TOKENS:
            self._known.popitem(last=False)
        return record

    def known(self, token: str) -> bool:
        """Whether ``token`` was valid when this instance last asked (no database involved)."""
        return token_hash(token) in self._known

    async def all(self) -> list[ApiToken]:
        return await self.store.list_tokens()

    async def revoke(self, token_id: str) -> bool:
        revoked = await self.store.revoke_token(token_id, self.now())
        for digest, known in list(self._known.items()):
            if known.id == token_id:
                del self._known[digest]
        return revoked
