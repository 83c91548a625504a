"""This host's own IP addresses, read from the kernel: a server listening on the wildcard answers on each.

The deny list covers a control plane of this host (its Toxiproxy API on 127.0.0.1, say) on every address of
this host at that port, since ``0.0.0.0:8474`` is reached at the host's network addresses as well as on
loopback. Linux tells every local address in ``/proc`` (``fib_trie``'s ``host LOCAL`` entries for IPv4,
``if_inet6`` for IPv6), without a name lookup; elsewhere the host name's addresses are used, if it resolves.
"""

from __future__ import annotations

import ipaddress
import itertools
import socket
import time
from pathlib import Path

FIB_TRIE = Path("/proc/net/fib_trie")
IF_INET6 = Path("/proc/net/if_inet6")
REFRESH_S = 60.0  # an interface that comes up is covered within this

_cache: tuple[float, tuple[str, ...]] | None = None


def own_addresses(*, now: float | None = None) -> tuple[str, ...]:
    """Every address of this host's interfaces (loopback's too), read at most once a minute."""
    global _cache
    now = time.monotonic() if now is None else now
    if _cache is None or now - _cache[0] > REFRESH_S:
        _cache = (now, _read())
    return _cache[1]


def _read() -> tuple[str, ...]:
    found = _ipv4_local(FIB_TRIE) + _ipv6_local(IF_INET6)
    if not found:
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            infos = []
        found = [str(info[4][0]) for info in infos]
    return tuple(dict.fromkeys(found))


def _ipv4_local(path: Path) -> list[str]:
    """The ``/32 host LOCAL`` entries of ``fib_trie``: the address on the line before each."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    found = []
    for before, line in itertools.pairwise(lines):
        if line.strip().startswith("/32 host LOCAL"):
            address = before.strip().removeprefix("|-- ")
            try:
                found.append(str(ipaddress.IPv4Address(address)))
            except ValueError:
                continue
    return found


def _ipv6_local(path: Path) -> list[str]:
    """Each line of ``if_inet6`` starts with an address as 32 hex digits."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        digits = line.split(" ", 1)[0]
        try:
            found.append(str(ipaddress.IPv6Address(int(digits, 16))))
        except ValueError:
            continue
    return found
