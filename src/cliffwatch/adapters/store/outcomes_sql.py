"""The bulky half of ``RunStore`` in SQL: a run's request outcomes and its per-second time series.

A run of an hour at a few hundred requests a second leaves a million outcomes, written a batch every
second while the run goes on: each batch is one executemany of one prepared INSERT (asyncpg pipelines it,
SQLite steps one compiled statement), and a page is read by keyset on the primary key, so the cost of a
batch or a page does not grow with what is already stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.rows import outcome_of, outcome_row
from cliffwatch.adapters.store.tables import request_outcomes, run_seconds, runs
from cliffwatch.domain.errors import RunNotFound
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.runs import StoredOutcome
from cliffwatch.services.store_values import check_limit


class SqlOutcomes:
    _db: Database

    async def add_outcomes(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        # (no round trip through JSON here, unlike the twin's stored_outcome: the column's serializer is one)
        rows = [outcome_row(StoredOutcome.of(run_id, record)) for record in records]
        # A request id already stored keeps its first record: a flush retried after a commit whose answer
        # was lost must not fail the run.
        insert = self._db.insert(request_outcomes).on_conflict_do_nothing(
            index_elements=[request_outcomes.c.run_id, request_outcomes.c.request_id]
        )
        async with self._db.write() as conn:
            if (await conn.execute(select(runs.c.id).where(runs.c.id == run_id))).first() is None:
                raise RunNotFound(run_id)
            if rows:
                await conn.execute(insert, rows)

    async def list_outcomes(self, run_id: str, *, after: int | None, limit: int) -> list[StoredOutcome]:
        check_limit(limit)
        page = select(request_outcomes).where(request_outcomes.c.run_id == run_id)
        if after is not None:
            page = page.where(request_outcomes.c.request_id > after)
        page = page.order_by(request_outcomes.c.request_id).limit(limit)
        async with self._db.read() as conn:
            return [outcome_of(row) for row in (await conn.execute(page)).mappings()]

    async def timeseries(self, run_id: str) -> list[Mapping[str, Any]]:
        rows = select(run_seconds.c.row).where(run_seconds.c.run_id == run_id).order_by(run_seconds.c.t)
        async with self._db.read() as conn:
            return list((await conn.execute(rows)).scalars())
