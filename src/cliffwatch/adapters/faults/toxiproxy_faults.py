"""The fault injector on Toxiproxy: proxies set up for a run, toxics switched on and off by phase.

Every toxic and every proxy cliffwatch creates is written to the fault ledger *before* it is created and
marked removed only once Toxiproxy confirmed the removal, so a crash at any point leaves a record the
reconciler can act on. Toxic names carry a recognisable prefix and the run id (``toxic_name``).

The ledger may live in a database that is down (a service run fencing itself during an outage). Then a
fault is not applied — it could not be recorded first — but a removal goes ahead: the toxic comes off, and
its entry stays outstanding until a reconciler finds it gone and marks it removed. Removing a fault never
waits for the ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

import structlog

from cliffwatch.domain.errors import CliffwatchError, FaultInjectionFailed
from cliffwatch.domain.ports import Clock, FaultLedger, LedgerEntry, ToxiproxyApi
from cliffwatch.domain.scenario.faults import FaultEvent, FaultSpec, ProxyState, ToxicState, proxy_matches, toxic_name
from cliffwatch.domain.scenario.scenario import Scenario

log = structlog.get_logger(__name__)

REMOVE_STALL_S = 3.0  # a removal normally takes a millisecond; this long means Toxiproxy has stalled
STALL_NOTE = "Toxiproxy stalled removing it (upstream issue #558), so the run's proxy was recreated without it"


class ToxiproxyFaultInjector:
    """Implements the ``FaultInjector`` port for one run on one Toxiproxy server."""

    def __init__(
        self,
        api: ToxiproxyApi,
        ledger: FaultLedger,
        *,
        run_id: str,
        scenario: Scenario,
        clock: Clock,
        managed: bool,
    ) -> None:
        self.api = api
        self.ledger = ledger
        self.run_id = run_id
        self.scenario = scenario
        self.clock = clock
        self.managed = managed
        self.proxies: dict[str, ProxyState] = {}
        self._created: list[LedgerEntry] = []
        self._active: dict[int, list[tuple[FaultSpec, LedgerEntry]]] = {}

    def _entry(self, proxy: str, toxic: str | None = None) -> LedgerEntry:
        return LedgerEntry(run_id=self.run_id, server=self.api.url, proxy=proxy, toxic=toxic, managed=self.managed)

    async def check(self) -> None:
        await self.api.version()

    async def set_up(
        self, target_url: str, *, upstreams: Mapping[str, str] | None = None, listens: Mapping[str, str] | None = None
    ) -> str:
        """Ensures the scenario's proxies (upstream defaulting to the target) and returns the URL the load
        should go to: the target's, or the listen address of the proxy it is routed through.

        ``upstreams`` and ``listens`` give a proxy's checked addresses (``ip:port``) by its name: Toxiproxy
        resolves a name itself, for every connection or when it binds, so a proxy this run creates is given the
        addresses the allowlists checked, never the names as written. An existing proxy is used when its
        addresses are either.
        """
        for spec in self.scenario.proxies:
            declared = spec.upstream or host_port(target_url)
            upstream = (upstreams or {}).get(spec.name, declared)
            listen = (listens or {}).get(spec.name, spec.listen)
            state = await self.api.get_proxy(spec.name)
            if state is not None:
                if not any(proxy_matches(state, listen=at, upstream=u) for u in {upstream, declared}
                           for at in {listen, spec.listen}):  # fmt: skip
                    # never hijack another's proxy
                    raise FaultInjectionFailed(
                        proxy=spec.name, toxic=None, status=409,
                        reason=f"{self.api.url} already has this proxy with listen {state.listen} and upstream "
                        f"{state.upstream}, not listen {spec.listen} and upstream {upstream}; it is left alone",
                    )  # fmt: skip
            else:
                # Recorded first: if the create times out after all, the reconciler still knows to look.
                entry = self._entry(spec.name)
                await self.ledger.planned(entry)
                self._created.append(entry)
                state = await self.api.create_proxy(name=spec.name, listen=listen, upstream=upstream)
            self.proxies[spec.name] = state
        via = self.scenario.target.via_proxy
        if via is None:
            return target_url
        return with_address(target_url, self.proxies[via].listen)

    async def apply(self, phase: int, faults: Sequence[FaultSpec]) -> list[FaultEvent]:
        events: list[FaultEvent] = []
        active = self._active.setdefault(phase, [])
        for index, fault in enumerate(faults):
            name = toxic_name(self.run_id, phase, index, fault.type)
            entry = self._entry(fault.proxy, name)
            try:
                await self.ledger.planned(entry)
            except CliffwatchError as exc:  # not recorded, so not applied: a crash now would leave no trace
                events.append(FaultEvent(phase=phase, fault=fault, action="on", at_ns=self.clock.now_ns(), ok=False,
                                         detail=f"the fault ledger could not record {name}: {exc}"))  # fmt: skip
                break
            active.append((fault, entry))  # before the call: a timed-out add may still have happened
            try:
                await self.api.add_toxic(fault.proxy, ToxicState.of(fault, name))
            except FaultInjectionFailed as exc:
                events.append(FaultEvent(phase=phase, fault=fault, action="on", at_ns=self.clock.now_ns(),
                                         ok=False, detail=str(exc)))  # fmt: skip
                break
            events.append(FaultEvent(phase=phase, fault=fault, action="on", at_ns=self.clock.now_ns(), ok=True,
                                     detail=name))  # fmt: skip
        return events

    async def remove(self, phase: int) -> list[FaultEvent]:
        events: list[FaultEvent] = []
        for fault, entry in self._active.pop(phase, []):
            assert entry.toxic is not None
            detail = entry.toxic
            try:
                try:
                    async with asyncio.timeout(REMOVE_STALL_S):
                        await self.api.remove_toxic(entry.proxy, entry.toxic)
                except TimeoutError as exc:
                    raise FaultInjectionFailed(
                        proxy=entry.proxy, toxic=entry.toxic, reason=f"no answer within {REMOVE_STALL_S:g}s"
                    ) from exc
            except FaultInjectionFailed as exc:
                if exc.status is not None or not self._owns(entry.proxy):
                    # Left in the ledger as outstanding: the reconciler retries at the next start-up.
                    events.append(FaultEvent(phase=phase, fault=fault, action="off", at_ns=self.clock.now_ns(),
                                             ok=False, detail=str(exc)))  # fmt: skip
                    continue
                try:
                    await self._recreate(entry.proxy)
                except FaultInjectionFailed as again:
                    events.append(FaultEvent(phase=phase, fault=fault, action="off", at_ns=self.clock.now_ns(),
                                             ok=False, detail=f"{exc}; then {again}"))  # fmt: skip
                    continue
                detail = f"{entry.toxic}: {STALL_NOTE}"
            if not await self._ledger_removed(entry):
                detail = f"{detail} (the fault ledger could not be updated; a reconciler will)"
            events.append(FaultEvent(phase=phase, fault=fault, action="off", at_ns=self.clock.now_ns(), ok=True,
                                     detail=detail))  # fmt: skip
        return events

    async def _ledger_removed(self, entry: LedgerEntry) -> bool:
        """Marks ``entry`` removed in the ledger; False (logged) when the ledger cannot be written now."""
        try:
            await self.ledger.removed(entry)
        except CliffwatchError as exc:
            log.warning("fault removed, but the fault ledger could not record it", run_id=self.run_id,
                        proxy=entry.proxy, toxic=entry.toxic, error=str(exc))  # fmt: skip
            return False
        return True

    def _owns(self, proxy: str) -> bool:
        return any(entry.proxy == proxy for entry in self._created)

    async def _recreate(self, proxy: str) -> None:
        """Deletes and recreates one of the run's proxies, with the same address: the way out when
        Toxiproxy stalls removing a toxic (it does when clients disconnect during the removal, upstream
        issue #558); deleting a proxy still works then, and takes every toxic on it along."""
        state = self.proxies[proxy]
        await self.api.delete_proxy(proxy)
        self.proxies[proxy] = await self.api.create_proxy(name=proxy, listen=state.listen, upstream=state.upstream)

    async def remove_all(self) -> list[FaultEvent]:
        events: list[FaultEvent] = []
        for phase in list(self._active):
            events.extend(await self.remove(phase))
        return events

    async def tear_down(self) -> list[str]:
        """Deletes the proxies this run created; returns what could not be deleted (left to the reconciler)."""
        failures: list[str] = []
        for entry in reversed(self._created):
            try:
                await self.api.delete_proxy(entry.proxy)
            except FaultInjectionFailed as exc:
                failures.append(str(exc))
                continue
            await self._ledger_removed(entry)
        self._created.clear()
        return failures


def host_port(url: str) -> str:
    """``host:port`` of an http(s) URL, with the scheme's default port when none is given."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def with_address(url: str, address: str) -> str:
    """``url`` with its host and port replaced by ``address`` (host:port), keeping scheme and path."""
    parts = urlsplit(url)
    host, _, port = address.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):  # a wildcard listen address is reached on loopback
        host = "127.0.0.1"
    return urlunsplit((parts.scheme, f"{host}:{port}", parts.path, parts.query, parts.fragment))
