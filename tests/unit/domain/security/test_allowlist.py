"""The target allowlist: loopback by default; networks, hosts and ports when configured; bad entries named."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, Allowlist, parse_allowlist


def _allowlist(*items: str) -> Allowlist:
    allowlist, problems = parse_allowlist(items)
    assert problems == []
    assert allowlist is not None
    return allowlist


DEFAULT = _allowlist(*DEFAULT_ALLOWLIST)


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("127.0.0.1", ()),
        ("127.5.5.5", ()),
        ("::1", ()),
        ("[::1]", ()),
        ("localhost", ()),
        ("LOCALHOST", ()),
        ("ip6-localhost", ("::1",)),
        ("loopback.test", ("127.0.0.1", "::1")),
    ],
)
def test_the_default_allows_loopback(host: str, addresses: Sequence[str]) -> None:
    """Loopback addresses, localhost, and names resolving only to loopback are allowed by default."""
    assert DEFAULT.check(host, 8000, addresses) is None


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("10.0.0.1", ()),
        ("8.8.8.8", ()),
        ("::2", ()),
        ("0.0.0.0", ()),
        ("::ffff:127.0.0.1", ()),
        ("example.com", ("93.184.215.14",)),
        ("example.com", ()),
        ("half.test", ("127.0.0.1", "10.1.2.3")),
    ],
)
def test_the_default_refuses_everything_else(host: str, addresses: Sequence[str]) -> None:
    """Other addresses, and names resolving (even partly) elsewhere or not at all, are refused."""
    reason = DEFAULT.check(host, 8000, addresses)
    assert reason is not None
    assert "CLIFFWATCH_ALLOWED_TARGETS" in reason
    assert f"{host}:8000" in reason
    assert "127.0.0.0/8, ::1/128, localhost" in reason


def test_a_refusal_names_the_addresses_a_host_resolved_to() -> None:
    """The reason shows where a refused name points, so the user sees why it is refused."""
    reason = DEFAULT.check("example.com", 443, ["93.184.215.14", "2606:2800::1"])
    assert reason is not None
    assert reason.startswith("example.com:443 (resolves to 93.184.215.14, 2606:2800::1) is not in the target allowlist")


@pytest.mark.parametrize(
    ("entry", "host", "port", "addresses", "allowed"),
    [
        ("10.0.0.0/8", "10.20.30.40", 80, (), True),
        ("10.0.0.0/8", "11.0.0.1", 80, (), False),
        ("10.0.0.0/8", "svc.internal", 80, ("10.1.1.1", "10.2.2.2"), True),
        ("10.0.0.0/8", "svc.internal", 80, ("10.1.1.1", "192.168.0.1"), False),
        ("10.1.2.3/8", "10.9.9.9", 80, (), True),  # host bits are ignored, as ip_network(strict=False)
        ("fd00::/8", "fd12::1", 80, (), True),
        ("fd00::/8", "fe80::1", 80, (), False),
        ("api.internal", "api.internal", 8443, (), True),
        ("api.internal", "API.Internal", 1, (), True),
        ("api.internal", "other.internal", 8443, (), False),
        ("api.internal:8443", "api.internal", 8443, (), True),
        ("api.internal:8443", "api.internal", 443, (), False),
        ("[::1]:8000", "::1", 8000, (), True),
        ("[::1]:8000", "::1", 8001, (), False),
        ("[::1]", "::1", 9, (), True),
        ("10.0.0.0/8:8000", "10.3.3.3", 8000, (), True),
        ("10.0.0.0/8:8000", "10.3.3.3", 8001, (), False),
        ("10.0.0.0/8:8000", "svc.internal", 8000, ("10.3.3.3",), True),
        ("10.0.0.0/8:8000", "svc.internal", 9000, ("10.3.3.3",), False),
        ("192.168.1.5", "192.168.1.5", 80, (), True),
        ("192.168.1.5", "192.168.1.6", 80, (), False),
        ("fd00::1", "fd00::1%eth0", 80, (), True),  # a zone index does not change the address
    ],
)
def test_configured_entries(entry: str, host: str, port: int, addresses: tuple[str, ...], allowed: bool) -> None:
    """Networks, single addresses and host names, each optionally limited to one port, allow what they name."""
    reason = _allowlist(entry).check(host, port, addresses)
    assert (reason is None) is allowed, reason


def test_a_host_entry_does_not_open_its_resolved_addresses_to_other_names() -> None:
    """Listing a name allows that name, not another name that resolves to the same address."""
    allowlist = _allowlist("api.internal")
    assert allowlist.check("api.internal", 80, ["10.0.0.5"]) is None
    assert allowlist.check("evil.internal", 80, ["10.0.0.5"]) is not None


def test_an_empty_allowlist_allows_nothing() -> None:
    """With no entries even loopback is refused, and the reason says the list is empty."""
    allowlist = _allowlist()
    reason = allowlist.check("127.0.0.1", 80, [])
    assert reason is not None
    assert "(nothing)" in reason


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "   ",
        "not a host",
        "host:port",
        "localhost:",
        "localhost:0",
        "localhost:65536",
        "10.0.0.0/33",
        "[::1",
        "[::1]8000",
        "[::1]:http",
        "*.internal",
        "a..b",
        "under_score.internal",
        "https://api.internal",
    ],
)
def test_malformed_entries_are_refused(entry: str) -> None:
    """An entry that is not a host, IP or CIDR with an optional valid port is a problem, not an entry."""
    allowlist, problems = parse_allowlist([entry])
    assert allowlist is None
    assert [p.path for p in problems] == ["allowed_targets[0]"]
    assert repr(entry) in problems[0].message


def test_malformed_entries_are_reported_by_position() -> None:
    """Each bad entry is named by its index among the entries; the good ones in between are not reported."""
    allowlist, problems = parse_allowlist(["127.0.0.1", "bad entry", "::1", "host:99999", "localhost"])
    assert allowlist is None
    assert [(p.path, p.message) for p in problems] == [
        ("allowed_targets[1]", "not a host, IP or CIDR: 'bad entry'"),
        ("allowed_targets[3]", "not a host, IP or CIDR: 'host:99999'"),
    ]


def test_entries_are_trimmed_and_described() -> None:
    """Surrounding spaces are ignored, and each entry describes itself in its normal form."""
    allowlist = _allowlist(" 10.1.2.3/8 ", "[::1]:8000", "API.internal:8443", "127.0.0.1")
    assert [e.describe() for e in allowlist.entries] == [
        "10.0.0.0/8",
        "[::1/128]:8000",
        "api.internal:8443",
        "127.0.0.1/32",
    ]


@pytest.mark.parametrize(
    "entry", ["10.0.0.0/8", "10.0.0.0/8:8000", "::1", "[::1]:8000", "[fd00::/8]:443", "api.internal:8443", "localhost"]
)
def test_a_described_entry_reads_back_as_the_same_entry(entry: str) -> None:
    """describe() writes an entry the way the allowlist is configured, so it parses back unchanged."""
    (parsed,) = _allowlist(entry).entries
    assert _allowlist(parsed.describe()).entries == (parsed,)
