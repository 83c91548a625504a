"""The run's DNS resolver: answers the connector with the addresses the run admitted, and nothing else.

aiohttp resolves a host name for every new connection (its cache expires after ten seconds), so a name
checked against the allowlist once could point somewhere else by the next connection: DNS rebinding. The
run's connector asks this resolver instead; it never looks anything up, it only reads the pins of
``target_access.Destinations``. A host:port the run did not admit is refused before any socket is opened.
IP literals never reach a resolver (aiohttp connects to them directly); the run checks those itself.
"""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult

from cliffwatch.adapters.network.target_access import Destinations

_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class PinRefused(OSError):
    """A connection to a host:port the run never admitted: refused before any socket was opened."""

    def __init__(self, host: str, port: int, why: str) -> None:
        self.host = host
        self.port = port
        super().__init__(f"cliffwatch refused to connect to {host}:{port}: {why}")


class PinnedResolver(AbstractResolver):
    """Implements aiohttp's resolver over a run's ``Destinations``."""

    def __init__(self, destinations: Destinations) -> None:
        self.destinations = destinations

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The pinned addresses of ``host:port`` of the family asked for (any, for ``AF_UNSPEC``); raises
        ``PinRefused`` (an ``OSError``, which the connector reports as a failed lookup) otherwise."""
        addresses = self.destinations.pinned(host, port)
        if addresses is None:
            raise PinRefused(host, port, "not admitted for this run (only addresses checked against the allowlist)")
        results: list[ResolveResult] = []
        for address in addresses:
            found = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family in (socket.AF_UNSPEC, found):
                results.append(
                    ResolveResult(hostname=host, host=address, port=port, family=found, proto=0, flags=_NUMERIC)
                )
        if not results:
            raise PinRefused(host, port, f"no pinned address of family {getattr(family, 'name', family)}")
        return results

    async def close(self) -> None:
        """Nothing to release: the resolver holds no connection or thread of its own."""
