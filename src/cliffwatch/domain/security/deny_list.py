"""Where load may never go, whatever an allowlist says: cliffwatch's own control planes and the cloud's metadata.

The allowlist says where a run may send; the deny list says where it never may, and wins over every allowlist
(targets, metrics URLs, proxy upstreams and listen addresses, redirect hops, every address a name resolves
to). Its rules:

- always: link-local addresses (169.254.0.0/16, fe80::/10) and the clouds' metadata addresses
  (``fd00:ec2::254``, Alibaba's 100.100.100.200, Azure's 168.63.129.16), the classic targets of a
  server-side request forgery;
- the control planes cliffwatch itself talks to, by address and port (``rule_for_url``, ``database_rules``,
  ``ray_rules``): its Toxiproxy API, its database, its Ray cluster; through them a run could remove another
  run's faults, read the store, or start a job on the cluster;
- the operator's own (``CLIFFWATCH_DENIED_TARGETS``: addresses, networks and names, each with an optional port).

Two readings make the rules hold against the tricks of the trade. A rule with a port on a loopback, wildcard
or this host's own address covers every such address at that port: a server bound to the wildcard answers on
127.0.0.2 and on the host's own addresses too, and connecting to 0.0.0.0 reaches this host. An IPv6 address
that carries an IPv4 one (IPv4-mapped, IPv4-compatible, NAT64, 6to4) is judged by both.

Pure: a rule naming a host holds the addresses the adapter found it to resolve to (``resolved``), and this
host's own addresses are handed in the same way.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from urllib.parse import parse_qs, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DENIED_SETTING = "CLIFFWATCH_DENIED_TARGETS"
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))  # well-known, local-use
# Ray's default ports, where the address given names another of its services (docs/security.md).
RAY_GCS_PORT, RAY_CLIENT_PORT, RAY_DASHBOARD_PORT, RAY_AGENT_PORT = 6379, 10001, 8265, 52365
DATABASE_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433,
                  "oracle": 1521}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class DenyRule:
    """One place load may never go: a network or a host name, on one port or every port; ``what`` says what it
    is, as a refusal names it ("cliffwatch's Toxiproxy API (CLIFFWATCH_TOXIPROXY_URL)")."""

    what: str
    network: IPNetwork | None = None
    host: str | None = None  # a name, matched as written and by the addresses it resolved to
    port: int | None = None
    addresses: tuple[str, ...] = ()  # what ``host`` resolved to when last looked up

    def networks(self) -> tuple[IPNetwork, ...]:
        found: list[IPNetwork] = [] if self.network is None else [self.network]
        found += [ipaddress.ip_network(str(ip)) for ip in map(as_ip, self.addresses) if ip is not None]
        return tuple(found)


@dataclass(frozen=True, kw_only=True)
class DenyList:
    rules: tuple[DenyRule, ...] = ()
    own_addresses: tuple[str, ...] = ()  # this host's interface addresses: a wildcard listener answers on them

    def refusal(self, host: str, port: int, addresses: Sequence[str]) -> str | None:
        """Why ``host:port`` (resolving to ``addresses``) may never be loaded, naming the rule; None when no
        rule denies it. Every address is judged, a name's as well as a literal's."""
        host = host.lower().rstrip(".").strip("[]")
        literal = as_ip(host)
        ips = [literal] if literal is not None else [ip for ip in map(as_ip, addresses) if ip is not None]
        own = {ip for ip in map(as_ip, self.own_addresses) if ip is not None}
        for rule in self.rules:
            if _denies(rule, host, port, ips, own):
                resolved = f" (resolves to {', '.join(addresses)})" if literal is None and addresses else ""
                return (f"{_place(host, port)}{resolved} is {rule.what}; the deny list wins over every allowlist "
                        f"({DENIED_SETTING} and cliffwatch's own control planes)")  # fmt: skip
        return None

    def names(self) -> tuple[str, ...]:
        """The host names the rules give, to be resolved (``resolved``)."""
        return tuple(dict.fromkeys(rule.host for rule in self.rules if rule.host is not None))

    def resolved(self, answers: Mapping[str, Sequence[str]], own_addresses: Sequence[str]) -> DenyList:
        """The list with each named host's addresses as ``answers`` gives them, beside those it already held (a
        name without an answer is still matched by name), and this host's own addresses."""
        rules = tuple(
            replace(rule, addresses=tuple(dict.fromkeys((*answers.get(rule.host, ()), *rule.addresses))))
            if rule.host is not None else rule
            for rule in self.rules
        )  # fmt: skip
        return DenyList(rules=rules, own_addresses=tuple(own_addresses))

    def for_another_host(self) -> DenyList:
        """The list as another machine must hold it (a Ray worker's): a rule this host covers at every address
        of its own (a control plane on its loopback, reached at its network address too) also names each of
        those addresses, since "this host" there is another one."""
        own = {ip for ip in map(as_ip, self.own_addresses) if ip is not None}
        extra = [
            DenyRule(what=rule.what, network=ipaddress.ip_network(str(ip)), port=rule.port)
            for rule in self.rules
            if rule.port is not None and any(_is_local(n.network_address, own) for n in rule.networks())
            for ip in sorted(own, key=str)
            if not ip.is_loopback
        ]
        return self.adding(extra)

    def adding(self, rules: Iterable[DenyRule]) -> DenyList:
        """This list and ``rules`` (a rule already held is not added twice)."""
        return replace(self, rules=tuple(dict.fromkeys((*self.rules, *rules))))


ALWAYS_DENIED = DenyList(
    rules=(
        DenyRule(what="a link-local address (169.254.0.0/16: the cloud metadata service among them)",
                 network=ipaddress.IPv4Network("169.254.0.0/16")),
        DenyRule(what="a link-local address (fe80::/10)", network=ipaddress.IPv6Network("fe80::/10")),
        DenyRule(what="a cloud metadata address (AWS, fd00:ec2::254)",
                 network=ipaddress.IPv6Network("fd00:ec2::254/128")),
        DenyRule(what="a cloud metadata address (Google Cloud, fd20:ce::254)",
                 network=ipaddress.IPv6Network("fd20:ce::254/128")),
        DenyRule(what="a cloud metadata address (Alibaba Cloud, 100.100.100.200)",
                 network=ipaddress.IPv4Network("100.100.100.200/32")),
        DenyRule(what="a cloud platform address (Azure's host, 168.63.129.16)",
                 network=ipaddress.IPv4Network("168.63.129.16/32")),
    )
)  # fmt: skip


def rule_for_url(url: str, what: str) -> DenyRule | None:
    """The rule denying ``url``'s host at its port (the scheme's default when it gives none); None when the URL
    names no host (a Unix socket, a file)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    port = port or {"https": 443, "http": 80}.get(parts.scheme.lower())
    return rule_for(host, port, what)


def rule_for(host: str, port: int | None, what: str) -> DenyRule:
    """The rule denying ``host`` (an address, a network or a name) at ``port`` (None: every port)."""
    host = host.lower().rstrip(".").strip("[]")
    try:
        return DenyRule(what=what, network=ipaddress.ip_network(host.split("%", 1)[0], strict=False), port=port)
    except ValueError:
        return DenyRule(what=what, host=host, port=port)


def database_rules(url: str) -> tuple[DenyRule, ...]:
    """The database's network addresses (each host of a multi-host URL, its port or the driver's default), or
    none for a file or a Unix socket (SQLite, ``?host=/run/postgresql``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return ()
    default = DATABASE_PORTS.get(scheme.split("+", 1)[0].lower())
    authority = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
    places = [_split_host_port(place) for place in authority.split(",") if place]
    # libpq's and asyncpg's ?host=…&port=… (a path is a Unix socket's directory), several of them comma-separated
    query = parse_qs(urlsplit(url).query)
    ports = [int(p) if p.isdigit() else None for given in query.get("port", []) for p in given.split(",")]
    hosts = [h for given in query.get("host", []) for h in given.split(",")]
    places += [(h.lower(), ports[i] if i < len(ports) else None) for i, h in enumerate(hosts) if not h.startswith("/")]
    what = "cliffwatch's database (CLIFFWATCH_DATABASE_URL)"
    return tuple(rule_for(host, port or default, what) for host, port in places if host)


def ray_rules(address: str | None) -> tuple[DenyRule, ...]:
    """A configured Ray cluster's services a run must not reach: the one its address names and, on the same
    host, the others at their default ports (its dashboard and dashboard agent run jobs: arbitrary commands).
    ``auto`` is a cluster on this machine."""
    if address is None:
        return ()
    host, named, port = "127.0.0.1", "GCS", RAY_GCS_PORT
    if address != "auto":
        host, given = _split_host_port(address.removeprefix("ray://"))
        named = "Ray Client server" if address.startswith("ray://") else "GCS"
        port = given or (RAY_CLIENT_PORT if named == "Ray Client server" else RAY_GCS_PORT)
    services = {port: f"the Ray cluster's {named} (CLIFFWATCH_RAY_ADDRESS)"}
    for default, name in ((RAY_GCS_PORT, "GCS"), (RAY_CLIENT_PORT, "Ray Client server"),
                          (RAY_DASHBOARD_PORT, "dashboard"), (RAY_AGENT_PORT, "dashboard agent")):  # fmt: skip
        services.setdefault(default, f"the Ray cluster's {name} (CLIFFWATCH_RAY_ADDRESS, at its default port)")
    return tuple(rule_for(host, p, what) for p, what in services.items() if host)


def as_ip(text: str) -> IPAddress | None:
    """``text`` as an IP address (an IPv6 zone dropped), or None."""
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _denies(rule: DenyRule, host: str, port: int, ips: Sequence[IPAddress], own: set[IPAddress]) -> bool:
    if rule.port is not None and rule.port != port:
        return False
    if rule.host is not None and rule.host == host:
        return True
    networks = rule.networks()
    forms = [form for ip in ips for form in _forms(ip)]
    if any(form.version == n.version and form in n for form in forms for n in networks):
        return True
    # A control plane on this host, at its port, answers on every address of this host.
    local_rule = any(_is_local(n.network_address, own) for n in networks)
    return rule.port is not None and local_rule and any(_is_local(form, own) for form in forms)


def _forms(ip: IPAddress) -> Iterator[IPAddress]:
    """``ip`` and the IPv4 address an IPv6 one carries, if any."""
    yield ip
    if ip.version != 6:
        return
    assert isinstance(ip, ipaddress.IPv6Address)
    carried = ip.ipv4_mapped or ip.sixtofour
    if carried is None and any(ip in prefix for prefix in _NAT64):
        carried = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if carried is None and int(ip) >> 32 == 0 and int(ip) > 1:  # IPv4-compatible ::a.b.c.d (not :: or ::1)
        carried = ipaddress.IPv4Address(int(ip))
    if carried is not None:
        yield carried


def _is_local(ip: IPAddress, own: set[IPAddress]) -> bool:
    return ip.is_loopback or ip.is_unspecified or ip in own


def _place(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split_host_port(text: str) -> tuple[str, int | None]:
    """``host[:port]`` or ``[v6][:port]`` as (host, port); a port that is not a number is no port."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    return host.lower(), int(port) if port.isdigit() and 0 < int(port) < 65536 else None
