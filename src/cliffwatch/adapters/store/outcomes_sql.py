"""The bulky half of ``RunStore`` in SQL: a run's request outcomes and its per-second time series.

A run of an hour at a few hundred requests a second leaves a million outcomes, written in batches while
the run goes on (``services/outcome_sink.py``): each batch is one executemany of one prepared INSERT
(asyncpg pipelines it, SQLite steps one compiled statement), and a page is read by keyset on the primary
key, so the cost of a batch or a page does not grow with what is already stored.

The service's worker writes these rows on the event loop its generator sends from, thousands a second, so
a batch goes to the driver as plain tuples in the driver's own parameter style (``exec_driver_sql``), made
a few dozen at a time between turns of the loop: SQLAlchemy's per-row parameter processing cost as much
as the rest of the row (docs/performance.md, "The whole run path"). What its column types did per row is
done here: the attempt log as JSON text (``json_text``, the engine's serializer), NUL-free error text
(``FreeText``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.exc import IntegrityError

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.rows import outcome_of
from cliffwatch.adapters.store.tables import request_outcomes, run_seconds, runs
from cliffwatch.domain.errors import RunNotFound
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.service.runs import OUTCOME_FIELDS, StoredOutcome, outcome_values
from cliffwatch.services.store_values import check_limit, json_text, without_nul

COLUMNS = OUTCOME_FIELDS  # the table's columns are the stored outcome's fields, in their order (tested)
_LOG, _ERROR = COLUMNS.index("attempt_log"), COLUMNS.index("error")
ROWS_PER_TURN = 50  # rows made between turns of the event loop: about half a millisecond of it
_RUN_EXISTS = select(runs.c.id).where(runs.c.id == bindparam("run_id"))  # built once, not per batch


class SqlOutcomes:
    _db: Database

    async def add_outcomes(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        rows: list[tuple[Any, ...]] = []
        for first in range(0, len(records), ROWS_PER_TURN):
            if first:
                await asyncio.sleep(0)
            rows += [_values(run_id, record) for record in records[first : first + ROWS_PER_TURN]]
        if not rows:
            await self._check_run(run_id)
            return
        try:
            async with self._db.write() as conn:
                await conn.exec_driver_sql(_insert(conn.dialect.paramstyle), rows)
        except IntegrityError:
            # The rows' run is their foreign key, so an unknown run is told by the database, and asked about
            # only then: a check before every batch was a second statement, 17-19 % of a batch's CPU on SQLite.
            await self._check_run(run_id)
            raise

    async def _check_run(self, run_id: str) -> None:
        async with self._db.read() as conn:
            if (await conn.execute(_RUN_EXISTS, {"run_id": run_id})).first() is None:
                raise RunNotFound(run_id)

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


def _values(run_id: str, record: RequestRecord) -> tuple[Any, ...]:
    """A record's row in ``COLUMNS`` order, as its column types would have bound it."""
    row = list(outcome_values(run_id, record))
    row[_LOG] = json_text(row[_LOG])
    if row[_ERROR] is not None:
        row[_ERROR] = without_nul(row[_ERROR])
    return tuple(row)


@functools.cache
def _insert(paramstyle: str) -> str:
    """The INSERT in the driver's parameter style. A request id already stored keeps its first record: a
    flush retried after a commit whose answer was lost must not fail the run."""
    if paramstyle == "qmark":  # sqlite3 (aiosqlite)
        marks = ["?"] * len(COLUMNS)
    elif paramstyle == "numeric_dollar":  # asyncpg
        marks = [f"${n}" for n in range(1, len(COLUMNS) + 1)]
    else:
        raise ValueError(f"no outcome INSERT for the parameter style {paramstyle!r}")
    return (f"INSERT INTO {request_outcomes.name} ({', '.join(COLUMNS)}) VALUES ({', '.join(marks)}) "
            "ON CONFLICT (run_id, request_id) DO NOTHING")  # fmt: skip
