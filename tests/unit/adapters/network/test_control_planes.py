"""The deny list made whole when a place is checked: held control planes, names looked up, lookups cached."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from cliffwatch.adapters.network import control_planes
from cliffwatch.adapters.network.control_planes import ControlPlanes, guarded
from cliffwatch.domain.security.deny_list import DenyList, rule_for


def test_a_held_rule_is_denied_until_released_and_each_change_is_a_new_generation() -> None:
    planes = ControlPlanes()
    held, kept = rule_for("127.0.0.1", 1, "held"), rule_for("127.0.0.1", 2, "kept")
    seen = [planes.generation]
    key = planes.hold(kept)
    seen.append(planes.generation)
    with planes.holding(held):
        seen.append(planes.generation)
        assert planes.rules() == (kept, held)
    seen.append(planes.generation)
    assert planes.rules() == (kept,)
    planes.release(key)
    planes.release(key)  # a second release changes nothing
    seen.append(planes.generation)
    assert planes.rules() == ()
    assert seen == sorted(set(seen))  # every change, and only a change, moves it on


async def test_a_name_is_looked_up_once_a_minute_and_one_that_stops_resolving_keeps_its_last_addresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers: list[str | None] = ["127.0.0.61", None]
    asked: list[str] = []

    async def lookup(host: str, port: Any, **kwargs: Any) -> list[Any]:
        asked.append(host)
        address = answers.pop(0)
        if address is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, 0))]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", lookup)
    monkeypatch.setattr(control_planes, "_answers", {})
    denied = DenyList(rules=(rule_for("plane.test", 9, "the plane"),))
    clock = [100.0]
    monkeypatch.setattr(control_planes.time, "monotonic", lambda: clock[0])

    first = await guarded(denied)
    again = await guarded(denied)
    clock[0] += control_planes.REFRESH_S + 1
    failed = await guarded(denied)

    assert asked == ["plane.test", "plane.test"]
    for made in (first, again, failed):
        assert made.refusal("alias.test", 9, ("127.0.0.61",)) is not None
    assert failed.refusal("plane.test", 9, ()) is not None  # by name, whatever it resolves to
