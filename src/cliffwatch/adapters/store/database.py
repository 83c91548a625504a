"""The SQL store's access to its engine: read and write transactions, with database errors translated at
this edge, and the one statement that differs by backend (``INSERT … ON CONFLICT``).

Connection failures of every kind become ``StoreUnavailable`` naming the database without its password:
not connecting at all (refused, unknown host, bad credentials, no such database), a connection lost or
timed out mid-transaction, a pool with no connection to spare, a SQLite file that stayed locked. Other
database errors (a constraint violated, a bad statement) are bugs or answers, and pass through.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from cliffwatch.adapters.store.engine import WRITE_OPTION
from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.services.store_values import utc_now

Insert = postgresql.Insert | sqlite.Insert


class Database:
    """An engine and how the stores use it; ``now`` stamps what the ports do not (an abort's end)."""

    def __init__(self, engine: AsyncEngine, *, now: Callable[[], datetime] = utc_now) -> None:
        self.engine = engine
        self.now = now
        self.postgres = engine.dialect.name == "postgresql"
        self._writer = engine.execution_options(**{WRITE_OPTION: True})

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reading; what it began is rolled back when the block ends."""
        async with self._translated(self.engine) as conn:
            yield conn

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A transaction committed when the block ends (rolled back if it raises); on SQLite it holds the
        write lock from its first statement."""
        async with self._translated(self._writer) as conn, conn.begin():
            yield conn

    def insert(self, table: Table) -> Insert:
        """An INSERT that can say what to do ``on_conflict`` (both backends spell it alike)."""
        return postgresql.insert(table) if self.postgres else sqlite.insert(table)

    def unavailable(self, error: BaseException) -> StoreUnavailable:
        return StoreUnavailable(self.engine.url.render_as_string(hide_password=True), describe(error))

    @asynccontextmanager
    async def _translated(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        connected = False
        try:
            async with engine.connect() as conn:
                connected = True
                yield conn
        except sa_exc.DBAPIError as error:
            # Before a connection is made, any refusal (credentials, no such database) means unavailable.
            lost = isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError) or error.connection_invalidated
            if not connected or lost:
                raise self.unavailable(error) from error
            raise
        except sa_exc.StatementError as error:
            if isinstance(error.orig, ValueError):  # a value refused on its way in (a naive datetime): the caller's
                raise error.orig from error
            raise
        except (OSError, sa_exc.TimeoutError) as error:  # refused, unknown host, timed out; no pooled connection
            raise self.unavailable(error) from error


def describe(error: BaseException) -> str:
    """The first line of what the driver said, without SQLAlchemy's decorations; a socket error by its
    name ("Connection refused"), which asyncpg leaves out."""
    cause: Any = getattr(error, "orig", None) or error
    if isinstance(cause, OSError) and cause.errno is not None and cause.errno > 0:
        name = os.strerror(cause.errno)
        return name if not cause.strerror or cause.strerror == name else f"{name}: {cause.strerror}"
    text = str(cause).strip().splitlines()
    return text[0] if text else type(cause).__name__
