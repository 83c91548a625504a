"""The deny list: what no allowlist can admit (metadata, link-local, cliffwatch's control planes), judged first."""

from __future__ import annotations

import pytest

from cliffwatch.domain.security.allowlist import Allowlist, parse_allowlist, parse_denied
from cliffwatch.domain.security.deny_list import (
    ALWAYS_DENIED,
    DenyList,
    DenyRule,
    database_rules,
    ray_rules,
    rule_for,
    rule_for_url,
)

TOXIPROXY = "cliffwatch's Toxiproxy API (CLIFFWATCH_TOXIPROXY_URL)"


def _allowlist(*items: str, denied: DenyList = ALWAYS_DENIED) -> Allowlist:
    allowlist, problems = parse_allowlist(items)
    assert problems == []
    assert allowlist is not None
    return allowlist.denying(denied)


EVERYTHING = _allowlist("0.0.0.0/0", "::/0")


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("169.254.169.254", ()),  # AWS, GCP, Azure, OCI, DigitalOcean metadata
        ("169.254.0.1", ()),
        ("fe80::1", ()),
        ("fe80::1%eth0", ()),
        ("fd00:ec2::254", ()),
        ("[fd00:ec2::254]", ()),
        ("100.100.100.200", ()),  # Alibaba Cloud
        ("168.63.129.16", ()),  # Azure's host
        ("::ffff:169.254.169.254", ()),  # IPv4-mapped
        ("::169.254.169.254", ()),  # IPv4-compatible
        ("64:ff9b::a9fe:a9fe", ()),  # NAT64
        ("2002:a9fe:a9fe::1", ()),  # 6to4
        ("metadata.google.internal", ("169.254.169.254",)),
        ("half.test", ("10.0.0.1", "169.254.169.254")),
    ],
)
def test_metadata_and_link_local_addresses_are_refused_whatever_the_allowlist_says(
    host: str, addresses: tuple[str, ...]
) -> None:
    """An allowlist of every address still refuses the cloud's metadata and link-local addresses, in any spelling
    of them and behind any name that resolves to one."""
    reason = EVERYTHING.check(host, 80, addresses)
    assert reason is not None
    assert "the deny list wins over every allowlist" in reason
    assert "link-local" in reason or "metadata" in reason or "cloud platform" in reason


def test_an_allowlist_naming_a_host_does_not_admit_it_when_it_resolves_to_a_denied_address() -> None:
    """A listed name is trusted to resolve where its owner means, but not to the metadata service."""
    allowlist = _allowlist("api.internal")
    assert allowlist.check("api.internal", 443, ("10.1.2.3",)) is None
    reason = allowlist.check("api.internal", 443, ("169.254.169.254",))
    assert reason is not None
    assert reason.startswith("api.internal:443 (resolves to 169.254.169.254) is a link-local address")


def test_other_addresses_are_judged_by_the_allowlist_alone() -> None:
    """The deny list adds no refusal of its own to ordinary addresses."""
    for host in ("10.0.0.1", "127.0.0.1", "::1", "8.8.8.8", "fd00::1", "169.255.0.1", "100.100.100.201"):
        assert EVERYTHING.check(host, 80, ()) is None, host


TOXIPROXY_ON_LOOPBACK = DenyList(rules=(rule_for("127.0.0.1", 18474, TOXIPROXY),), own_addresses=("192.0.2.2",))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "127.255.0.9", "::1", "0.0.0.0", "::", "192.0.2.2",
                                  "::ffff:127.0.0.1"])  # fmt: skip
def test_a_control_plane_on_this_host_is_refused_at_every_address_of_this_host(host: str) -> None:
    """A server bound to the wildcard answers on every loopback address, on the unspecified one and on this
    host's own addresses: its port is refused at each of them, naming what it is."""
    allowlist = _allowlist("0.0.0.0/0", "::/0", denied=TOXIPROXY_ON_LOOPBACK)
    reason = allowlist.check(host, 18474, ())
    assert reason is not None
    assert f"{host}]:18474 is {TOXIPROXY}" in reason or f"{host}:18474 is {TOXIPROXY}" in reason


def test_a_control_plane_leaves_other_ports_and_other_hosts_alone() -> None:
    allowlist = _allowlist("0.0.0.0/0", "::/0", denied=TOXIPROXY_ON_LOOPBACK)
    assert allowlist.check("127.0.0.1", 18475, ()) is None
    assert allowlist.check("10.0.0.1", 18474, ()) is None


def test_a_remote_control_plane_is_refused_at_its_address_and_names_only() -> None:
    """A database on another host: its address and port, and any name resolving there; not this host's port."""
    denied = ALWAYS_DENIED.adding(database_rules("postgresql+asyncpg://cw:pw@db.internal:5433/cw"))
    denied = denied.resolved({"db.internal": ("10.0.0.7",)}, ())
    allowlist = _allowlist("10.0.0.0/8", "127.0.0.0/8", denied=denied)
    for host, addresses in (("db.internal", ()), ("10.0.0.7", ()), ("alias.internal", ("10.0.0.7",))):
        reason = allowlist.check(host, 5433, addresses)
        assert reason is not None
        assert "cliffwatch's database (CLIFFWATCH_DATABASE_URL)" in reason
    assert allowlist.check("10.0.0.8", 5433, ()) is None
    assert allowlist.check("127.0.0.1", 5433, ()) is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite+aiosqlite:///./cliffwatch.db", []),
        ("sqlite+aiosqlite:////var/lib/cw.db", []),
        ("postgresql+asyncpg://cw:pw@db:5432/cw", [("db", None, 5432)]),
        ("postgresql+asyncpg://cw:pw@db/cw", [("db", None, 5432)]),
        ("postgresql+asyncpg://cw:p@ss@10.0.0.5/cw", [(None, "10.0.0.5/32", 5432)]),
        ("postgresql+asyncpg://cw@[fd00::5]:6000/cw", [(None, "fd00::5/128", 6000)]),
        ("postgresql+asyncpg://cw@a:5432,b:5433/cw", [("a", None, 5432), ("b", None, 5433)]),
        ("postgresql+asyncpg://cw@/cw?host=/run/postgresql", []),
        ("postgresql+asyncpg://cw@/cw?host=10.0.0.9,db2&port=6543", [(None, "10.0.0.9/32", 6543), ("db2", None, 5432)]),
    ],
)
def test_the_database_url_gives_its_network_places(
    url: str, expected: list[tuple[str | None, str | None, int]]
) -> None:
    rules = database_rules(url)
    assert [(r.host, None if r.network is None else str(r.network), r.port) for r in rules] == expected


@pytest.mark.parametrize(
    ("address", "ports"),
    [
        (None, set()),
        ("auto", {6379, 10001, 8265, 52365}),
        ("10.0.0.9:6380", {6380, 6379, 10001, 8265, 52365}),
        ("ray://head.internal:10002", {10002, 6379, 10001, 8265, 52365}),
    ],
)
def test_a_ray_cluster_gives_its_address_and_its_services_default_ports(address: str | None, ports: set[int]) -> None:
    """Its dashboard and dashboard agent run jobs (arbitrary commands): each is denied on the head's host."""
    rules = ray_rules(address)
    assert {r.port for r in rules} == ports
    assert len({r.host or str(r.network) for r in rules}) <= 1
    named = [r.what for r in rules if "at its default port" not in r.what]
    assert len(named) == (0 if address is None else 1)


def test_a_toxiproxy_url_is_denied_at_its_port_or_the_schemes_default() -> None:
    given = rule_for_url("http://127.0.0.1:18474", TOXIPROXY)
    default = rule_for_url("https://toxiproxy.internal", TOXIPROXY)
    assert given is not None
    assert default is not None
    assert (str(given.network), given.port) == ("127.0.0.1/32", 18474)
    assert (default.host, default.port) == ("toxiproxy.internal", 443)
    assert rule_for_url("unix:///run/toxiproxy.sock", TOXIPROXY) is None


def test_denied_targets_are_written_as_allowlist_entries_and_bad_ones_are_named() -> None:
    rules, problems = parse_denied(["10.0.0.0/8", "api.internal:8443", "[::1]:9000", "not a host", "h:99999"])
    assert [(r.host, None if r.network is None else str(r.network), r.port) for r in rules] == [
        (None, "10.0.0.0/8", None),
        ("api.internal", None, 8443),
        (None, "::1/128", 9000),
    ]
    assert [p.path for p in problems] == ["denied_targets[3]", "denied_targets[4]"]
    assert rules[1].what == "denied by CLIFFWATCH_DENIED_TARGETS (api.internal:8443)"
    denied = ALWAYS_DENIED.adding(rules)
    reason = _allowlist("0.0.0.0/0", denied=denied).check("10.9.9.9", 80, ())
    assert reason is not None
    assert "denied by CLIFFWATCH_DENIED_TARGETS (10.0.0.0/8)" in reason


def test_a_named_rule_is_matched_by_name_before_it_resolves_and_by_address_after() -> None:
    rule = DenyRule(what="the thing", host="plane.internal", port=9)
    unresolved = DenyList(rules=(rule,))
    assert unresolved.names() == ("plane.internal",)
    assert unresolved.refusal("PLANE.internal.", 9, ()) is not None
    assert unresolved.refusal("other.internal", 9, ("10.0.0.1",)) is None
    resolved = unresolved.resolved({"plane.internal": ("10.0.0.1",)}, ())
    assert resolved.refusal("other.internal", 9, ("10.0.0.1",)) is not None
    assert resolved.refusal("other.internal", 10, ("10.0.0.1",)) is None
    assert unresolved.adding([rule]).rules == (rule,)


def test_another_host_holds_this_hosts_addresses_where_a_rule_covered_them() -> None:
    """A Ray worker on another machine: "this host" is its own there, so the coordinator's Toxiproxy on loopback
    (bound to the wildcard) must be named at the coordinator's network address; names keep what they resolved to."""
    here = DenyList(
        rules=(rule_for("127.0.0.1", 8474, TOXIPROXY), rule_for("db.internal", 5432, "the database")),
        own_addresses=("127.0.0.1", "192.0.2.2"),
    ).resolved({"db.internal": ("10.0.0.7",)}, ("127.0.0.1", "192.0.2.2"))
    there = here.for_another_host().resolved({}, ("10.1.1.1",))  # the worker looks nothing up that it cannot
    assert there.refusal("192.0.2.2", 8474, ()) is not None
    assert there.refusal("192.0.2.2", 8475, ()) is None
    assert there.refusal("10.0.0.7", 5432, ()) is not None
    assert there.refusal("10.1.1.1", 8474, ()) is not None  # the worker's own Toxiproxy port too: denied, harmless
