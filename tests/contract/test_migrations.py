"""Migrations: an empty database upgraded to head has exactly the schema ``tables.py`` describes, on SQLite
and PostgreSQL; upgrading again changes nothing; instances starting together do not trip over each other;
readiness tells a migrated database from one that is not."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect
from sqlalchemy.ext.asyncio import AsyncEngine

from cliffwatch.adapters.store import create_engine, current_revision, head_revision, is_current, upgrade
from cliffwatch.adapters.store.migrate import REPO_ROOT
from cliffwatch.adapters.store.tables import metadata
from cliffwatch.domain.errors import StoreUnavailable

if TYPE_CHECKING:
    from conftest import PostgresServer

_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest) -> PostgresServer | None:
    """The PostgreSQL server for the postgres case (started before the test's event loop runs)."""
    return request.getfixturevalue("postgres") if request.param == "postgres" else None


@pytest.fixture
async def empty_url(server: PostgresServer | None, tmp_path: Path) -> str:
    """The URL of a database nothing has been created in."""
    if server is None:
        return f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    return await server.create_database(f"migrations_{next(_databases)}")


@pytest.fixture
async def engine(empty_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(empty_url)
    yield engine
    await engine.dispose()


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True, "compare_server_default": True})
    return list(compare_metadata(context, metadata))


def _indexes(connection: Connection) -> dict[str, list[tuple[str | None, tuple[str | None, ...], bool]]]:
    inspector = inspect(connection)
    return {
        table: sorted((i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in inspector.get_indexes(table))
        for table in inspector.get_table_names()
    }


async def test_an_empty_database_upgraded_to_head_has_exactly_the_tables_schema(
    empty_url: str, engine: AsyncEngine
) -> None:
    async with engine.connect() as conn:
        before = await conn.run_sync(_differences)
    assert {d[1].name for d in before if d[0] == "add_table"} == set(metadata.tables)  # the comparison sees tables

    assert await upgrade(empty_url) == head_revision()
    async with engine.connect() as conn:
        assert await conn.run_sync(_differences) == []
        indexes = await conn.run_sync(_indexes)
    assert ("ix_runs_status_created_at_id", ("status", "created_at", "id"), False) in indexes["runs"]
    assert ("ix_fault_ledger_removed_at_id", ("removed_at", "id"), False) in indexes["fault_ledger"]
    assert "alembic_version" in indexes


async def test_upgrading_again_changes_nothing_and_readiness_follows_the_revision(
    empty_url: str, engine: AsyncEngine
) -> None:
    assert await current_revision(engine) is None
    assert not await is_current(engine)
    assert await upgrade(empty_url) == head_revision()
    assert await is_current(engine)
    assert await upgrade(empty_url) == head_revision()
    assert await current_revision(engine) == head_revision()
    async with engine.connect() as conn:
        assert await conn.run_sync(_differences) == []


async def test_instances_starting_together_migrate_once_and_both_start(empty_url: str, engine: AsyncEngine) -> None:
    revisions = await asyncio.gather(*(upgrade(empty_url) for _ in range(3)))
    assert revisions == [head_revision()] * 3
    assert await is_current(engine)


async def test_readiness_of_an_unreachable_database_says_why() -> None:
    engine = create_engine("postgresql+asyncpg://cw:pw@127.0.0.1:1/cw")
    try:
        with pytest.raises(StoreUnavailable, match="Connection refused"):
            await is_current(engine)
    finally:
        await engine.dispose()


async def test_the_alembic_command_migrates_from_any_directory(tmp_path: Path) -> None:
    database = tmp_path / "cli.db"
    command = [sys.executable, "-m", "alembic", "-c", str(REPO_ROOT / "alembic.ini"),
               "-x", f"url=sqlite+aiosqlite:///{database}"]  # fmt: skip
    for args in (["upgrade", "head"], ["check"]):  # check: the scripts and the tables agree
        done = await asyncio.to_thread(
            subprocess.run, [*command, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
    engine = create_engine(f"sqlite+aiosqlite:///{database}")
    try:
        assert await is_current(engine)
    finally:
        await engine.dispose()
