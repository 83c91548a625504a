"""The fault ledger in the database: the ``FaultLedger`` port for service runs (and CLI runs sharing it).

An entry is a row of ``fault_ledger``, committed before ``planned`` returns, so it exists before the toxic
it names does; ``removed`` stamps ``removed_at``. Whether a run is still running, which the reconciler asks
before removing anything of it, depends on who runs it:

- a service run (a row in ``runs``) runs while its status is running and its lease has not ended ``grace``
  ago. The lease is the only liveness that holds across hosts: an instance that could not renew it fences its
  run before the lease ends (``services/lease.py``), so once the grace has passed too its faults are fair
  game (and ``expire_leases``, given the same grace, interrupts it). Before then they are left alone.
  ``run_started``/``run_finished`` are kept in ``ledger_runs`` as bookkeeping only; they do not change the
  answer.
- any other run (a CLI process recording its faults here) runs from ``run_started`` to ``run_finished``
  while its process lives: host, pid, the pid's start time and the boot id, as in the file ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from cliffwatch.adapters.faults.fault_ledger import Owner
from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.tables import fault_ledger, ledger_runs, runs
from cliffwatch.domain.ports import LedgerEntry
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.services.store_values import utc_now


class SqlFaultLedger:
    """Implements ``FaultLedger`` on the store's database; ``now`` is the clock leases are judged by, and
    ``grace`` how long after its lease's end a run still counts as running (``Settings.lease_grace_s``)."""

    def __init__(
        self, engine: AsyncEngine, *, now: Callable[[], datetime] = utc_now, grace: timedelta = timedelta(0)
    ) -> None:
        self._db = Database(engine, now=now)
        self._grace = grace

    async def run_started(self, run_id: str) -> None:
        owner = Owner.current()
        values = {"host": owner.host, "pid": owner.pid, "start_time": owner.start_time, "boot_id": owner.boot_id,
                  "started_at": self._db.now(), "finished_at": None}  # fmt: skip
        # a run id started again (a retried CLI run) takes its latest owner, as in the file ledger
        upsert = self._db.insert(ledger_runs).values(run_id=run_id, **values)
        async with self._db.write() as conn:
            await conn.execute(upsert.on_conflict_do_update(index_elements=[ledger_runs.c.run_id], set_=values))

    async def run_finished(self, run_id: str) -> None:
        async with self._db.write() as conn:
            finished = update(ledger_runs).where(ledger_runs.c.run_id == run_id).values(finished_at=self._db.now())
            if (await conn.execute(finished)).rowcount == 0:
                # finished without a start on record: remembered as finished, owner unknown
                await conn.execute(ledger_runs.insert().values(run_id=run_id, host="", pid=0, started_at=self._db.now(),
                                                               finished_at=self._db.now()))  # fmt: skip

    async def planned(self, entry: LedgerEntry) -> None:
        async with self._db.write() as conn:
            # planned again while outstanding: the entry keeps its place (its id) and takes the latest details
            existing = await conn.execute(
                update(fault_ledger).where(*_outstanding(entry)).values(managed=entry.managed)
            )
            if existing.rowcount == 0:
                await conn.execute(
                    fault_ledger.insert().values(run_id=entry.run_id, server=entry.server, proxy=entry.proxy,
                                                 toxic=entry.toxic, managed=entry.managed, planned_at=self._db.now())
                )  # fmt: skip

    async def removed(self, entry: LedgerEntry) -> None:
        async with self._db.write() as conn:
            await conn.execute(update(fault_ledger).where(*_outstanding(entry)).values(removed_at=self._db.now()))

    async def outstanding(self) -> list[LedgerEntry]:
        statement = select(fault_ledger).where(fault_ledger.c.removed_at.is_(None)).order_by(fault_ledger.c.id)
        async with self._db.read() as conn:
            rows = (await conn.execute(statement)).mappings()
            return [LedgerEntry(run_id=r["run_id"], server=r["server"], proxy=r["proxy"], toxic=r["toxic"],
                                managed=r["managed"]) for r in rows]  # fmt: skip

    async def is_running(self, run_id: str) -> bool:
        async with self._db.read() as conn:
            return await self._running(conn, run_id)

    async def compact(self) -> None:
        """Deletes the removed entries of settled runs, and the records of settled runs with nothing
        outstanding; a settled run is one ``is_running`` says is not."""
        async with self._db.write() as conn:
            known = set((await conn.execute(select(ledger_runs.c.run_id))).scalars())
            known |= set((await conn.execute(select(fault_ledger.c.run_id).distinct())).scalars())
            settled = [run_id for run_id in sorted(known) if not await self._running(conn, run_id)]
            if not settled:
                return
            is_removed = fault_ledger.c.removed_at.is_not(None)
            await conn.execute(delete(fault_ledger).where(fault_ledger.c.run_id.in_(settled), is_removed))
            with_outstanding = select(fault_ledger.c.run_id).where(fault_ledger.c.removed_at.is_(None))
            await conn.execute(
                delete(ledger_runs).where(
                    ledger_runs.c.run_id.in_(settled), ledger_runs.c.run_id.not_in(with_outstanding)
                )
            )

    async def _running(self, conn: AsyncConnection, run_id: str) -> bool:
        service_run = (await conn.execute(select(runs.c.status, runs.c.lease_until).where(runs.c.id == run_id))).first()
        if service_run is not None:
            status, lease_until = service_run
            running = status == RunStatus.RUNNING.value
            return running and lease_until is not None and lease_until + self._grace >= self._db.now()
        row = (await conn.execute(select(ledger_runs).where(ledger_runs.c.run_id == run_id))).mappings().first()
        if row is None or row["finished_at"] is not None:
            return False
        owner = Owner(host=row["host"], pid=row["pid"], start_time=row["start_time"], boot_id=row["boot_id"])
        return owner.alive()


def _outstanding(entry: LedgerEntry) -> tuple[ColumnElement[bool], ...]:
    """The entry's row while it is outstanding (a toxic-less entry is the proxy itself: toxic IS NULL)."""
    toxic = fault_ledger.c.toxic.is_(None) if entry.toxic is None else fault_ledger.c.toxic == entry.toxic
    return (
        fault_ledger.c.run_id == entry.run_id,
        fault_ledger.c.server == entry.server,
        fault_ledger.c.proxy == entry.proxy,
        toxic,
        fault_ledger.c.removed_at.is_(None),
    )
