"""This host's own addresses, as the kernel lists them: what a wildcard listener answers on."""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys

import pytest

from cliffwatch.adapters.network import host_addresses
from cliffwatch.adapters.network.host_addresses import netlink_addresses, own_addresses


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="rtnetlink is Linux's")
def test_the_kernel_lists_loopback_and_the_hosts_network_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dump holds loopback, and is what ``own_addresses`` gives (read afresh once its minute is over)."""
    monkeypatch.setattr(host_addresses, "_cache", (-1000.0, ("10.9.9.9",)))
    found = [ipaddress.ip_address(a) for a in netlink_addresses()]
    assert ipaddress.ip_address("127.0.0.1") in found
    assert all(a.version in (4, 6) for a in found)
    assert own_addresses(now=0.0) == tuple(dict.fromkeys(map(str, found)))


def test_an_address_message_gives_its_local_and_peer_addresses_and_skips_the_rest() -> None:
    """One ``ifaddrmsg`` with IFA_ADDRESS, IFA_LOCAL and an attribute of another kind (a label), each padded."""

    def attribute(kind: int, value: bytes) -> bytes:
        raw = struct.pack("=HH", 4 + len(value), kind) + value
        return raw + b"\0" * (-len(raw) % 4)

    message = struct.pack("=BBBBL", socket.AF_INET, 24, 0, 0, 2) + attribute(1, bytes([10, 0, 0, 5]))
    message += attribute(3, b"eth0\0") + attribute(2, bytes([10, 0, 0, 6]))
    assert host_addresses._addresses_of(message) == ["10.0.0.5", "10.0.0.6"]
    v6 = struct.pack("=BBBBL", socket.AF_INET6, 64, 0, 0, 2) + attribute(1, ipaddress.ip_address("fd00::2").packed)
    assert host_addresses._addresses_of(v6) == ["fd00::2"]
    assert host_addresses._addresses_of(struct.pack("=BBBBL", 17, 0, 0, 0, 2) + attribute(1, b"xx")) == []


def test_without_netlink_the_host_names_addresses_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(timeout_s: float = 1.0) -> list[str]:
        raise OSError("no netlink here")

    monkeypatch.setattr(host_addresses, "netlink_addresses", refused)
    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")
    assert "127.0.0.1" in host_addresses._read()
