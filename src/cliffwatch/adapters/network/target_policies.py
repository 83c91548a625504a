"""The submit-time ``TargetPolicy`` s: where a scenario's places may point, judged before a run is queued.

``AllowlistPolicy`` is the service's (and a run's start judges the same through ``Destinations``): targets,
metrics pages and proxy upstreams against the target allowlist, listen addresses against theirs, and a proxy's
upstream also against where Toxiproxy runs: a Toxiproxy on another host (the compose file's own container)
connects to an upstream from there, so a loopback upstream is its own host's loopback, its own API among what
listens there. ``DenyListPolicy`` is ``cliffwatch validate``'s: the deny list alone, since the allowlist is the
instance's that will run the scenario.
"""

from __future__ import annotations

from collections.abc import Sequence

from cliffwatch.adapters.network.control_planes import guarded
from cliffwatch.adapters.network.host_addresses import own_addresses
from cliffwatch.adapters.network.target_access import Place, ensure_allowed, lookup
from cliffwatch.domain.errors import TargetNotAllowed
from cliffwatch.domain.security.allowlist import Allowlist
from cliffwatch.domain.security.deny_list import DenyList, as_ip


class AllowlistPolicy:
    """The service's ``TargetPolicy``: targets and proxy upstreams against the target allowlist, proxy
    listen addresses against theirs (loopback only unless configured), upstreams against where Toxiproxy runs."""

    def __init__(self, allowlist: Allowlist, *, listen: Allowlist, toxiproxy_url: str | None = None) -> None:
        self.allowlist = allowlist
        self.listen = listen
        self.toxiproxy_url = toxiproxy_url

    async def check(self, url: str) -> str | None:
        return await _reason(url, self.allowlist)

    async def check_upstream(self, url: str) -> str | None:
        return await self.check(url) or await upstream_problem(await _addresses(url), self.toxiproxy_url)

    async def check_listen(self, address: str) -> str | None:
        return await _reason(f"http://{address}", self.listen)


class DenyListPolicy:
    """A ``TargetPolicy`` that judges the deny list alone (``cliffwatch validate``): a scenario may be written for
    another instance, whose allowlist this process does not know, but no instance may aim at what is denied."""

    def __init__(self, denied: DenyList, *, toxiproxy_url: str | None = None) -> None:
        self.denied = denied
        self.toxiproxy_url = toxiproxy_url

    async def check(self, url: str) -> str | None:
        try:
            place = Place.of(url)
        except TargetNotAllowed as exc:
            return exc.reason
        addresses = await _addresses(url)
        return (await guarded(self.denied)).refusal(place.host, place.port, addresses)

    async def check_upstream(self, url: str) -> str | None:
        return await self.check(url) or await upstream_problem(await _addresses(url), self.toxiproxy_url)

    async def check_listen(self, address: str) -> str | None:
        return await self.check(f"http://{address}")


async def upstream_problem(addresses: Sequence[str], toxiproxy_url: str | None) -> str | None:
    """Why the Toxiproxy at ``toxiproxy_url`` (None: a private one on this host) may not be given an upstream on
    ``addresses``: a loopback or unspecified one, when that Toxiproxy runs on another host; or None."""
    local = [a for a in addresses if (ip := as_ip(a)) is not None and (ip.is_loopback or ip.is_unspecified)]
    if toxiproxy_url is None or not local:
        return None
    place = Place.of(toxiproxy_url)
    try:
        planes = (place.host,) if place.literal else tuple(await lookup(place.host, place.port))
    except (OSError, UnicodeError):
        planes = ()  # where it runs is unknown: taken as another host, the safe reading
    here = {ip for ip in map(as_ip, own_addresses()) if ip is not None}
    ips = [ip for ip in map(as_ip, planes) if ip is not None]
    if ips and all(ip.is_loopback or ip.is_unspecified or ip in here for ip in ips):
        return None
    return (f"{', '.join(local)} is this host's loopback, but Toxiproxy ({toxiproxy_url}) runs on another host, "
            f"where that address is its own host's (its own API listens there): name the upstream by an address "
            f"Toxiproxy's host reaches")  # fmt: skip


async def _addresses(url: str) -> tuple[str, ...]:
    """What ``url``'s host resolves to here (an IP is itself), or () when it does not: judged by name then, and
    again where the run starts."""
    try:
        place = Place.of(url)
        return (place.host,) if place.literal else tuple(await lookup(place.host, place.port))
    except (TargetNotAllowed, OSError, UnicodeError):
        return ()


async def _reason(url: str, allowlist: Allowlist) -> str | None:
    try:
        await ensure_allowed(url, allowlist)
    except TargetNotAllowed as exc:
        return exc.reason
    return None
