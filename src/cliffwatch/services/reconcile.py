"""Cleans up faults that outlived their run: what the fault ledger says is outstanding for runs that are no
longer running is removed from its Toxiproxy server, toxics before the proxies that carry them.

Run at every start-up, before anything new is injected. An entry is marked removed only after its server
confirmed the removal (or that it was already gone); anything else stays outstanding for the next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import structlog

from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.ports import FaultLedger, LedgerEntry, ToxiproxyApi

log = structlog.get_logger(__name__)

Connect = Callable[[str], AbstractAsyncContextManager[ToxiproxyApi]]

IN_USE = "in use by a running run"
UNREACHABLE = "server unreachable"


@dataclass(frozen=True, kw_only=True)
class ReconcileReport:
    """What a pass did. ``kept`` holds every entry of a finished or dead run left outstanding, with why
    (its server unreachable or refusing, or its proxy still used by others); ``unreachable`` names the
    servers that could not be reached, with the error."""

    removed: tuple[LedgerEntry, ...] = ()
    gone_with_server: tuple[LedgerEntry, ...] = ()  # a managed server is gone, and its faults with it
    unreachable: tuple[tuple[str, str], ...] = ()
    left_running: tuple[LedgerEntry, ...] = ()
    kept: tuple[tuple[LedgerEntry, str], ...] = ()

    def is_empty(self) -> bool:
        """Nothing was removed, lost or kept: only (perhaps) the faults of runs still going were seen."""
        return not (self.removed or self.gone_with_server or self.unreachable or self.kept)

    def summary(self) -> str:
        """One line per run and server, for the command line; "nothing to clean up" when there was nothing."""
        lines = [
            f"removed {_count(group)} of run {run} from {server}: {_names(group)}"
            for (run, server), group in _by_run(self.removed)
        ]
        lines += [
            f"{_count(group)} of run {run} went with {server}, which the run had started and which is gone: "
            f"{_names(group)}"
            for (run, server), group in _by_run(self.gone_with_server)
        ]
        for server, reason in self.unreachable:
            left = [e for e, why in self.kept if e.server == server and why.startswith(UNREACHABLE)]
            lines.append(f"could not reach {server}, {_count(left)} kept for the next start-up: {reason}")
        lines += [
            f"kept {_names([entry])} of run {entry.run_id} on {entry.server}: {reason}"
            for entry, reason in self.kept
            if not reason.startswith(UNREACHABLE)
        ]
        lines += [
            f"left {_count(group)} of run {run} on {server} alone: {IN_USE}"
            for (run, server), group in _by_run(self.left_running)
        ]
        return "\n".join(lines) or "nothing to clean up"


@dataclass(kw_only=True)
class _Pass:
    ledger: FaultLedger
    removed: list[LedgerEntry] = field(default_factory=list)
    gone: list[LedgerEntry] = field(default_factory=list)
    unreachable: list[tuple[str, str]] = field(default_factory=list)
    kept: list[tuple[LedgerEntry, str]] = field(default_factory=list)

    async def confirm(self, entry: LedgerEntry, *, gone: bool = False) -> None:
        await self.ledger.removed(entry)
        (self.gone if gone else self.removed).append(entry)
        log.info("leftover fault removed", run_id=entry.run_id, server=entry.server, proxy=entry.proxy,
                 toxic=entry.toxic, gone_with_server=gone)  # fmt: skip


async def reconcile_faults(ledger: FaultLedger, connect: Connect) -> ReconcileReport:
    """Removes the outstanding faults of runs that are not running, server by server, then compacts the
    ledger. A server that cannot be reached keeps its entries outstanding, unless every one of them is on a
    server the run itself started (``managed``), which died with it. Raises only what the ledger raises."""
    entries = await ledger.outstanding()
    running: dict[str, bool] = {}
    for entry in entries:
        if entry.run_id not in running:
            running[entry.run_id] = await ledger.is_running(entry.run_id)
    left_running = tuple(entry for entry in entries if running[entry.run_id])
    by_server: dict[str, list[LedgerEntry]] = {}
    for entry in entries:
        if not running[entry.run_id]:
            by_server.setdefault(entry.server, []).append(entry)
    work = _Pass(ledger=ledger)
    for server, group in by_server.items():
        in_use = {entry.proxy for entry in left_running if entry.server == server}
        await _clean_server(work, server, group, in_use, connect)
    await ledger.compact()
    return ReconcileReport(
        removed=tuple(work.removed),
        gone_with_server=tuple(work.gone),
        unreachable=tuple(work.unreachable),
        left_running=left_running,
        kept=tuple(work.kept),
    )


async def _clean_server(work: _Pass, server: str, group: list[LedgerEntry], in_use: set[str], connect: Connect) -> None:
    toxics = [e for e in group if e.toxic is not None]
    proxies = [e for e in group if e.toxic is None]
    # A proxy a running run has planned is that run's now (same name, same server): never delete it.
    work.kept.extend((e, IN_USE) for e in proxies if e.proxy in in_use)
    # Toxics first, each confirmed and recorded on its own, before the proxy that carries them goes.
    pending = toxics + [e for e in proxies if e.proxy not in in_use]
    answered = False  # once the server has answered, it is alive: its faults did not die with it
    try:
        async with connect(server) as api:
            while pending:
                reason = await _clean_entry(api, pending[0])
                answered = True
                entry = pending.pop(0)
                if reason is None:
                    await work.confirm(entry)
                else:
                    work.kept.append((entry, reason))
    except FaultInjectionFailed as exc:
        if not pending:
            log.warning("fault server failed after the clean-up", server=server, reason=str(exc))
            return
        # An HTTP status means the server answered: it is alive, whatever went wrong.
        if not answered and exc.status is None and all(e.managed for e in group):
            for entry in pending:
                await work.confirm(entry, gone=True)
            return
        log.warning("fault server unreachable, leftovers kept", server=server, reason=str(exc), kept=len(pending))
        work.unreachable.append((server, str(exc)))
        work.kept.extend((entry, f"{UNREACHABLE}: {exc}") for entry in pending)


async def _clean_entry(api: ToxiproxyApi, entry: LedgerEntry) -> str | None:
    """Removes one leftover; returns None once it is gone, or why it stays. Raises ``FaultInjectionFailed``
    when the server cannot be reached (an error without an HTTP status)."""
    try:
        if entry.toxic is not None:
            await api.remove_toxic(entry.proxy, entry.toxic)  # False: already gone, as good as removed
            return None
        state = await api.get_proxy(entry.proxy)
        if state is None:
            return None
        if state.toxics:
            # Our own toxics on it were removed just before (or failed to be, and are kept), so these are
            # someone else's: a running run's, another ledger's, not cliffwatch's. Deleting would take them along.
            names = ", ".join(t.name for t in state.toxics)
            return f"the proxy still carries toxics: {names}"
        await api.delete_proxy(entry.proxy)  # False: deleted meanwhile, as good as deleted
        return None
    except FaultInjectionFailed as exc:
        if exc.status is None:
            raise
        return str(exc)


def _by_run(entries: Iterable[LedgerEntry]) -> list[tuple[tuple[str, str], list[LedgerEntry]]]:
    groups: dict[tuple[str, str], list[LedgerEntry]] = {}
    for entry in entries:
        groups.setdefault((entry.run_id, entry.server), []).append(entry)
    return list(groups.items())


def _count(entries: list[LedgerEntry]) -> str:
    """ "2 leftover toxics and 1 proxy"."""
    toxics = sum(1 for entry in entries if entry.toxic is not None)
    proxies = len(entries) - toxics
    parts = [f"{toxics} toxic{'s' if toxics != 1 else ''}"] if toxics else []
    parts += [f"{proxies} prox{'ies' if proxies != 1 else 'y'}"] if proxies else []
    if not parts:
        return "no leftover faults"
    number, _, rest = parts[0].partition(" ")
    return " and ".join([f"{number} leftover {rest}", *parts[1:]])


def _names(entries: list[LedgerEntry]) -> str:
    return ", ".join(f"{e.toxic} on {e.proxy}" if e.toxic is not None else f"proxy {e.proxy}" for e in entries)
