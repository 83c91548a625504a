"""Where load may go: a URL checked against an allowlist, its host resolved once and pinned for the run.

``ensure_allowed`` is the check at submit time. A run goes further (``Destinations``): each host:port it
sends to is resolved once, every address checked, and only those addresses are ever connected to for the
rest of the run (``loadgen.pinned_resolver`` answers the connector from the pins), so a name that rebinds
after the check cannot move the load. A redirect hop, when the scenario follows them, is admitted the same
way before anything is sent to it. Every check judges the place by the allowlist's deny list first, made whole
at that moment (``network.control_planes.guarded``: this process's running control planes, the addresses of
the names it holds, this host's own addresses), so no allowlist can admit a control plane of cliffwatch's.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass

import structlog
from yarl import URL

from cliffwatch.adapters.network.control_planes import CONTROL_PLANES, guarded
from cliffwatch.adapters.network.host_addresses import own_addresses
from cliffwatch.domain.errors import CliffwatchError, TargetNotAllowed, TargetUnreachable
from cliffwatch.domain.security.allowlist import Allowlist
from cliffwatch.domain.security.deny_list import DenyList

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where a URL points: its host as the connector sees it (lower case, IDNA-encoded) and its port."""

    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Place:
        """Raises ``TargetNotAllowed`` for a URL whose host or port cannot be read."""
        try:
            parsed = URL(url)
            host, port = parsed.raw_host, parsed.port
        except (ValueError, UnicodeError) as exc:  # a malformed IPv6 host, a port out of range, a bad label
            raise TargetNotAllowed(url, f"not a valid URL: {exc}") from exc
        if not host or port is None:
            raise TargetNotAllowed(url, "not a valid URL: it has no host")
        return cls(host=_key(host), port=port)

    @property
    def literal(self) -> bool:
        """Whether the host is an IP address (the connector never resolves those)."""
        try:
            socket.inet_pton(socket.AF_INET6 if ":" in self.host else socket.AF_INET, self.host)
        except OSError:
            return False
        return True


async def lookup(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to for TCP, in the resolver's order, each once; raises ``OSError``
    (or ``UnicodeError`` for a name the IDNA codec refuses, before any lookup)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def ensure_allowed(url: str, allowlist: Allowlist, *, field: str | None = None) -> None:
    """Raises ``TargetNotAllowed`` (naming ``field``, the scenario's field that gave ``url``) unless every address
    ``url``'s host resolves to is allowed and none denied (a host the allowlist names is allowed even when it does
    not resolve here: the worker may resolve it, and its addresses are judged then)."""
    try:
        await _checked(url, allowlist, unresolved_ok=True)
    except TargetNotAllowed as exc:
        if field is None:
            raise
        raise TargetNotAllowed(url, exc.reason, field=field) from None


async def _checked(url: str, allowlist: Allowlist, *, unresolved_ok: bool) -> tuple[str, ...]:
    """The addresses ``url``'s host resolves to, every one allowed and none denied; raises ``TargetNotAllowed``,
    or (unless ``unresolved_ok``) ``TargetUnreachable`` for an allowed name that does not resolve."""
    place = Place.of(url)
    allowlist = allowlist.denying(await guarded(allowlist.denied))
    try:
        addresses = (place.host,) if place.literal else tuple(await lookup(place.host, place.port))
    except (OSError, UnicodeError) as exc:
        reason = allowlist.check(place.host, place.port, [])
        if reason is not None:
            raise TargetNotAllowed(url, f"{reason}; and the host does not resolve: {exc}") from exc
        if unresolved_ok:
            return ()
        raise TargetUnreachable(url, f"{place.host} does not resolve: {exc}") from exc
    reason = allowlist.check(place.host, place.port, addresses)
    if reason is not None:
        raise TargetNotAllowed(url, reason)
    if not addresses and not unresolved_ok:
        raise TargetUnreachable(url, f"{place.host} resolves to no address")
    return addresses


MAX_REFUSED = 1_000  # refused places one run remembers (a target's redirects could name endless ones)
MAX_PLACES = 1_000  # places one run may admit: a target redirecting to ever new ones is refused beyond


class Destinations:
    """The places one run may connect to, each with the addresses it was checked on.

    A place is admitted once: resolved (unless its host is an IP), every address checked against the
    allowlist given, and pinned. Later admissions of the same place reuse the pins, so the run never
    looks the name up again. ``pinned`` is what the run's resolver answers the connector with. When this
    process's control planes change (another run's private Toxiproxy starts on a free port), every pin is
    judged again before it is used, and one a control plane now holds is dropped and refused from then on.
    """

    def __init__(self, allowlist: Allowlist) -> None:
        self.allowlist = allowlist
        self._pins: dict[Place, tuple[str, ...]] = {}
        # A refusal is kept too, so a target redirecting every request to a place outside the allowlist costs
        # one lookup, not one an attempt; and attempts admitting one place at once share its lookup.
        self._refused: dict[Place, CliffwatchError] = {}
        self._pending: dict[Place, asyncio.Task[tuple[str, ...]]] = {}
        self._own: set[Place] = set()
        self._generation = CONTROL_PLANES.generation  # the control planes the pins were judged by

    @classmethod
    def pinned_to(cls, allowlist: Allowlist, pins: tuple[tuple[str, int, tuple[str, ...]], ...]) -> Destinations:
        """Destinations another process admitted (``pins()``): a generator worker connects where its run's
        coordinator checked, and checks anything new (a redirect's host) against the same allowlist."""
        made = cls(allowlist)
        made._pins = {Place(host=host, port=port): addresses for host, port, addresses in pins}
        return made

    def pins(self) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
        """Every place admitted so far, as (host, port, addresses)."""
        return tuple((place.host, place.port, addresses) for place, addresses in self._pins.items())

    async def shared_allowlist(self) -> Allowlist:
        """The run's allowlist for another process (a generator worker, maybe on another machine) to check new
        places by: its deny list holds this process's control planes as they are now (which that process cannot
        see), the addresses its names resolve to here, and this host's own addresses where a rule covers them."""
        return self.allowlist.denying((await guarded(self.allowlist.denied)).for_another_host())

    async def recheck(self) -> None:
        """Judges every place admitted so far by the deny list as it is now: a control plane started after a place
        was admitted (a private Toxiproxy on a free port) may have taken that very place. Raises
        ``TargetNotAllowed`` naming the first such place; places cliffwatch opened itself (``own``) are ours."""
        denied = await guarded(self.allowlist.denied)
        for place, addresses in self._pins.items():
            if place in self._own:
                continue
            reason = denied.refusal(place.host, place.port, addresses)
            if reason is not None:
                raise TargetNotAllowed(f"http://{_host_port(place)}", reason)

    async def admit(self, url: str, allowlist: Allowlist | None = None, *, field: str | None = None) -> tuple[str, ...]:
        """The addresses ``url``'s host is pinned to, resolving and checking it on first sight (against
        ``allowlist``, by default the run's). Raises ``TargetNotAllowed`` (naming ``field``, the scenario's field
        that gave ``url``) when any address is outside it or denied, ``TargetUnreachable`` when an allowed name does
        not resolve (there is nothing to pin); a place refused once is refused again without a lookup."""
        try:
            return await self._admitted(url, allowlist)
        except TargetNotAllowed as exc:
            if field is None:
                raise
            raise TargetNotAllowed(url, exc.reason, field=field) from None

    async def _admitted(self, url: str, allowlist: Allowlist | None) -> tuple[str, ...]:
        place = Place.of(url)
        self._rejudge()
        pinned = self._pins.get(place)
        if pinned is not None:
            return pinned
        refused = self._refused.get(place)
        if refused is not None:
            raise refused.with_traceback(None)
        task = self._pending.get(place)
        if task is None:
            task = self._pending[place] = asyncio.ensure_future(self._admit(place, url, allowlist or self.allowlist))
        # Shielded: an attempt that times out waiting gives up its wait, not the lookup others share.
        return await asyncio.shield(task)

    async def _admit(self, place: Place, url: str, allowlist: Allowlist) -> tuple[str, ...]:
        try:
            if len(self._pins) >= MAX_PLACES:
                raise TargetNotAllowed(url, f"the run already connects to {MAX_PLACES:,} places, its most")
            addresses = await _checked(url, allowlist, unresolved_ok=False)
        except CliffwatchError as exc:
            if len(self._refused) < MAX_REFUSED:
                self._refused[place] = exc
            raise
        finally:
            self._pending.pop(place, None)
        return self._pins.setdefault(place, addresses)

    def own(self, url: str) -> None:
        """Admits a place cliffwatch itself opened on an IP address (the built-in target) without a check:
        it is no target of the allowlist's, and nothing else may be reached through its pin."""
        place = Place.of(url)
        if not place.literal:
            raise ValueError(f"only an IP address can be admitted unchecked, not {place.host}")
        self._pins.setdefault(place, (place.host,))
        self._own.add(place)

    def pinned(self, host: str, port: int) -> tuple[str, ...] | None:
        """The addresses admitted for ``host:port``, or None when the run never admitted it (or a control plane of
        this process holds it now)."""
        self._rejudge()
        return self._pins.get(Place(host=_key(host), port=port))

    def _rejudge(self) -> None:
        """Drops every pin a control plane of this process holds now, if they changed since the last look (an
        integer compared, nothing more, on every connection): the rules such a change adds are addresses, judged
        without a lookup."""
        generation = CONTROL_PLANES.generation
        if generation == self._generation:
            return
        self._generation = generation
        planes = DenyList(rules=CONTROL_PLANES.rules(), own_addresses=own_addresses())
        for place, addresses in list(self._pins.items()):
            reason = None if place in self._own else planes.refusal(place.host, place.port, addresses)
            if reason is not None:
                del self._pins[place]
                self._refused[place] = TargetNotAllowed(f"http://{_host_port(place)}", reason)
                log.warning("a place the run admitted is a control plane now: refused from here on", place=reason)


async def first_reachable(addresses: tuple[str, ...], port: int, *, timeout_s: float) -> str:
    """The first of ``addresses`` (already checked) that accepts a TCP connection on ``port``, else the first:
    where a name has several (localhost: ::1 and 127.0.0.1), something that takes a single address must be
    given one that answers. The connection is closed at once; nothing is sent on it."""
    for address in addresses if len(addresses) > 1 else ():
        try:
            async with asyncio.timeout(timeout_s):
                _, writer = await asyncio.open_connection(address, port)
        except (OSError, TimeoutError):
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return address
    return addresses[0]


def _host_port(place: Place) -> str:
    return f"[{place.host}]:{place.port}" if ":" in place.host else f"{place.host}:{place.port}"


def _key(host: str) -> str:
    """A host as pins are keyed: lower case, without a fully-qualified name's trailing dot or IPv6 brackets."""
    return host.lower().rstrip(".").strip("[]")
