"""The SQL store: tables, engines (SQLite WAL / PostgreSQL), the stores, the fault ledger, the leader lock
and the migrations that build the schema."""

from __future__ import annotations

from cliffwatch.adapters.store.engine import create_engine
from cliffwatch.adapters.store.ledger_sql import SqlFaultLedger
from cliffwatch.adapters.store.locks import PgLeaderLock, SqliteLeaderLock, leader_lock
from cliffwatch.adapters.store.migrate import current_revision, head_revision, is_current, upgrade
from cliffwatch.adapters.store.sql import SqlStore

__all__ = [
    "PgLeaderLock",
    "SqlFaultLedger",
    "SqlStore",
    "SqliteLeaderLock",
    "create_engine",
    "current_revision",
    "head_revision",
    "is_current",
    "leader_lock",
    "upgrade",
]
