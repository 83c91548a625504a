"""Checking a target URL against the allowlist, with real resolution of localhost and literal IPs only.

No public name is ever resolved here: names that must fail to resolve use a stubbed resolver or a name
that the IDNA codec rejects before any lookup; "resolves elsewhere" is covered in test_allowlist.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from cliffwatch.adapters.network import control_planes, target_access
from cliffwatch.adapters.network.control_planes import CONTROL_PLANES
from cliffwatch.adapters.network.target_access import Destinations, ensure_allowed, first_reachable
from cliffwatch.domain.errors import CliffwatchError, TargetNotAllowed
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, Allowlist, parse_allowlist
from cliffwatch.domain.security.deny_list import ALWAYS_DENIED, database_rules, rule_for


def _allowlist(*items: str) -> Allowlist:
    allowlist, problems = parse_allowlist(items or DEFAULT_ALLOWLIST)
    assert problems == []
    assert allowlist is not None
    return allowlist


@pytest.fixture
async def unresolvable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every name lookup on the running loop fails, as for a name that does not exist."""

    async def fail(host: str, port: int, **kwargs: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", fail)


@pytest.mark.parametrize(
    "url",
    ["http://localhost:8000", "http://127.0.0.1:8000/v1", "https://127.9.0.1", "http://[::1]:8000", "http://LocalHost"],
)
async def test_loopback_targets_are_allowed_by_default(url: str) -> None:
    """Loopback addresses and localhost pass the default allowlist."""
    await ensure_allowed(url, _allowlist())


@pytest.mark.parametrize("url", ["http://10.0.0.1:8000", "https://192.168.1.10/v1", "http://[fd00::1]:80"])
async def test_other_addresses_are_refused_by_default(url: str) -> None:
    """Private and other non-loopback addresses raise TargetNotAllowed naming the URL and the setting."""
    with pytest.raises(TargetNotAllowed) as caught:
        await ensure_allowed(url, _allowlist())
    assert caught.value.url == url
    assert "CLIFFWATCH_ALLOWED_TARGETS" in str(caught.value)
    assert str(caught.value).startswith(f"target {url} is not allowed: ")


async def test_a_configured_network_allows_its_addresses() -> None:
    """An address inside a listed network is allowed."""
    await ensure_allowed("http://10.1.2.3:8000", _allowlist("10.0.0.0/8"))


async def test_localhost_is_refused_when_loopback_is_not_listed() -> None:
    """localhost resolves to loopback, which a list without loopback refuses, saying where it resolved."""
    with pytest.raises(TargetNotAllowed, match=r"localhost:8000 \(resolves to [^)]*(127\.0\.0\.1|::1)"):
        await ensure_allowed("http://localhost:8000", _allowlist("10.0.0.0/8"))


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://127.0.0.1", True),  # https defaults to 443
        ("http://127.0.0.1", False),  # http defaults to 80
        ("http://127.0.0.1:443/v1", True),
        ("https://127.0.0.1:8443", False),
    ],
)
async def test_the_port_is_the_urls_or_the_schemes_default(url: str, allowed: bool) -> None:
    """A port-qualified entry matches the URL's explicit port, or 80/443 from its scheme."""
    allowlist = _allowlist("127.0.0.1:443")
    if allowed:
        await ensure_allowed(url, allowlist)
    else:
        with pytest.raises(TargetNotAllowed):
            await ensure_allowed(url, allowlist)


async def test_a_port_qualified_ipv6_entry_matches_only_its_port() -> None:
    """[::1]:8000 allows ::1 on port 8000 and nowhere else."""
    allowlist = _allowlist("[::1]:8000")
    await ensure_allowed("http://[::1]:8000/v1", allowlist)
    with pytest.raises(TargetNotAllowed):
        await ensure_allowed("http://[::1]:8001/v1", allowlist)


@pytest.mark.usefixtures("unresolvable")
async def test_a_name_that_does_not_resolve_is_refused_with_the_lookup_error() -> None:
    """An unlisted name that cannot be resolved is refused, and the reason says it does not resolve."""
    with pytest.raises(TargetNotAllowed, match=r"the host does not resolve: .*Name or service not known"):
        await ensure_allowed("http://llm.internal:8000", _allowlist())


@pytest.mark.usefixtures("unresolvable")
async def test_a_listed_name_is_allowed_even_when_it_does_not_resolve() -> None:
    """A host named in the allowlist is allowed by name; resolving it is not needed."""
    await ensure_allowed("http://llm.internal:8000", _allowlist("llm.internal"))


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:99999/",  # port out of range
        "http://[::1:8000/",  # an unclosed IPv6 bracket
        "http://" + "a" * 64 + ".example/",  # a label too long for IDNA: rejected before any lookup
        "http:///v1",  # no host at all
    ],
)
async def test_unusable_urls_are_refused_as_not_allowed(url: str) -> None:
    """A URL whose host or port cannot be checked raises TargetNotAllowed, never another exception."""
    with pytest.raises(CliffwatchError) as caught:
        await ensure_allowed(url, _allowlist())
    assert isinstance(caught.value, TargetNotAllowed)
    assert caught.value.url == url


async def test_of_several_addresses_a_proxy_is_given_the_first_that_accepts_a_connection() -> None:
    """Toxiproxy takes one upstream address: of a name's checked addresses, the first that answers on the
    port (nothing listens on 127.0.0.2 here), or the first when only one is known."""
    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await first_reachable(("127.0.0.2", "127.0.0.1"), port, timeout_s=1.0) == "127.0.0.1"
        assert await first_reachable(("127.0.0.2",), port, timeout_s=1.0) == "127.0.0.2"
    finally:
        server.close()
        await server.wait_closed()


async def test_only_an_ip_address_can_be_admitted_unchecked() -> None:
    destinations = Destinations(_allowlist("10.0.0.0/8"))
    destinations.own("http://127.0.0.1:8000")
    assert destinations.pinned("127.0.0.1", 8000) == ("127.0.0.1",)
    assert destinations.pinned("127.0.0.1", 8001) is None
    with pytest.raises(ValueError, match="only an IP address"):
        destinations.own("http://localhost:8000")


async def test_a_place_is_looked_up_once_refused_or_admitted_and_at_once_shared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A target redirecting every request to a name outside the allowlist costs one lookup, not one an attempt;
    admissions of one place at once share its lookup; an admitted place is pinned."""
    asked: list[str] = []

    async def counted(host: str, port: int) -> list[str]:
        asked.append(host)
        await asyncio.sleep(0.01)
        return ["203.0.113.7"] if host == "elsewhere.example" else ["127.0.0.1"]

    monkeypatch.setattr(target_access, "lookup", counted)
    destinations = Destinations(_allowlist())
    for _ in range(5):
        with pytest.raises(TargetNotAllowed):
            await destinations.admit("http://elsewhere.example/x")
    assert asked == ["elsewhere.example"]
    pins = await asyncio.gather(*(destinations.admit("http://here.example/y") for _ in range(5)))
    assert pins == [("127.0.0.1",)] * 5
    assert asked == ["elsewhere.example", "here.example"]


async def test_a_control_plane_this_process_runs_is_refused_while_it_runs_and_only_then() -> None:
    """A private Toxiproxy (or a joined Ray cluster) is denied to every check of this process while it is held,
    at its port on every loopback address, whatever the allowlist says; released, the place is a target again."""
    allowlist = _allowlist("127.0.0.0/8", "::1")
    rule = rule_for("127.0.0.1", 18999, "cliffwatch's Toxiproxy API (a private one this process started)")
    with CONTROL_PLANES.holding(rule):
        for url in ("http://127.0.0.1:18999/reset", "http://127.0.0.7:18999", "http://[::1]:18999"):
            with pytest.raises(TargetNotAllowed, match="a private one this process started") as caught:
                await ensure_allowed(url, allowlist, field="target.url")
            assert str(caught.value).startswith(f"target.url: {url} is not allowed: ")
        await ensure_allowed("http://127.0.0.1:18998", allowlist)
        shared = await Destinations(allowlist).shared_allowlist()  # what a worker process judges new places by
        assert rule in shared.denied.rules
    await ensure_allowed("http://127.0.0.1:18999", allowlist)


async def test_a_place_a_control_plane_took_after_it_was_admitted_is_refused_on_recheck() -> None:
    """A private Toxiproxy binds a free port after the target was admitted: if that port is the target's, the run
    is refused before any load; places cliffwatch opened itself (the built-in target) are never refused."""
    destinations = Destinations(_allowlist())
    await destinations.admit("http://127.0.0.1:18997")
    destinations.own("http://127.0.0.1:18996")
    await destinations.recheck()
    taken = rule_for("127.0.0.1", 18997, "cliffwatch's Toxiproxy API")
    with CONTROL_PLANES.holding(taken), pytest.raises(TargetNotAllowed, match=r":18997 is cliffwatch's Toxiproxy"):
        await destinations.recheck()
    with CONTROL_PLANES.holding(rule_for("127.0.0.1", 18996, "cliffwatch's Toxiproxy API")):
        await destinations.recheck()


async def test_a_denied_name_is_looked_up_and_its_addresses_are_denied_under_any_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database is configured by name: another name resolving to the same address is refused at its port."""

    async def lookup(host: str, port: int | None, **kwargs: Any) -> list[Any]:
        address = {"db.test": "127.0.0.44", "alias.test": "127.0.0.44"}[host]
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port or 0))]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", lookup)
    monkeypatch.setattr(control_planes, "_answers", {})
    allowlist = _allowlist("127.0.0.0/8").denying(ALWAYS_DENIED.adding(database_rules("postgresql://u@db.test/cw")))
    with pytest.raises(TargetNotAllowed, match=r"alias\.test:5432 \(resolves to 127\.0\.0\.44\) is cliffwatch's data"):
        await ensure_allowed("http://alias.test:5432", allowlist)
    with pytest.raises(TargetNotAllowed, match="cliffwatch's database"):
        await ensure_allowed("http://127.0.0.1:5432", allowlist)  # on this host: every loopback address


async def test_a_pin_a_control_plane_takes_later_is_dropped_before_the_next_connection() -> None:
    """Another run's private Toxiproxy starts on a port this run admitted (a redirect hop, say): the next
    connection finds no pin there and the next admission is refused naming it; the built-in target is never."""
    destinations = Destinations(_allowlist())
    await destinations.admit("http://127.0.0.1:18995/x")
    destinations.own("http://127.0.0.1:18994")
    assert destinations.pinned("127.0.0.1", 18995) == ("127.0.0.1",)
    with CONTROL_PLANES.holding(rule_for("127.0.0.1", 18995, "cliffwatch's Toxiproxy API (another run's)")):
        assert destinations.pinned("127.0.0.1", 18995) is None
        with pytest.raises(TargetNotAllowed, match="another run's"):
            await destinations.admit("http://127.0.0.1:18995/reset")
    with CONTROL_PLANES.holding(rule_for("127.0.0.1", 18994, "cliffwatch's Toxiproxy API (another run's)")):
        assert destinations.pinned("127.0.0.1", 18994) == ("127.0.0.1",)


async def test_a_run_admits_at_most_so_many_places(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(target_access, "MAX_PLACES", 3)
    destinations = Destinations(_allowlist())
    for port in (18001, 18002, 18003):
        await destinations.admit(f"http://127.0.0.1:{port}")
    with pytest.raises(TargetNotAllowed, match="already connects to 3 places"):
        await destinations.admit("http://127.0.0.1:18004")
    assert await destinations.admit("http://127.0.0.1:18002") == ("127.0.0.1",)  # admitted ones stay
