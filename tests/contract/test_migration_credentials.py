"""Migration 0006 (credentials apart) on a database that holds what earlier versions stored in the clear: the
documents are masked with their credentials moved apart under the same hash, runs' target URLs lose their
passwords, and a downgrade puts everything back — on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from alembic import command
from sqlalchemy import Connection, text

from cliffwatch.adapters.store import SqlStore, create_engine
from cliffwatch.adapters.store.migrate import alembic_config
from cliffwatch.domain.security.redaction import restore

if TYPE_CHECKING:
    from conftest import PostgresServer

_databases = itertools.count()
KEY = "sk-live-0123456789"
DOCUMENT = {
    "name": "old",
    "target": {"url": "http://alice:pw-1@127.0.0.1:8000",
               "request": {"model": "m", "headers": {"Authorization": f"Bearer {KEY}", "X-Trace": "1"}}},
}  # fmt: skip
RESULT = {"run_id": "r1", "target": {"url": "http://alice:pw-1@127.0.0.1:8000", "api": "openai-chat"}}


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest) -> PostgresServer | None:
    return request.getfixturevalue("postgres") if request.param == "postgres" else None


def _to(revision: str, *, down: bool = False) -> Callable[[Connection], None]:
    def migrate(connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)

    return migrate


async def test_stored_credentials_are_masked_and_moved_apart(server: PostgresServer | None, tmp_path: Path) -> None:
    if server is None:
        url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    else:
        url = await server.create_database(f"migration_credentials_{next(_databases)}")
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_to("0004"))
            now = "2026-01-01 00:00:00"
            await conn.execute(text(
                "INSERT INTO scenario_versions (name, content_hash, document, source, created_at) "
                f"VALUES ('old', 'h1', '{json.dumps(DOCUMENT)}', 'registered', '{now}')"
            ))  # fmt: skip
            await conn.execute(text(
                "INSERT INTO runs (id, scenario_name, scenario_hash, status, trigger, triggered_by, created_at, "
                "target_url, seed, threshold, overrides, verdicts, result) VALUES ('r1', 'old', 'h1', 'succeeded', "
                f"'api', 'ci', '{now}', 'http://alice:pw-1@127.0.0.1:8000', 1, 70, '{{}}', '[]', "
                f"'{json.dumps(RESULT)}')"
            ))  # fmt: skip
        async with engine.begin() as conn:
            await conn.run_sync(_to("head"))
        store = SqlStore(engine)
        version = await store.scenario_version("old", "h1")
        run = await store.get_run("r1")
        assert version is not None
        assert run is not None
        assert version.document["target"]["request"]["headers"] == {"Authorization": "***", "X-Trace": "1"}
        assert version.document["target"]["url"] == "http://alice:***@127.0.0.1:8000"
        assert restore(version.document, await store.scenario_credentials("old", "h1")) == DOCUMENT
        assert run.target_url == "http://alice:***@127.0.0.1:8000"
        assert run.result is not None
        assert run.result["target"]["url"] == "http://alice:***@127.0.0.1:8000"

        async with engine.begin() as conn:
            await conn.run_sync(_to("0004", down=True))
            document = (await conn.execute(text("SELECT document FROM scenario_versions"))).scalar_one()
        assert (json.loads(document) if isinstance(document, str) else document) == DOCUMENT
    finally:
        await engine.dispose()
