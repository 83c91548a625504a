"""The control planes this process runs or joined, and the deny list made whole when a place is checked.

``Settings.denied`` holds the control planes that are configured. Some exist only while this process runs:
the private Toxiproxy a run starts on a free port (a redirect hop of another run could reach its API), the
Ray cluster a run joins. They are held here for as long as they live (``CONTROL_PLANES``), and every check of
a place (``target_access``) judges it by ``guarded(denied)``: the deny list given, these control planes, each
named host's addresses and this host's own.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from cliffwatch.adapters.network.host_addresses import own_addresses
from cliffwatch.domain.security.deny_list import DenyList, DenyRule

LOOKUP_TIMEOUT_S = 2.0  # a deny rule's name that does not resolve by then is matched by name only
REFRESH_S = 60.0  # a deny rule's name is looked up again after this


class ControlPlanes:
    """Deny rules held while what they name runs (``hold`` … ``release``, ``holding``)."""

    def __init__(self) -> None:
        self._held: dict[int, DenyRule] = {}
        self._ids = itertools.count()
        self._changes = itertools.count(1)  # next() is atomic: a server stopped in a thread counts too
        self.generation = 0  # changes whenever a rule is held or released: places admitted before are judged again

    def hold(self, rule: DenyRule) -> int:
        """Denies ``rule`` until ``release`` is given the key returned."""
        key = next(self._ids)
        self._held[key] = rule
        self.generation = next(self._changes)
        return key

    def release(self, key: int) -> None:
        if self._held.pop(key, None) is not None:
            self.generation = next(self._changes)

    @contextmanager
    def holding(self, rule: DenyRule | None) -> Iterator[None]:
        """``rule`` is denied inside the block (nothing when None)."""
        key = None if rule is None else self.hold(rule)
        try:
            yield
        finally:
            if key is not None:
                self.release(key)

    def rules(self) -> tuple[DenyRule, ...]:
        return tuple(self._held.values())


CONTROL_PLANES = ControlPlanes()
_answers: dict[str, tuple[float, tuple[str, ...]]] = {}


async def guarded(denied: DenyList) -> DenyList:
    """``denied`` with this process's control planes, each host name's addresses (looked up at most once a
    minute; a name that does not resolve is matched as written) and this host's own addresses."""
    whole = denied.adding(CONTROL_PLANES.rules())
    names = whole.names()
    found = await asyncio.gather(*(_addresses(name) for name in names))
    return whole.resolved(dict(zip(names, found, strict=True)), own_addresses())


async def _addresses(name: str) -> tuple[str, ...]:
    now = time.monotonic()
    cached = _answers.get(name)
    if cached is not None and now - cached[0] < REFRESH_S:
        return cached[1]
    try:
        async with asyncio.timeout(LOOKUP_TIMEOUT_S):
            infos = await asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM)
        addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
    except (OSError, UnicodeError, TimeoutError):
        addresses = cached[1] if cached is not None else ()  # what it resolved to last is still denied
    _answers[name] = (now, addresses)
    return addresses
