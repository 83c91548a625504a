"""``SqlStore``: every store port of the service on one SQL database (SQLite or PostgreSQL).

The methods live by subject in ``runs_sql``, ``outcomes_sql``, ``misc_sql``, ``gamedays_sql`` and
``deliveries_sql``; this class puts them together over one ``Database``. Where the ports leave a choice open,
the SQL store decides as the in-memory twin does: ``services/memory_store.py`` lists those decisions, and the
contract suite holds the two to them. Every method raises ``StoreUnavailable`` when the database cannot be
reached.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.deliveries_sql import SqlDeliveries
from cliffwatch.adapters.store.gamedays_sql import SqlGamedays
from cliffwatch.adapters.store.ledger_sql import SqlFaultLedger
from cliffwatch.adapters.store.locks import leader_lock
from cliffwatch.adapters.store.misc_sql import SqlCatalog
from cliffwatch.adapters.store.outcomes_sql import SqlOutcomes
from cliffwatch.adapters.store.runs_sql import SqlRuns
from cliffwatch.domain.ports import LeaderLock
from cliffwatch.services.store_values import utc_now


class SqlStore(SqlRuns, SqlOutcomes, SqlCatalog, SqlGamedays, SqlDeliveries):
    """Implements ``ScenarioStore``, ``RunStore``, ``ScheduleStore``, ``TokenStore``, ``ControlStore``,
    ``GamedayStore`` and ``DeliveryStore``.

    ``now`` stamps what the ports do not (a queued run's abort, the emergency stop's time). The engine is
    the caller's: the store never disposes of it.
    """

    def __init__(self, engine: AsyncEngine, *, now: Callable[[], datetime] = utc_now) -> None:
        self._db = Database(engine, now=now)

    @property
    def engine(self) -> AsyncEngine:
        return self._db.engine

    def leader_lock(self) -> LeaderLock:
        """The leader lock on this store's database (as ``InMemoryStore.leader_lock``)."""
        return leader_lock(self._db.engine)

    def fault_ledger(
        self, *, now: Callable[[], datetime] | None = None, grace: timedelta = timedelta(0)
    ) -> SqlFaultLedger:
        """The fault ledger on this store's database, judging leases by ``now`` (the store's clock)."""
        return SqlFaultLedger(self._db.engine, now=now or self._db.now, grace=grace)
