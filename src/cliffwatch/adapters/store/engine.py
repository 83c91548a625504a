"""Engines for the store: SQLite (aiosqlite, WAL) on one host, PostgreSQL (asyncpg) in production.

SQLite is set up on every new connection: write-ahead logging (readers do not block the writer), a busy
timeout (a writer waits for another instead of failing at once), foreign keys on (off by default!) and
``synchronous=NORMAL`` (durable at each checkpoint, safe against corruption under WAL). The sqlite3
driver's own transaction handling is switched off and SQLAlchemy emits ``BEGIN`` itself, so DDL is
transactional and a write transaction can say ``BEGIN IMMEDIATE``: it takes the write lock before reading,
and two writers then queue on the busy timeout rather than fail on a snapshot that went stale.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from sqlalchemy import URL, event, make_url
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.services.store_values import json_text

SQLITE_MIN_VERSION = (3, 35, 0)
SQLITE_BUSY_TIMEOUT_MS = 5_000
SQLITE_PRAGMAS = (
    f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",  # first: what follows may have to wait for a lock
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
)
WAL_ATTEMPTS = 50
# An execution option: a transaction begun on a connection carrying it writes (BEGIN IMMEDIATE on SQLite).
WRITE_OPTION = "cliffwatch_write"
PG_POOL_SIZE = 10
PG_MAX_OVERFLOW = 10
PG_CONNECT_TIMEOUT_S = 10.0


def create_engine(database_url: str | URL, *, pooled: bool = True) -> AsyncEngine:
    """An engine for ``sqlite+aiosqlite:///path`` or ``postgresql+asyncpg://user:password@host:port/db``.

    A relative SQLite path is resolved against the working directory now, so the database does not move
    when the directory changes later. ``pooled=False`` opens a connection per use (for migrations and a
    lock's dedicated connection). Raises ``ValueError`` for any other kind of URL, ``StoreUnavailable`` for
    a SQLite library older than 3.35. Connecting happens on first use: the store methods raise
    ``StoreUnavailable`` when it fails.
    """
    url = make_url(database_url)
    backend, driver = url.get_backend_name(), url.get_driver_name()
    options: dict[str, Any] = {"json_serializer": json_text}
    if not pooled:
        options["poolclass"] = NullPool
    if (backend, driver) == ("sqlite", "aiosqlite"):
        return _sqlite(url, options)
    if (backend, driver) == ("postgresql", "asyncpg"):
        if pooled:
            # pre-ping: a long-running service outlives database restarts and idle connections cut by proxies
            options.update(pool_size=PG_POOL_SIZE, max_overflow=PG_MAX_OVERFLOW, pool_pre_ping=True,
                           pool_recycle=1_800)  # fmt: skip
        connect_args = {"timeout": PG_CONNECT_TIMEOUT_S, "server_settings": {"application_name": "cliffwatch"}}
        return create_async_engine(url, connect_args=connect_args, **options)
    shown = url.render_as_string(hide_password=True)
    raise ValueError(f"unsupported database URL {shown}: use sqlite+aiosqlite:///path or postgresql+asyncpg://…")


def _sqlite(url: URL, options: dict[str, Any]) -> AsyncEngine:
    if sqlite3.sqlite_version_info < SQLITE_MIN_VERSION:
        # the claim and the idempotent create are single statements with RETURNING, which older SQLite lacks
        needed = ".".join(map(str, SQLITE_MIN_VERSION))
        raise StoreUnavailable(
            str(url), f"SQLite {sqlite3.sqlite_version} is too old: the store needs {needed} or later"
        )
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        url = url.set(database=os.path.abspath(database))
    engine = create_async_engine(url, **options)

    @event.listens_for(engine.sync_engine, "connect")
    def _configure(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver emits no BEGIN of its own: _begin does
        cursor = dbapi_connection.cursor()
        try:
            for pragma in SQLITE_PRAGMAS:
                cursor.execute(pragma)
            _use_wal(cursor)
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _use_wal(cursor: Any) -> None:
    """Switches the database to WAL (a lasting property of the file). On a new file several instances
    starting together race to switch it, and the losers are told "database is locked" at once, whatever
    the busy timeout: they retry briefly (this runs in aiosqlite's thread, so sleeping blocks no loop)."""
    for attempt in range(WAL_ATTEMPTS):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_ATTEMPTS - 1:
                raise
            time.sleep(0.1)


def is_postgres(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "postgresql"
