"""Schema migrations with Alembic: bringing a database to the head revision, and telling whether it is there.

The scripts live in ``migrations/`` at the repository root (found from this file, like the bundled
scenarios), with ``alembic.ini`` beside it for the ``alembic`` command. ``upgrade`` runs them in one
transaction: on PostgreSQL under a transaction-level advisory lock, so instances starting together take
turns and the later ones find the schema current; on SQLite under ``BEGIN IMMEDIATE``, to the same effect.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.engine import create_engine

# src/cliffwatch/adapters/store/ → the repository root
REPO_ROOT = Path(__file__).resolve().parents[4]
ALEMBIC_INI = REPO_ROOT / "alembic.ini"
MIGRATIONS_DIR = REPO_ROOT / "migrations"
MIGRATION_LOCK_KEY = int.from_bytes(b"cwmigrat", "big")  # a pg advisory lock key: "cwmigrat" in ASCII


def alembic_config() -> Config:
    """Alembic's configuration, with the scripts' location made absolute (any working directory will do)."""
    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    """The newest revision of the scripts."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migration scripts in {MIGRATIONS_DIR}")
    return head


async def upgrade(database_url: str) -> str:
    """Brings the database to the head revision (nothing to do when it is there) and returns that revision.
    Raises ``StoreUnavailable`` when the database cannot be reached."""
    engine = create_engine(database_url, pooled=False)
    try:
        return await upgrade_engine(engine)
    finally:
        await engine.dispose()


async def upgrade_engine(engine: AsyncEngine) -> str:
    """``upgrade`` on an engine the caller owns."""
    db = Database(engine)
    async with db.write() as conn:
        if db.postgres:
            # released at commit: the next instance then finds the schema at head and does nothing
            await conn.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
        await conn.run_sync(_upgrade)
        revision = await conn.run_sync(_current)
    assert revision is not None
    return revision


async def current_revision(engine: AsyncEngine) -> str | None:
    """The database's revision; None for a database never migrated. Raises ``StoreUnavailable``."""
    async with Database(engine).read() as conn:
        return await conn.run_sync(_current)


async def is_current(engine: AsyncEngine) -> bool:
    """Whether the database is at the head revision (what ``/readyz`` asks). Raises ``StoreUnavailable``."""
    return await current_revision(engine) == head_revision()


def _upgrade(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection  # env.py migrates on it instead of connecting itself
    command.upgrade(config, "head")


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()
