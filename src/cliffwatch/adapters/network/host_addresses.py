"""This host's own IP addresses, asked of the kernel: a server listening on the wildcard answers on each.

The deny list covers a control plane of this host (its Toxiproxy API on 127.0.0.1, say) on every address of
this host at that port, since ``0.0.0.0:8474`` is reached at the host's network addresses as well as on
loopback. On Linux the addresses come from one rtnetlink dump (``RTM_GETADDR``, what ``ip addr`` asks): every
address of every interface, IPv4 and IPv6, secondary ones included, in well under a millisecond and without
a name lookup (``/proc/net/fib_trie`` would say the same, but holds the whole routing table: tens of
megabytes on a router). Elsewhere, the host name's addresses, if it resolves.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time

REFRESH_S = 60.0  # an interface that comes up is covered within this

_NETLINK_ROUTE, _RTM_GETADDR, _RTM_NEWADDR, _NLMSG_DONE, _NLMSG_ERROR = 0, 22, 20, 3, 2
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_HEADER = struct.Struct("=LHHLL")  # nlmsghdr: length, type, flags, sequence, port id
_IFADDRMSG = struct.Struct("=BBBBL")  # family, prefix length, flags, scope, interface index
_RTATTR = struct.Struct("=HH")  # length, type

_cache: tuple[float, tuple[str, ...]] | None = None


def own_addresses(*, now: float | None = None) -> tuple[str, ...]:
    """Every address of this host's interfaces (loopback's too), asked at most once a minute."""
    global _cache
    now = time.monotonic() if now is None else now
    if _cache is None or now - _cache[0] > REFRESH_S:
        _cache = (now, _read())
    return _cache[1]


def _read() -> tuple[str, ...]:
    try:
        found = netlink_addresses()
    except OSError:
        found = []
    if not found:
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            infos = []
        found = [str(info[4][0]) for info in infos]
    return tuple(dict.fromkeys(found))


def netlink_addresses(timeout_s: float = 1.0) -> list[str]:
    """The addresses of every interface, from the kernel's rtnetlink dump; ``OSError`` where there is none."""
    family = getattr(socket, "AF_NETLINK", None)
    if family is None:
        raise OSError("no netlink here")
    with socket.socket(family, socket.SOCK_RAW, _NETLINK_ROUTE) as sock:
        sock.settimeout(timeout_s)
        body = _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        sock.send(_HEADER.pack(_HEADER.size + len(body), _RTM_GETADDR, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + body)
        found: list[str] = []
        while True:
            data = sock.recv(65536)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
                if kind == _NLMSG_DONE:
                    return found
                if kind == _NLMSG_ERROR or length < _HEADER.size:
                    raise OSError("the kernel refused the address dump")
                if kind == _RTM_NEWADDR:
                    found += _addresses_of(data[offset + _HEADER.size : offset + length])
                offset += (length + 3) & ~3


def _addresses_of(message: bytes) -> list[str]:
    """The address attributes of one ``ifaddrmsg`` (its local address, and its peer's on a point-to-point link)."""
    family = message[0]
    size = 4 if family == socket.AF_INET else 16 if family == socket.AF_INET6 else 0
    found = []
    offset = _IFADDRMSG.size
    while size and offset + _RTATTR.size <= len(message):
        length, kind = _RTATTR.unpack_from(message, offset)
        if length < _RTATTR.size:
            break
        value = message[offset + _RTATTR.size : offset + length]
        if kind in (_IFA_ADDRESS, _IFA_LOCAL) and len(value) == size:
            found.append(str(ipaddress.ip_address(value)))
        offset += (length + 3) & ~3
    return found
