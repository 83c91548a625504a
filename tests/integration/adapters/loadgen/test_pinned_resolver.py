"""DNS pinning against real loopback servers and a name lookup that rebinds: the first answer is loopback,
every later one an address outside the allowlist (203.0.113.7, TEST-NET-3).

Nothing is ever sent to a non-loopback address: every socket the client opens goes through ``guard``, which
records the address and refuses anything that is not loopback, so a failure here shows up as a refusal
in the record, never as traffic leaving the machine.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import aiohappyeyeballs
import aiohttp
import pytest
from aiohttp import web
from loadgen_testkit import Serve, planned, scenario_for

from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.loadgen.pinned_resolver import PinnedResolver, PinRefused
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.errors import TargetNotAllowed
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.security.allowlist import Allowlist, parse_allowlist

OUTSIDE = "203.0.113.7"


def loopback_only() -> Allowlist:
    allowlist, _ = parse_allowlist(["127.0.0.0/8"])
    assert allowlist is not None
    return allowlist


@dataclass
class Rebinding:
    """A name lookup that answers 127.0.0.1 for a name's first lookup and ``OUTSIDE`` for every later one."""

    lookups: list[str] = field(default_factory=list)

    async def getaddrinfo(self, host: str, port: int, **kwargs: Any) -> list[Any]:
        first = host not in self.lookups
        self.lookups.append(host)
        address = "127.0.0.1" if first else OUTSIDE
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]


@dataclass
class Guard:
    """Every address the client tried to open a socket to; non-loopback ones are refused, never dialled."""

    dialled: list[str] = field(default_factory=list)


async def ok(request: web.Request) -> web.StreamResponse:
    return web.Response(text="fine")


@pytest.fixture
async def rebinding(monkeypatch: pytest.MonkeyPatch) -> Rebinding:
    stub = Rebinding()
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", stub.getaddrinfo)
    return stub


@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch) -> Guard:
    seen = Guard()
    original = aiohappyeyeballs.start_connection

    async def start_connection(addr_infos: list[Any], **kwargs: Any) -> socket.socket:
        addresses = [str(info[4][0]) for info in addr_infos]
        seen.dialled += addresses
        if not all(ipaddress.ip_address(a).is_loopback for a in addresses):
            raise OSError(f"test guard: refused to dial {addresses}")
        return await original(addr_infos, **kwargs)

    monkeypatch.setattr(aiohappyeyeballs, "start_connection", start_connection)
    return seen


async def test_a_name_is_looked_up_once_and_every_connection_goes_to_the_address_checked(
    serve: Serve, rebinding: Rebinding, guard: Guard
) -> None:
    """Admitted once (127.0.0.1), the name keeps that address for every request and every new connection,
    although every later lookup would say 203.0.113.7: the run never looks it up again."""
    served = await serve(ok)
    port = served.url.rsplit(":", 1)[1]
    url = f"http://rebind.test:{port}"
    destinations = Destinations(loopback_only())
    assert await destinations.admit(url) == ("127.0.0.1",)

    scenario = scenario_for(url, api="http", client={"pool_size": 1})
    async with HttpExecutor(scenario, url, destinations=destinations) as executor:
        for request in range(3):
            attempt = await executor.attempt(planned(request), 1, 5.0, origin_ns=0, deadline_bound=False)
            assert attempt.succeeded, attempt.error
        await executor.preflight()

    assert len(served.requests) == 4
    assert rebinding.lookups == ["rebind.test"]
    assert set(guard.dialled) == {"127.0.0.1"}


async def test_a_host_the_run_never_admitted_is_refused_by_the_resolver_before_any_socket_opens(
    serve: Serve, rebinding: Rebinding, guard: Guard
) -> None:
    """The connector asks the run's resolver, which answers only pinned places: another name, or the pinned
    name on another port, fails as a lookup refused by cliffwatch; nothing is looked up or dialled."""
    served = await serve(ok)
    port = int(served.url.rsplit(":", 1)[1])
    destinations = Destinations(loopback_only())
    await destinations.admit(f"http://rebind.test:{port}")
    connector = aiohttp.TCPConnector(resolver=PinnedResolver(destinations), use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        for url in (f"http://elsewhere.test:{port}/", f"http://rebind.test:{port + 1}/"):
            with pytest.raises(aiohttp.ClientConnectorDNSError) as caught:
                await session.get(url)
            assert isinstance(caught.value.os_error, PinRefused)
            assert "not admitted for this run" in str(caught.value.os_error)

    assert rebinding.lookups == ["rebind.test"]  # the admission's own, nothing since
    assert guard.dialled == []
    assert served.requests == []


async def test_a_followed_redirect_to_a_name_that_resolves_outside_is_refused_before_anything_is_sent(
    serve: Serve, rebinding: Rebinding, guard: Guard
) -> None:
    """A hop is resolved and checked before it is sent: a name whose lookup says 203.0.113.7 (its second
    lookup, so the target's check saw loopback) ends the attempt as refused, naming it."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": f"http://rebind.test:{port}/next"})

    served = await serve(handler)
    port = served.url.rsplit(":", 1)[1]
    await rebinding.getaddrinfo("rebind.test", 0)  # someone looked it up already: the next answer is outside
    destinations = Destinations(loopback_only())
    scenario = scenario_for(served.url, api="http", client={"follow_redirects": True})
    async with HttpExecutor(scenario, served.url, destinations=destinations) as executor:
        attempt = await executor.attempt(planned(), 1, 5.0, origin_ns=time.perf_counter_ns(), deadline_bound=False)

    assert attempt.failure is FailureKind.REFUSED
    assert attempt.error is not None
    assert f"redirect to http://rebind.test:{port}/next refused" in attempt.error
    assert OUTSIDE in attempt.error
    assert destinations.pinned("rebind.test", int(port)) is None
    assert guard.dialled == ["127.0.0.1"]  # the target, never the hop
    assert len(served.requests) == 1


async def test_admitting_a_name_that_resolves_outside_the_allowlist_raises_and_pins_nothing(
    rebinding: Rebinding,
) -> None:
    await rebinding.getaddrinfo("rebind.test", 0)
    destinations = Destinations(loopback_only())
    with pytest.raises(TargetNotAllowed, match=OUTSIDE):
        await destinations.admit("http://rebind.test:8000")
    assert destinations.pinned("rebind.test", 8000) is None
