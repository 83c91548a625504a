"""The Toxiproxy fault injector against its in-memory twins: proxies, toxics, and the ledger's order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cliffwatch.adapters.faults.toxiproxy_faults import ToxiproxyFaultInjector, host_port, with_address
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.errors import FaultInjectionFailed, StoreUnavailable
from cliffwatch.domain.scenario.faults import ProxyState
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.services.memory import InMemoryFaultLedger, InMemoryToxiproxy

LATENCY = {"proxy": "llm", "type": "latency", "attributes": {"latency": 100}}
BANDWIDTH = {"proxy": "llm", "type": "bandwidth", "attributes": {"rate": 10}}


def scenario(proxies: list[dict[str, Any]] | None = None, via: str | None = "llm") -> Scenario:
    target: dict[str, Any] = {"url": "http://127.0.0.1:8000/base", "request": {"model": "m"}}
    if via is not None:
        target["via_proxy"] = via
    return parse_scenario(
        {
            "name": "inject",
            "target": target,
            "proxies": proxies if proxies is not None else [{"name": "llm"}],
            "slo": {"e2e_ms": 100, "timeout_ms": 200},
            "phases": [
                {"name": "p0", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}},
                {"name": "p1", "role": "stress", "duration_s": 1, "arrival": {"process": "constant", "rate": 1},
                 "faults": [LATENCY, BANDWIDTH]},
            ],
        }
    )  # fmt: skip


def injector(chosen: Scenario) -> tuple[ToxiproxyFaultInjector, InMemoryToxiproxy, InMemoryFaultLedger]:
    server, ledger = InMemoryToxiproxy(), InMemoryFaultLedger()
    made = ToxiproxyFaultInjector(server, ledger, run_id="r1", scenario=chosen, clock=MonotonicClock(), managed=False)
    return made, server, ledger


async def test_set_up_creates_the_proxy_after_recording_it_and_routes_the_load_through_it() -> None:
    """A missing proxy is written to the ledger, then created with the target as upstream; the load URL is
    the target's URL on the proxy's actual address."""
    made, server, ledger = injector(scenario())
    load_url = await made.set_up("http://127.0.0.1:8000/base")
    proxy = server.proxies["llm"]
    assert proxy.upstream == "127.0.0.1:8000"
    assert load_url == f"http://{proxy.listen}/base"
    assert [(kind, e.proxy if e else None) for kind, _, e in ledger.events] == [("planned", "llm")]
    assert server.calls == [("create_proxy", "llm", None)]


async def test_an_existing_matching_proxy_is_used_and_not_deleted_afterwards() -> None:
    """A proxy that already exists with the declared upstream is used as it is, and left in place."""
    made, server, ledger = injector(scenario([{"name": "llm", "listen": "127.0.0.1:26000"}]))
    server.proxies["llm"] = ProxyState(name="llm", listen="127.0.0.1:26000", upstream="127.0.0.1:8000", enabled=True)
    assert await made.set_up("http://127.0.0.1:8000") == "http://127.0.0.1:26000"
    assert await made.tear_down() == []
    assert "llm" in server.proxies
    assert ledger.events == []


@pytest.mark.parametrize(
    ("listen", "upstream"), [("127.0.0.1:26000", "10.0.0.1:80"), ("127.0.0.1:26001", "127.0.0.1:8000")]
)
async def test_a_proxy_of_that_name_with_other_settings_is_never_taken_over(listen: str, upstream: str) -> None:
    """Another upstream, or another fixed listen address: refused, and the proxy is left untouched."""
    made, server, _ = injector(scenario([{"name": "llm", "listen": "127.0.0.1:26000"}]))
    theirs = ProxyState(name="llm", listen=listen, upstream=upstream, enabled=True)
    server.proxies["llm"] = theirs
    with pytest.raises(FaultInjectionFailed, match="left alone"):
        await made.set_up("http://127.0.0.1:8000")
    assert server.proxies["llm"] == theirs
    assert server.calls == []


async def test_toxics_are_recorded_before_they_are_added_and_marked_removed_after() -> None:
    """Each toxic is planned in the ledger before it is created, and removed from it only once gone."""
    made, server, ledger = injector(scenario())
    await made.set_up("http://127.0.0.1:8000")
    on = await made.apply(1, scenario().phases[1].faults)
    assert [(e.action, e.ok, e.detail) for e in on] == [
        ("on", True, "cliffwatch-r1-p1-0-latency"),
        ("on", True, "cliffwatch-r1-p1-1-bandwidth"),
    ]
    assert [t.name for t in server.proxies["llm"].toxics] == [
        "cliffwatch-r1-p1-0-latency",
        "cliffwatch-r1-p1-1-bandwidth",
    ]
    planned = [e.toxic for kind, _, e in ledger.events if kind == "planned" and e and e.toxic]
    assert planned == ["cliffwatch-r1-p1-0-latency", "cliffwatch-r1-p1-1-bandwidth"]
    off = await made.remove(1)
    assert [(e.action, e.ok) for e in off] == [("off", True), ("off", True)]
    assert server.proxies["llm"].toxics == ()
    assert [e.toxic for e in await ledger.outstanding()] == [None]  # only the proxy, until tear-down
    assert await made.remove(1) == []  # nothing left: safe to call again
    await made.tear_down()
    assert await ledger.outstanding() == []
    assert server.proxies == {}


async def test_a_toxic_that_cannot_be_added_is_a_failed_event_and_the_rest_are_not_tried() -> None:
    """The runner learns of the failure from the event (to abort); the toxic stays removable."""
    made, server, _ = injector(scenario())
    await made.set_up("http://127.0.0.1:8000")
    server.fail = lambda call, proxy, toxic: (
        FaultInjectionFailed(proxy=proxy, toxic=toxic, status=400, reason="bad attribute")
        if call == "add_toxic" and toxic and toxic.endswith("latency") else None
    )  # fmt: skip
    events = await made.apply(1, scenario().phases[1].faults)
    assert [(e.ok, "bad attribute" in e.detail) for e in events] == [(False, True)]
    assert server.calls[-1] == ("create_proxy", "llm", None)  # the bandwidth toxic was never sent
    server.fail = None
    assert [e.ok for e in await made.remove_all()] == [True]  # already gone counts as removed


async def test_a_toxic_that_cannot_be_removed_stays_outstanding_for_the_reconciler() -> None:
    """A failed removal is a failed event, and the ledger keeps the toxic as outstanding."""
    made, server, ledger = injector(scenario())
    await made.set_up("http://127.0.0.1:8000")
    await made.apply(1, scenario().phases[1].faults[:1])
    server.down = "connection refused"
    [event] = await made.remove(1)
    assert not event.ok
    assert "connection refused" in event.detail
    assert [e.toxic for e in await ledger.outstanding()] == [None, "cliffwatch-r1-p1-0-latency"]


async def test_faults_come_off_while_the_ledger_cannot_be_written() -> None:
    """A run fencing itself while its database is down still removes every toxic and its proxy; their
    entries stay outstanding for a reconciler, and the events say the ledger was not updated."""
    made, server, ledger = injector(scenario())
    await made.set_up("http://127.0.0.1:8000")
    await made.apply(1, scenario().phases[1].faults)

    async def unavailable(entry: object) -> None:
        raise StoreUnavailable("memory://ledger", "down for the test")

    ledger.removed = unavailable  # type: ignore[method-assign]
    off = await made.remove_all()
    assert [(e.ok, "could not be updated" in e.detail) for e in off] == [(True, True), (True, True)]
    assert server.proxies["llm"].toxics == ()
    assert await made.tear_down() == []
    assert server.proxies == {}
    assert len(await ledger.outstanding()) == 3  # the proxy and both toxics, for the reconciler


async def test_a_fault_the_ledger_cannot_record_is_not_applied() -> None:
    """Recorded first or not at all: with the ledger down, the toxic is never created, and the event says why."""
    made, server, ledger = injector(scenario())
    await made.set_up("http://127.0.0.1:8000")

    async def unavailable(entry: object) -> None:
        raise StoreUnavailable("memory://ledger", "down for the test")

    ledger.planned = unavailable  # type: ignore[method-assign]
    [event] = await made.apply(1, scenario().phases[1].faults)
    assert not event.ok
    assert "the fault ledger could not record" in event.detail
    assert server.proxies["llm"].toxics == ()


async def test_without_a_proxy_route_the_load_goes_to_the_target() -> None:
    """Proxies declared but not routed through (a service of yours points at them): load URL unchanged."""
    made, _, _ = injector(scenario(via=None))
    assert await made.set_up("http://127.0.0.1:8000/base") == "http://127.0.0.1:8000/base"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000/x", "127.0.0.1:8000"),
        ("http://example.test/x", "example.test:80"),
        ("https://example.test", "example.test:443"),
        ("http://[::1]:9000", "[::1]:9000"),
    ],
)
def test_upstreams_default_to_the_targets_host_and_port(url: str, expected: str) -> None:
    """The default upstream is the target's host and port, the scheme's default port when none is given."""
    assert host_port(url) == expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [("127.0.0.1:26000", "http://127.0.0.1:26000/v1?a=1"), ("0.0.0.0:26000", "http://127.0.0.1:26000/v1?a=1")],
)
def test_the_load_url_keeps_path_and_query_on_the_proxys_address(address: str, expected: str) -> None:
    """Only host and port change; a wildcard listen address is reached on loopback."""
    assert with_address("http://10.0.0.1:8000/v1?a=1", address) == expected


class _StallingToxiproxy(InMemoryToxiproxy):
    """Never answers a toxic removal, as Toxiproxy does when clients disconnect during it (its #558)."""

    async def remove_toxic(self, proxy: str, name: str) -> bool:
        if self.proxies.get(proxy) is not None and any(t.name == name for t in self.proxies[proxy].toxics):
            await asyncio.sleep(3600)
        return await super().remove_toxic(proxy, name)


async def test_a_stalled_removal_recreates_the_runs_own_proxy_without_the_toxic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When Toxiproxy stalls removing a toxic, the run's own proxy is deleted (which still works) and made
    again at the same address: the toxic is gone, traffic can go on, and the event says what happened."""
    monkeypatch.setattr("cliffwatch.adapters.faults.toxiproxy_faults.REMOVE_STALL_S", 0.05)
    server, ledger = _StallingToxiproxy(), InMemoryFaultLedger()
    chosen = scenario()
    made = ToxiproxyFaultInjector(server, ledger, run_id="r1", scenario=chosen, clock=MonotonicClock(), managed=False)
    await made.set_up("http://127.0.0.1:8000")
    before = server.proxies["llm"]
    await made.apply(1, chosen.phases[1].faults)
    events = await made.remove(1)
    assert [e.ok for e in events] == [True, True]
    assert "#558" in events[0].detail
    after = server.proxies["llm"]
    assert (after.listen, after.upstream, after.toxics) == (before.listen, before.upstream, ())
    assert [e.toxic for e in await ledger.outstanding()] == [None]  # only the (recreated) proxy


async def test_a_stalled_removal_on_someone_elses_proxy_is_reported_not_forced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A proxy the run did not create is never deleted: the stalled removal is a failed event, kept
    outstanding for the reconciler."""
    monkeypatch.setattr("cliffwatch.adapters.faults.toxiproxy_faults.REMOVE_STALL_S", 0.05)
    server, ledger = _StallingToxiproxy(), InMemoryFaultLedger()
    server.proxies["llm"] = ProxyState(name="llm", listen="127.0.0.1:26000", upstream="127.0.0.1:8000", enabled=True)
    chosen = scenario([{"name": "llm", "listen": "127.0.0.1:26000"}])
    made = ToxiproxyFaultInjector(server, ledger, run_id="r1", scenario=chosen, clock=MonotonicClock(), managed=False)
    await made.set_up("http://127.0.0.1:8000")
    await made.apply(1, chosen.phases[1].faults[:1])
    [event] = await made.remove(1)
    assert not event.ok
    assert "no answer" in event.detail
    assert "llm" in server.proxies
    assert [e.toxic for e in await ledger.outstanding()] == ["cliffwatch-r1-p1-0-latency"]
