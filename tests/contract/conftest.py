"""The stores under contract: the in-memory twin, SQLite (a file of the test's own) and PostgreSQL (a
database of the test's own on the session's server), each migrated by the real migrations.

``backend`` gives a test its store, the clock the store stamps with, and ways to make what an instance
sharing the database would have: another store (its own engine and connections), a fault ledger, a
leader lock (see ``store_kit``).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import text
from store_kit import BACKENDS, Backend, Clock

from cliffwatch.adapters.store import SqlStore, create_engine, upgrade
from cliffwatch.adapters.store.tables import metadata
from cliffwatch.services.memory_store import InMemoryStore

if TYPE_CHECKING:
    from conftest import PostgresServer


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where a backend's database comes from, settled before the test's event loop runs."""

    name: str
    sqlite_template: Path | None = None
    postgres_url: str | None = None


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once; each test gets a copy."""
    path = tmp_path_factory.mktemp("sqlite") / "template.db"
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        runner.run(upgrade(f"sqlite+aiosqlite:///{path}"))
    return path


@pytest.fixture(scope="session")
def postgres_database(postgres: PostgresServer) -> str:
    """A PostgreSQL database migrated to head once, its URL; each test empties it first (faster than a
    database of its own: a copy of a migrated template takes a quarter of a second)."""
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        url = runner.run(postgres.create_database("cw_contract"))
        runner.run(upgrade(url))
    return url


@pytest.fixture(params=BACKENDS)
def backend_source(request: pytest.FixtureRequest) -> Source:
    name: str = request.param
    if name == "sqlite":
        return Source(name=name, sqlite_template=request.getfixturevalue("sqlite_template"))
    if name == "postgres":
        return Source(name=name, postgres_url=request.getfixturevalue("postgres_database"))
    return Source(name=name)


@pytest.fixture
async def backend(backend_source: Source, tmp_path: Path) -> AsyncIterator[Backend]:
    clock = Clock()
    if backend_source.name == "memory":
        memory = InMemoryStore(now=clock)
        yield Backend(name="memory", store=memory, clock=clock, memory=memory)
        return
    if backend_source.sqlite_template is not None:
        path = tmp_path / "store.db"
        shutil.copyfile(backend_source.sqlite_template, path)
        url = f"sqlite+aiosqlite:///{path}"
    else:
        assert backend_source.postgres_url is not None
        url = backend_source.postgres_url
    engine = create_engine(url)
    if backend_source.postgres_url is not None:
        async with engine.begin() as conn:
            await conn.execute(text(f"TRUNCATE {', '.join(t.name for t in metadata.sorted_tables)} RESTART IDENTITY"))
    backend = Backend(
        name=backend_source.name, store=SqlStore(engine, now=clock), clock=clock, url=url, engines=[engine]
    )
    try:
        yield backend
    finally:
        for engine in backend.engines:
            await engine.dispose()
