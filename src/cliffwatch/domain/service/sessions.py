"""Dashboard sessions: what a login leaves on the server, and the port that keeps it.

A session is found by the SHA-256 of its id (the cookie's value), never by the id itself: a copy of the
table gives nobody a way in. It belongs to the API token that logged in, so it never outlives that token:
the store answers a lookup only while the token is not revoked, and only before the session expires.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, kw_only=True)
class UiSession:
    id_hash: str  # SHA-256 (hex) of the session id; the id itself is only ever in the cookie
    token_id: str  # the API token that logged in: its role is the session's
    created_at: datetime
    expires_at: datetime
