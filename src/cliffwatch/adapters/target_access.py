"""Checks a target URL against the allowlist, resolving its host name first."""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

from cliffwatch.domain.allowlist import Allowlist
from cliffwatch.domain.errors import TargetNotAllowed


async def ensure_allowed(url: str, allowlist: Allowlist) -> None:
    """Raises ``TargetNotAllowed`` unless every address ``url``'s host resolves to is allowed."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:  # a malformed IPv6 host, a port out of range
        raise TargetNotAllowed(url, f"not a valid URL: {exc}") from exc
    host = parts.hostname or ""
    addresses: list[str] = []
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = sorted({str(info[4][0]) for info in infos})
    except (OSError, UnicodeError) as exc:  # UnicodeError: a name the IDNA codec refuses, before any lookup
        reason = allowlist.check(host, port, [])
        if reason is not None:
            raise TargetNotAllowed(url, f"{reason}; and the host does not resolve: {exc}") from exc
        return
    reason = allowlist.check(host, port, addresses)
    if reason is not None:
        raise TargetNotAllowed(url, reason)


class AllowlistPolicy:
    """The service's ``TargetPolicy``: a target is allowed when ``ensure_allowed`` does not object."""

    def __init__(self, allowlist: Allowlist) -> None:
        self.allowlist = allowlist

    async def check(self, url: str) -> str | None:
        try:
            await ensure_allowed(url, self.allowlist)
        except TargetNotAllowed as exc:
            return exc.reason
        return None
