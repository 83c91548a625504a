"""The in-memory companions of ``InMemoryStore`` that share its state, as a database's other users share
its tables: ``InMemoryLeaderLock`` (at most one holder among a store's locks) and ``InMemoryStoreFaultLedger``
(the twin of ``SqlFaultLedger``). Get them from ``InMemoryStore.leader_lock`` and ``.fault_ledger``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cliffwatch.domain.ports import LedgerEntry
from cliffwatch.domain.results.result import RunStatus

if TYPE_CHECKING:
    from cliffwatch.services.memory_store import InMemoryStore


class InMemoryLeaderLock:
    """``LeaderLock`` among the instances sharing one ``InMemoryStore``."""

    def __init__(self, store: InMemoryStore) -> None:
        self._store = store

    async def try_acquire(self) -> bool:
        if self._store._leader is None:
            self._store._leader = self
        return self._store._leader is self

    async def release(self) -> None:
        if self._store._leader is self:
            self._store._leader = None


@dataclass(kw_only=True)
class _LedgerRow:
    entry: LedgerEntry
    removed: bool = False


@dataclass(kw_only=True)
class LedgerState:
    """What the database's ledger tables hold: shared by every ledger of one store."""

    finished: dict[str, bool] = field(default_factory=dict)  # by run id, from run_started on
    rows: list[_LedgerRow] = field(default_factory=list)  # oldest first
    dead: set[str] = field(default_factory=set)


class InMemoryStoreFaultLedger:
    """The ``FaultLedger`` twin of ``SqlFaultLedger``: a run the store knows is running while its status is
    running and its lease has not ended ``grace`` ago (``run_started`` and ``run_finished`` are only
    bookkeeping for it); any other run (a CLI run) from ``run_started`` to ``run_finished``, unless a test puts
    it in ``dead`` (its process died). Every ledger of one store shares its entries, as they would share a
    database."""

    def __init__(self, store: InMemoryStore, *, now: Callable[[], datetime], grace: timedelta = timedelta(0)) -> None:
        self._store = store
        self._now = now
        self._grace = grace
        self._state = store._ledger

    @property
    def dead(self) -> set[str]:
        return self._state.dead

    async def run_started(self, run_id: str) -> None:
        self._state.finished[run_id] = False

    async def run_finished(self, run_id: str) -> None:
        self._state.finished[run_id] = True

    async def planned(self, entry: LedgerEntry) -> None:
        row = self._outstanding_row(entry)
        if row is None:
            self._state.rows.append(_LedgerRow(entry=entry))
        else:
            row.entry = entry  # planned again while outstanding: keeps its place, takes the latest details

    async def removed(self, entry: LedgerEntry) -> None:
        row = self._outstanding_row(entry)
        if row is not None:
            row.removed = True

    async def outstanding(self) -> list[LedgerEntry]:
        return [row.entry for row in self._state.rows if not row.removed]

    async def is_running(self, run_id: str) -> bool:
        run = self._store._runs.get(run_id)
        if run is not None:
            return (
                run.status is RunStatus.RUNNING
                and run.lease_until is not None
                and run.lease_until + self._grace >= self._now()
            )
        return self._state.finished.get(run_id) is False and run_id not in self._state.dead

    async def compact(self) -> None:
        state = self._state
        known = {*state.finished, *(row.entry.run_id for row in state.rows)}
        settled = {run_id for run_id in known if not await self.is_running(run_id)}
        state.rows = [row for row in state.rows if not (row.removed and row.entry.run_id in settled)]
        outstanding = {row.entry.run_id for row in state.rows if not row.removed}
        state.finished = {r: v for r, v in state.finished.items() if r not in settled or r in outstanding}

    def _outstanding_row(self, entry: LedgerEntry) -> _LedgerRow | None:
        key = (entry.run_id, entry.key)
        return next((r for r in self._state.rows if not r.removed and (r.entry.run_id, r.entry.key) == key), None)
