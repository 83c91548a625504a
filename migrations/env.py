"""Alembic's environment: migrates on the connection cliffwatch hands over, or connects itself (async).

``cliffwatch.adapters.store.migrate.upgrade`` puts its connection, already in a locked transaction, in
``config.attributes["connection"]``. Run as the ``alembic`` command, this connects to ``-x url=...`` or to
the database of cliffwatch's settings, through the same engine setup as the service (SQLite pragmas
included), and runs everything in one transaction (on PostgreSQL under the same advisory lock as the
service's ``upgrade``). Only the table metadata is imported for the schema; the revisions spell out their
own DDL.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, func, select

from cliffwatch.adapters.store.tables import metadata

config = context.config


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most of a table: batch mode copies it into a new one instead
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from cliffwatch.config import Settings  # only the command line needs the settings

    return Settings.from_env().database_url


async def run_connected() -> None:
    from cliffwatch.adapters.store.engine import WRITE_OPTION, create_engine
    from cliffwatch.adapters.store.migrate import MIGRATION_LOCK_KEY

    engine = create_engine(database_url(), pooled=False)
    try:
        # as the service's own upgrade does: one transaction, which a second migrator waits for
        async with engine.execution_options(**{WRITE_OPTION: True}).begin() as connection:
            if connection.dialect.name == "postgresql":
                await connection.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
            await connection.run_sync(run_migrations)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=database_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif (handed_over := config.attributes.get("connection")) is not None:
    run_migrations(handed_over)
else:
    if config.config_file_name is not None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    asyncio.run(run_connected())
