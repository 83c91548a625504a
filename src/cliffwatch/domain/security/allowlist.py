"""Which targets cliffwatch may aim load at: host names, IP networks, optional ports.

Load is a weapon when aimed at the wrong host, so a target must be explicitly allowed. The default is
loopback only. Entries look like ``127.0.0.0/8``, ``::1``, ``localhost``, ``api.staging.internal:8443``
or ``10.0.0.0/8:8000``. A host name is allowed when named, or when every address it resolves to is in an
allowed network. Whatever the allowlist says, its deny list (``domain.security.deny_list``) is judged first and wins.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cliffwatch.domain.errors import Problem
from cliffwatch.domain.security.deny_list import ALWAYS_DENIED, DENIED_SETTING, DenyList, DenyRule, as_ip, rule_for

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_ALLOWLIST = ("127.0.0.0/8", "::1", "localhost")


@dataclass(frozen=True, kw_only=True)
class AllowEntry:
    network: IPNetwork | None
    host: str | None
    port: int | None

    def describe(self) -> str:
        """The entry as it would be written in the allowlist (IPv6 in brackets when a port follows)."""
        what = str(self.network) if self.network is not None else str(self.host)
        if self.port is None:
            return what
        if self.network is not None and self.network.version == 6:
            what = f"[{what}]"
        return f"{what}:{self.port}"


@dataclass(frozen=True, kw_only=True)
class Allowlist:
    entries: tuple[AllowEntry, ...]
    name: str = "target allowlist"  # what a refusal calls it
    setting: str = "CLIFFWATCH_ALLOWED_TARGETS"  # what a refusal says to set
    denied: DenyList = ALWAYS_DENIED  # judged first: what no entry can allow

    def check(self, host: str, port: int, addresses: Sequence[str]) -> str | None:
        """None when ``host:port`` (resolving to ``addresses``) is allowed, else the reason it is not: the deny
        list's first (every address judged, a listed name's too), then the allowlist's."""
        denied = self.denied.refusal(host, port, addresses)
        if denied is not None:
            return denied
        host = host.lower().strip("[]")
        for entry in self.entries:
            if entry.port is not None and entry.port != port:
                continue
            if entry.host is not None and entry.host == host:
                return None
        literal = as_ip(host)
        candidates = [literal] if literal is not None else [a for a in map(as_ip, addresses) if a is not None]
        if candidates and all(self._ip_allowed(ip, port) for ip in candidates):
            return None
        listed = ", ".join(e.describe() for e in self.entries) or "nothing"
        resolved = f" (resolves to {', '.join(addresses)})" if literal is None and addresses else ""
        return f"{host}:{port}{resolved} is not in the {self.name} ({listed}); set {self.setting}"

    def including(self, addresses: Sequence[str]) -> Allowlist:
        """This allowlist and the given IP addresses (any port): addresses a listed name was found to
        resolve to, admitted when they come back as addresses (a bound listen address, say)."""
        extra = [
            AllowEntry(network=ipaddress.ip_network(ip), host=None, port=None) for ip in map(as_ip, addresses) if ip
        ]
        return replace(self, entries=(*self.entries, *extra))

    def denying(self, denied: DenyList) -> Allowlist:
        """This allowlist judged after ``denied`` (in place of the deny list it had)."""
        return replace(self, denied=denied)

    def _ip_allowed(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> bool:
        return any(
            e.network is not None
            and ip.version == e.network.version
            and ip in e.network
            and (e.port is None or e.port == port)
            for e in self.entries
        )


def parse_allowlist(
    items: Sequence[str], *, name: str = "target allowlist", setting: str = "CLIFFWATCH_ALLOWED_TARGETS"
) -> tuple[Allowlist | None, list[Problem]]:
    """An allowlist from its entries, or the problems with them (each named by its position); ``name`` and
    ``setting`` are what its refusals call it and tell the reader to set."""
    entries: list[AllowEntry] = []
    problems: list[Problem] = []
    for index, raw in enumerate(items):
        text = raw.strip()
        entry = _parse_entry(text)
        if entry is None:
            problems.append(Problem(path=f"allowed_targets[{index}]", message=f"not a host, IP or CIDR: {raw!r}"))
        else:
            entries.append(entry)
    return (Allowlist(entries=tuple(entries), name=name, setting=setting) if not problems else None), problems


def parse_denied(items: Sequence[str]) -> tuple[tuple[DenyRule, ...], list[Problem]]:
    """``CLIFFWATCH_DENIED_TARGETS``'s rules (written as allowlist entries are: addresses, networks, names, each
    with an optional port), or the problems with them, each named by its position."""
    rules: list[DenyRule] = []
    problems: list[Problem] = []
    for index, raw in enumerate(items):
        entry = _parse_entry(raw.strip())
        if entry is None:
            problems.append(Problem(path=f"denied_targets[{index}]", message=f"not a host, IP or CIDR: {raw!r}"))
            continue
        what = f"denied by {DENIED_SETTING} ({raw.strip()})"
        rules.append(rule_for(str(entry.network or entry.host), entry.port, what))
    return tuple(rules), problems


def _parse_entry(text: str) -> AllowEntry | None:
    if not text:
        return None
    port: int | None = None
    body = text
    if text.startswith("["):  # [::1]:8000
        inner, closed, rest = text[1:].partition("]")
        if not closed:
            return None
        body = inner
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                return None
            port = int(rest[1:])
    elif text.count(":") == 1:  # host:port or v4/cidr:port; bare IPv6 has several colons
        body, _, port_text = text.partition(":")
        if not port_text.isdigit():
            return None
        port = int(port_text)
    if port is not None and not 0 < port < 65536:
        return None
    try:
        return AllowEntry(network=ipaddress.ip_network(body, strict=False), host=None, port=port)
    except ValueError:
        pass
    if _is_hostname(body):
        return AllowEntry(network=None, host=body.lower(), port=port)
    return None


def _is_hostname(text: str) -> bool:
    labels = text.rstrip(".").split(".")
    return all(label and len(label) <= 63 and label.replace("-", "").isalnum() for label in labels)
