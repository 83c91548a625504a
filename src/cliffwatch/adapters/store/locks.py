"""The schedule leader's lock: a PostgreSQL advisory lock, or nothing to contend for on SQLite.

PostgreSQL keeps a session-level advisory lock for as long as the session that took it lives, so the lock
lives on a connection of its own, outside the pool (a pooled connection handed to someone else would take
the lock with it), committed after every statement (an idle-in-transaction session would pin old row
versions and could be cut by ``idle_in_transaction_session_timeout``). When that connection dies, the
server frees the lock and another instance can take it; the holder learns it on its next ``try_acquire``.
"""

from __future__ import annotations

import contextlib

from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.engine import create_engine
from cliffwatch.domain.ports import LeaderLock

# Advisory lock keys are one bigint space shared by everything on the database: this one spells "cwleader"
# in ASCII, unlikely to meet another application's.
LEADER_LOCK_KEY = int.from_bytes(b"cwleader", "big")


class PgLeaderLock:
    """``LeaderLock`` as ``pg_try_advisory_lock(key)`` on a dedicated connection.

    ``try_acquire`` while held checks the connection is alive (a connection lost is a lock lost) and takes
    the lock again if it can. Raises ``StoreUnavailable`` when the database cannot be reached.
    """

    def __init__(self, engine: AsyncEngine, *, key: int = LEADER_LOCK_KEY) -> None:
        self.key = key
        self._engine = create_engine(engine.url, pooled=False)
        self._db = Database(self._engine)
        self._conn: AsyncConnection | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    async def try_acquire(self) -> bool:
        if self._conn is not None:
            if await self._alive(self._conn):
                return True
            await self._drop()
        try:
            conn = await self._engine.connect()
        except (sa_exc.DBAPIError, OSError) as exc:
            raise self._db.unavailable(exc) from exc
        try:
            acquired = bool((await conn.execute(select(func.pg_try_advisory_lock(self.key)))).scalar())
            await conn.commit()
        except (sa_exc.DBAPIError, OSError) as exc:
            await _close(conn)
            raise self._db.unavailable(exc) from exc
        if acquired:
            self._conn = conn
        else:
            await _close(conn)
        return acquired

    async def release(self) -> None:
        """Frees the lock (closing its connection frees it too, should the unlock fail); safe to repeat."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(sa_exc.DBAPIError, OSError):
            await conn.execute(select(func.pg_advisory_unlock(self.key)))
            await conn.commit()
        await _close(conn)

    async def _alive(self, conn: AsyncConnection) -> bool:
        try:
            await conn.execute(select(1))
            await conn.commit()
        except (sa_exc.DBAPIError, OSError):
            return False
        return True

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await _close(conn)


class SqliteLeaderLock:
    """``LeaderLock`` on SQLite: always held. A SQLite database lives on one host and is served by one
    instance there, so there is nobody to contend with."""

    async def try_acquire(self) -> bool:
        return True

    async def release(self) -> None:
        return None


def leader_lock(engine: AsyncEngine) -> LeaderLock:
    """The leader lock for the engine's backend."""
    return PgLeaderLock(engine) if engine.dialect.name == "postgresql" else SqliteLeaderLock()


async def _close(conn: AsyncConnection) -> None:
    # closing a connection the server already dropped may itself fail: it is gone either way
    with contextlib.suppress(sa_exc.DBAPIError, OSError):
        await conn.invalidate()
        await conn.close()
