"""The reconciler removes what dead runs left behind, confirmed before it is marked, and touches nothing a
running run or an unreachable server's owner may still need."""

from __future__ import annotations

import pytest

from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.ports import LedgerEntry, ToxiproxyApi
from cliffwatch.domain.scenario.faults import ToxicState, toxic_name
from cliffwatch.domain.scenario.faults import ToxicType as T
from cliffwatch.services.memory import InMemoryFaultLedger, InMemoryToxiproxy, in_memory_connect
from cliffwatch.services.reconcile import ReconcileReport, reconcile_faults

URL = "http://127.0.0.1:8474"
OTHER = "http://127.0.0.1:18474"
LATENCY = toxic_name("abc123", 1, 0, T.LATENCY)
RESET = toxic_name("abc123", 2, 0, T.RESET_PEER)


def _toxic(run_id: str, name: str, *, proxy: str = "llm", server: str = URL, managed: bool = False) -> LedgerEntry:
    return LedgerEntry(run_id=run_id, server=server, proxy=proxy, toxic=name, managed=managed)


def _proxy(run_id: str, name: str = "llm", *, server: str = URL, managed: bool = False) -> LedgerEntry:
    return LedgerEntry(run_id=run_id, server=server, proxy=name, managed=managed)


async def _inject(ledger: InMemoryFaultLedger, server: InMemoryToxiproxy, *entries: LedgerEntry) -> None:
    """Records and creates each entry, as the fault injector does: the ledger first, then the server. A toxic's
    proxy that is not there yet is made without an entry, as if it existed before and the run reused it."""
    for entry in entries:
        await ledger.planned(entry)
        if entry.toxic is None or entry.proxy not in server.proxies:
            await server.create_proxy(name=entry.proxy, listen="127.0.0.1:0", upstream="127.0.0.1:8000")
        if entry.toxic is not None:
            toxic = ToxicState(name=entry.toxic, type="latency", stream="downstream", toxicity=1.0)
            await server.add_toxic(entry.proxy, toxic)


async def _dead_run(ledger: InMemoryFaultLedger, server: InMemoryToxiproxy, run_id: str, *entries: LedgerEntry) -> None:
    await ledger.run_started(run_id)
    await _inject(ledger, server, *entries)
    ledger.dead.add(run_id)


async def test_a_dead_runs_leftover_toxic_is_removed_and_marked() -> None:
    """The toxic comes off the proxy, and only then is it marked removed in the ledger."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await _dead_run(ledger, server, "abc123", _toxic("abc123", LATENCY))
    marked_when: list[tuple[str, ...]] = []
    original_removed = ledger.removed

    async def removed(entry: LedgerEntry) -> None:
        marked_when.append(tuple(t.name for t in server.proxies["llm"].toxics))
        await original_removed(entry)

    ledger.removed = removed  # type: ignore[method-assign]
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert report.removed == (_toxic("abc123", LATENCY),)
    assert server.proxies["llm"].toxics == ()
    assert marked_when == [()]  # already off the server when it was marked
    assert await ledger.outstanding() == []


async def test_a_toxic_that_is_already_gone_counts_as_removed() -> None:
    """remove_toxic answering False (no such toxic) settles the entry just as a removal does."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await _dead_run(ledger, server, "abc123")
    await ledger.planned(_toxic("abc123", LATENCY))  # planned, then the run died before creating it
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert report.removed == (_toxic("abc123", LATENCY),)
    assert server.calls == [("remove_toxic", "llm", LATENCY)]
    assert await ledger.outstanding() == []


async def test_a_running_runs_faults_are_left_alone() -> None:
    """A live run's toxics and proxy stay on the server and in the ledger, reported as in use."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await ledger.run_started("live")
    live = (_proxy("live"), _toxic("live", "cliffwatch-live-p1-0-latency"))
    await _inject(ledger, server, *live)
    server.calls.clear()
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert report.left_running == live
    assert report.removed == ()
    assert server.calls == []
    assert await ledger.outstanding() == list(live)
    assert report.summary() == f"left 1 leftover toxic and 1 proxy of run live on {URL} alone: in use by a running run"


async def test_proxies_are_deleted_after_their_toxics() -> None:
    """Every toxic of the dead run comes off before any proxy it created is deleted."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await _dead_run(
        ledger, server, "abc123", _proxy("abc123"), _toxic("abc123", LATENCY), _proxy("abc123", "db"),
        _toxic("abc123", RESET, proxy="db"),
    )  # fmt: skip
    server.calls.clear()
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert server.calls == [
        ("remove_toxic", "llm", LATENCY),
        ("remove_toxic", "db", RESET),
        ("delete_proxy", "llm", None),
        ("delete_proxy", "db", None),
    ]
    assert server.proxies == {}
    assert len(report.removed) == 4
    assert await ledger.outstanding() == []


async def test_an_unreachable_managed_server_took_its_faults_with_it() -> None:
    """Every entry on a server the dead run started itself: the server died with the run, so they are settled."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    entries = (_proxy("abc123", managed=True), _toxic("abc123", LATENCY, managed=True))
    await _dead_run(ledger, server, "abc123", *entries)
    server.down = "connection refused"
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert report.gone_with_server == entries[::-1]  # toxics first, as when the server is there
    assert report.removed == ()
    assert report.unreachable == ()
    assert await ledger.outstanding() == []
    assert report.summary() == (
        f"1 leftover toxic and 1 proxy of run abc123 went with {URL}, which the run had started and which is "
        f"gone: {LATENCY} on llm, proxy llm"
    )


async def test_an_unreachable_external_server_keeps_its_faults_outstanding() -> None:
    """A server the run did not start may still carry the toxic: it stays outstanding and the server is named."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await _dead_run(ledger, server, "abc123", _toxic("abc123", LATENCY))
    await ledger.planned(_toxic("abc123", RESET, managed=True))  # one managed entry is not enough
    server.down = "connection refused"
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert report.gone_with_server == report.removed == ()
    assert len(report.unreachable) == 1
    assert report.unreachable[0][0] == URL
    assert "connection refused" in report.unreachable[0][1]
    assert await ledger.outstanding() == [_toxic("abc123", LATENCY), _toxic("abc123", RESET, managed=True)]
    assert report.summary().startswith(f"could not reach {URL}, 2 leftover toxics kept for the next start-up: ")

    server.down = None  # the next start-up, with the server back
    again = await reconcile_faults(ledger, in_memory_connect(server))
    assert again.removed == (_toxic("abc123", LATENCY), _toxic("abc123", RESET, managed=True))
    assert server.proxies["llm"].toxics == ()


async def test_a_managed_server_that_answered_with_an_error_is_alive() -> None:
    """An HTTP error is an answer: the server is up, so its managed faults are kept, not written off."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await _dead_run(ledger, server, "abc123", _toxic("abc123", LATENCY, managed=True))
    server.fail = lambda call, proxy, toxic: FaultInjectionFailed(proxy=proxy, toxic=toxic, reason="boom", status=500)
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert report.gone_with_server == report.removed == ()
    assert report.unreachable == ()
    assert [(entry, "(HTTP 500)" in why) for entry, why in report.kept] == [
        (_toxic("abc123", LATENCY, managed=True), True)
    ]
    assert await ledger.outstanding() == [_toxic("abc123", LATENCY, managed=True)]


async def test_a_managed_server_that_refuses_the_connection_check_is_alive() -> None:
    """connect() failing with an HTTP status (say its version check got a 503) is still an answer."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await _dead_run(ledger, server, "abc123", _toxic("abc123", LATENCY, managed=True))

    class Refused:
        async def __aenter__(self) -> ToxiproxyApi:
            raise FaultInjectionFailed(proxy="-", toxic=None, reason="starting up", status=503)

        async def __aexit__(self, *exc_info: object) -> None:
            return None

    report = await reconcile_faults(ledger, lambda url: Refused())
    assert report.gone_with_server == ()
    assert [server for server, _ in report.unreachable] == [URL]
    assert await ledger.outstanding() == [_toxic("abc123", LATENCY, managed=True)]


async def test_a_server_that_fails_midway_keeps_the_rest() -> None:
    """What was removed before the connection broke stays removed; the rest is kept, even on a managed
    server, since it answered before."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    entries = (_toxic("abc123", LATENCY, managed=True), _toxic("abc123", RESET, managed=True))
    await _dead_run(ledger, server, "abc123", *entries)

    def drop_second(call: str, proxy: str, toxic: str | None) -> FaultInjectionFailed | None:
        return FaultInjectionFailed(proxy=proxy, toxic=toxic, reason="connection reset") if toxic == RESET else None

    server.fail = drop_second
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert report.removed == entries[:1]
    assert report.gone_with_server == ()
    assert [entry for entry, _ in report.kept] == [entries[1]]
    assert await ledger.outstanding() == [entries[1]]


async def test_a_proxy_a_running_run_uses_is_not_deleted() -> None:
    """The dead run's proxy of the same name is a running run's now, or carries a toxic that is not the dead
    run's (here one this ledger never heard of): it stays; a proxy with neither goes."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await _dead_run(ledger, server, "dead", _proxy("dead"), _proxy("dead", "db"), _proxy("dead", "cache"))
    await ledger.run_started("live")
    await ledger.planned(_toxic("live", "cliffwatch-live-p1-0-latency"))  # the live run works on "llm"
    foreign = ToxicState(name="someone-elses", type="latency", stream="upstream", toxicity=1.0)
    await server.add_toxic("db", foreign)
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert sorted(server.proxies) == ["db", "llm"]
    assert [(entry.proxy, why) for entry, why in report.kept] == [
        ("llm", "in use by a running run"),
        ("db", "the proxy still carries toxics: someone-elses"),
    ]
    assert report.removed == (_proxy("dead", "cache"),)
    assert report.summary().splitlines() == [
        f"removed 1 leftover proxy of run dead from {URL}: proxy cache",
        f"kept proxy llm of run dead on {URL}: in use by a running run",
        f"kept proxy db of run dead on {URL}: the proxy still carries toxics: someone-elses",
        f"left 1 leftover toxic of run live on {URL} alone: in use by a running run",
    ]
    assert await ledger.outstanding() == [
        _proxy("dead"),
        _proxy("dead", "db"),
        _toxic("live", "cliffwatch-live-p1-0-latency"),
    ]


async def test_servers_are_cleaned_independently() -> None:
    """An unreachable server does not stop another server's leftovers being removed."""
    ledger, near, far = InMemoryFaultLedger(), InMemoryToxiproxy(URL), InMemoryToxiproxy(OTHER)
    await _dead_run(ledger, far, "abc123", _toxic("abc123", RESET, server=OTHER))
    await _inject(ledger, near, _proxy("abc123"), _toxic("abc123", LATENCY))
    far.down = "timed out"
    report = await reconcile_faults(ledger, in_memory_connect(near, far))
    assert report.removed == (_toxic("abc123", LATENCY), _proxy("abc123"))
    assert [server for server, _ in report.unreachable] == [OTHER]
    assert await ledger.outstanding() == [_toxic("abc123", RESET, server=OTHER)]


async def test_the_summary_names_every_removed_fault_by_run_and_server() -> None:
    """One line per run and server, listing what was removed; finished runs are cleaned like dead ones."""
    ledger, server = InMemoryFaultLedger(), InMemoryToxiproxy(URL)
    await ledger.run_started("abc123")
    await _inject(ledger, server, _proxy("abc123"), _toxic("abc123", LATENCY), _toxic("abc123", RESET))
    await ledger.run_finished("abc123")
    report = await reconcile_faults(ledger, in_memory_connect(server))
    assert report.summary() == (
        f"removed 2 leftover toxics and 1 proxy of run abc123 from {URL}: {LATENCY} on llm, {RESET} on llm, proxy llm"
    )


async def test_nothing_outstanding_is_nothing_to_clean_up_and_the_ledger_is_compacted() -> None:
    """With nothing left behind no server is contacted, and settled runs are compacted away."""
    ledger = InMemoryFaultLedger()
    await ledger.run_started("old")
    await ledger.run_finished("old")
    report = await reconcile_faults(ledger, in_memory_connect())
    assert report == ReconcileReport()
    assert report.summary() == "nothing to clean up"
    assert ledger.compactions == 1
    assert ledger.events == []


@pytest.mark.parametrize(
    ("removed", "expected"),
    [
        ((_proxy("r"),), "removed 1 leftover proxy of run r from " + URL + ": proxy llm"),
        ((_toxic("r", "t"),), "removed 1 leftover toxic of run r from " + URL + ": t on llm"),
        ((_proxy("r"), _proxy("r", "db")), "removed 2 leftover proxies of run r from " + URL + ": proxy llm, proxy db"),
        ((_toxic("a", "t"), _toxic("b", "u")), f"removed 1 leftover toxic of run a from {URL}: t on llm\n"
                                               f"removed 1 leftover toxic of run b from {URL}: u on llm"),
    ],
)  # fmt: skip
def test_summary_counts(removed: tuple[LedgerEntry, ...], expected: str) -> None:
    """Counts read as English, one line per run."""
    assert ReconcileReport(removed=removed).summary() == expected
