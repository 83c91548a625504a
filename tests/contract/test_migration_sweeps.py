"""Migration 0002 (sweeps) on a database that already holds runs and schedules: they become runs and run
schedules, nothing else changes, and the schema then matches ``tables.py`` — on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from alembic import command
from sqlalchemy import Connection, text

from cliffwatch.adapters.store import SqlStore, create_engine, head_revision
from cliffwatch.adapters.store.migrate import alembic_config
from cliffwatch.domain.service.runs import RunKind

if TYPE_CHECKING:
    from conftest import PostgresServer

_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest) -> PostgresServer | None:
    return request.getfixturevalue("postgres") if request.param == "postgres" else None


def _upgrade_to(revision: str) -> Callable[[Connection], None]:
    def upgrade(connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    return upgrade


async def test_runs_and_schedules_from_before_sweeps_become_plain_runs(
    server: PostgresServer | None, tmp_path: Path
) -> None:
    if server is None:
        url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    else:
        url = await server.create_database(f"migration_sweeps_{next(_databases)}")
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade_to("0001"))
            now = "2026-01-01 00:00:00"
            await conn.execute(text(
                "INSERT INTO runs (id, scenario_name, scenario_hash, status, trigger, triggered_by, created_at, "
                "target_url, seed, threshold, overrides, verdicts) VALUES ('old', 'burst', 'h', 'queued', 'api', "
                f"'ci', '{now}', 'builtin', 1, 70, '{{}}', '[]')"
            ))  # fmt: skip
            await conn.execute(text(
                "INSERT INTO schedules (id, name, cron, timezone, scenario_name, overrides, enabled, catch_up, "
                f"created_at, created_by) VALUES ('s', 'nightly', '0 3 * * *', 'UTC', 'burst', '{{}}', true, "
                f"'skip', '{now}', 'admin')"
            ))  # fmt: skip
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade_to("head"))
            revision = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
        assert revision == head_revision()
        store = SqlStore(engine)
        run = await store.get_run("old")
        schedule = await store.get_schedule("s")
        assert run is not None
        assert schedule is not None
        assert (run.kind, run.sweep, run.usable_rps) == (RunKind.RUN, None, None)
        assert (schedule.kind, schedule.sweep) == (RunKind.RUN, None)
    finally:
        await engine.dispose()
