"""The runs half of ``RunStore`` in SQL: creating (idempotently), listing by keyset, claiming under a lease,
keeping a running sweep's provisional result, aborting, finishing and expiring runs.

Every change is one transaction whose guard is in its ``WHERE`` clause (``status = 'running' AND owner =
…``), so two instances racing on a run cannot both win. The claim takes the oldest queued run with
``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so claimers pass each other's locked rows by instead of queueing
behind them; on SQLite it is one ``UPDATE … WHERE id = (SELECT …)`` in a ``BEGIN IMMEDIATE`` transaction,
which holds the only write lock there is. While the emergency stop is on, a claim starts nothing and ends
the queued runs it finds as aborted.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, Update, and_, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.rows import end_values, phase_rows, run_of, run_row, second_rows
from cliffwatch.adapters.store.tables import control, run_phases, run_seconds, runs, scenario_versions
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import CallerUsage, Run, RunEnd, RunKind, RunPage, RunQuery, ScenarioSource, Trigger
from cliffwatch.services.store_values import (
    EMERGENCY_STOP,
    as_utc,
    check_limit,
    decode_cursor,
    encode_cursor,
    lease_reason,
    result_document,
    stop_reason,
)

QUEUED, RUNNING, INTERRUPTED = RunStatus.QUEUED.value, RunStatus.RUNNING.value, RunStatus.INTERRUPTED.value
NO_GRACE = timedelta(0)
TERMINAL = tuple(s.value for s in RunStatus if s.terminal)
OLDEST_FIRST = (runs.c.created_at, runs.c.id)


class SqlRuns:
    _db: Database

    async def create_run(self, run: Run) -> tuple[Run, bool]:
        # ON CONFLICT DO NOTHING, then read the winner: no check-then-insert race. On PostgreSQL a conflicting
        # insert of a transaction not yet committed is waited for, so the winner is there to be read.
        async with self._db.write() as conn:
            inserted = await conn.execute(
                self._db.insert(runs).values(run_row(run)).on_conflict_do_nothing().returning(*runs.c)
            )
            row = inserted.mappings().first()
            if row is not None:
                return run_of(row), True
            existing = await _duplicate_of(conn, run)
        if existing is None:
            raise ValueError(f"run id {run.id!r} is already taken")
        return existing, False

    async def get_run(self, run_id: str) -> Run | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).mappings().first()
        return None if row is None else run_of(row)

    async def run_with_key(self, idempotency_key: str) -> Run | None:
        async with self._db.read() as conn:
            found = select(runs).where(runs.c.idempotency_key == idempotency_key)
            row = (await conn.execute(found)).mappings().first()
        return None if row is None else run_of(row)

    async def list_runs(self, query: RunQuery) -> RunPage:
        check_limit(query.limit)
        conditions: list[ColumnElement[bool]] = []
        if query.scenario is not None:
            conditions.append(runs.c.scenario_name == query.scenario)
        if query.status is not None:
            conditions.append(runs.c.status == query.status.value)
        if query.kind is not None:
            conditions.append(runs.c.kind == query.kind.value)
        if query.schedule_id is not None:
            conditions.append(runs.c.schedule_id == query.schedule_id)
        if query.since is not None:
            conditions.append(runs.c.created_at >= query.since)
        if query.until is not None:
            conditions.append(runs.c.created_at < query.until)
        if query.cursor is not None:
            at, run_id = decode_cursor(query.cursor)
            # (created_at, id) < (at, run_id), spelt out: row-value comparison is not portable everywhere
            conditions.append(or_(runs.c.created_at < at, and_(runs.c.created_at == at, runs.c.id < run_id)))
        statement = (
            select(runs).where(*conditions).order_by(runs.c.created_at.desc(), runs.c.id.desc()).limit(query.limit + 1)
        )
        async with self._db.read() as conn:
            found = [run_of(row) for row in (await conn.execute(statement)).mappings()]
        page = found[: query.limit]
        more = len(found) > query.limit
        return RunPage(runs=tuple(page), next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None)

    async def claim_run(self, *, owner: str, now: datetime, lease_until: datetime) -> Run | None:
        oldest = select(runs.c.id).where(runs.c.status == QUEUED).order_by(*OLDEST_FIRST).limit(1)
        if self._db.postgres:
            oldest = oldest.with_for_update(skip_locked=True)
        # The stop is checked again in the claim's own statement: on PostgreSQL a stop committed after the
        # read above is seen by it (each statement sees what was committed before it began), so no run
        # starts under a stop, and one claimed just before it is in stop-all's sweep (docs/security.md).
        claim = (
            update(runs)
            .where(runs.c.id == oldest.scalar_subquery(), runs.c.status == QUEUED, ~_stopped().exists())
            .values(status=RUNNING, owner=owner, lease_until=lease_until, started_at=now)
            .returning(*runs.c)
        )
        async with self._db.write() as conn:
            stop: str | None = (await conn.execute(_stopped())).scalar()
            if stop is not None:
                await conn.execute(abort_queued(stop, now))
                return None
            row = (await conn.execute(claim)).mappings().first()
        return None if row is None else run_of(row)

    async def renew_lease(self, run_id: str, *, owner: str, lease_until: datetime) -> bool:
        renew = update(runs).where(*_held(run_id, owner)).values(lease_until=lease_until)
        async with self._db.write() as conn:
            return (await conn.execute(renew)).rowcount == 1

    async def save_provisional_result(self, run_id: str, *, owner: str, result: Mapping[str, Any]) -> bool:
        save = update(runs).where(*_held(run_id, owner)).values(provisional_result=result_document(result))
        async with self._db.write() as conn:
            return (await conn.execute(save)).rowcount == 1

    async def request_abort(self, run_id: str, reason: str) -> Run | None:
        async with self._db.write() as conn:
            ended = await conn.execute(
                update(runs)
                .where(runs.c.id == run_id, runs.c.status == QUEUED)
                .values(
                    status=RunStatus.ABORTED.value, reason=reason, abort_requested=reason, finished_at=self._db.now()
                )
            )
            if ended.rowcount == 0:  # running: its worker is asked; the first reason asked for stands
                await conn.execute(
                    update(runs)
                    .where(runs.c.id == run_id, runs.c.status == RUNNING, runs.c.abort_requested.is_(None))
                    .values(abort_requested=reason)
                )
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).mappings().first()
        return None if row is None else run_of(row)

    async def finish_run(self, run_id: str, *, owner: str, end: RunEnd) -> bool:
        if not end.status.terminal:
            raise ValueError(f"a run ends as succeeded, aborted, interrupted or failed, not {end.status.value}")
        phases, seconds = phase_rows(run_id, end.result), second_rows(run_id, end.timeseries)
        async with self._db.write() as conn:
            finished = await conn.execute(update(runs).where(*_held(run_id, owner)).values(end_values(end)))
            if finished.rowcount != 1:
                # Reaped while its owner could not reach the database: the owner's end is what happened.
                finished = await conn.execute(update(runs).where(*_reaped(run_id, owner)).values(end_values(end)))
            if finished.rowcount != 1:
                return False
            if phases:
                await conn.execute(run_phases.insert(), phases)
            if seconds:
                await conn.execute(run_seconds.insert(), seconds)
        return True

    async def expire_leases(self, now: datetime, *, grace: timedelta = NO_GRACE) -> list[Run]:
        lapsed = (runs.c.status == RUNNING, runs.c.lease_until < now - grace)
        candidates = select(runs.c.id, runs.c.owner, runs.c.lease_until).where(*lapsed).order_by(*OLDEST_FIRST)
        if self._db.postgres:
            candidates = candidates.with_for_update(skip_locked=True)  # another instance is expiring those
        expired = []
        async with self._db.write() as conn:
            for run_id, owner, lease_until in (await conn.execute(candidates)).all():
                interrupt = (
                    update(runs)
                    .where(runs.c.id == run_id, *lapsed)
                    .values(
                        status=RunStatus.INTERRUPTED.value, finished_at=now, reason=lease_reason(owner, lease_until)
                    )
                    .returning(*runs.c)
                )
                row = (await conn.execute(interrupt)).mappings().first()
                if row is not None:
                    expired.append(run_of(row))
        return expired

    async def active_runs(self) -> list[Run]:
        active = select(runs).where(runs.c.status.in_((QUEUED, RUNNING))).order_by(*OLDEST_FIRST)
        async with self._db.read() as conn:
            return [run_of(row) for row in (await conn.execute(active)).mappings()]

    async def count_runs(self) -> Mapping[str, int]:
        counts = select(runs.c.status, func.count()).group_by(runs.c.status)
        async with self._db.read() as conn:
            found: dict[str, int] = dict((await conn.execute(counts)).all())
        return {status.value: found.get(status.value, 0) for status in RunStatus}

    async def caller_usage(self, triggered_by: str, *, since: datetime) -> CallerUsage:
        mine = (runs.c.trigger == Trigger.API.value, runs.c.triggered_by == triggered_by)
        queued = select(func.count()).select_from(runs).where(*mine, runs.c.status == QUEUED)
        first = func.min(runs.c.created_at).label("first")
        documents = (
            select(first)
            .select_from(runs.join(scenario_versions, and_(scenario_versions.c.name == runs.c.scenario_name,
                                                           scenario_versions.c.content_hash == runs.c.scenario_hash)))
            .where(*mine, runs.c.created_at >= since, scenario_versions.c.source == ScenarioSource.INLINE.value)
            .group_by(runs.c.scenario_name, runs.c.scenario_hash)
            .order_by(first)
        )  # fmt: skip
        async with self._db.read() as conn:
            count = (await conn.execute(queued)).scalar_one()
            times = [as_utc(t) for t in (await conn.execute(documents)).scalars()]
        return CallerUsage(queued=count, documents=tuple(times))

    async def finished_runs(self, *, scenario: str | None, target_url: str | None, since: datetime | None) -> list[Run]:
        scored = (runs.c.status.in_(TERMINAL), runs.c.score.is_not(None))
        return await self._finished(scored, scenario=scenario, target_url=target_url, since=since)

    async def finished_sweeps(
        self, *, scenario: str | None, target_url: str | None, since: datetime | None
    ) -> list[Run]:
        swept = (
            runs.c.kind == RunKind.SWEEP.value,
            runs.c.status == RunStatus.SUCCEEDED.value,
            runs.c.result.is_not(None),
        )
        return await self._finished(swept, scenario=scenario, target_url=target_url, since=since)

    async def _finished(
        self,
        which: tuple[ColumnElement[bool], ...],
        *,
        scenario: str | None,
        target_url: str | None,
        since: datetime | None,
    ) -> list[Run]:
        """The runs that meet ``which`` and have finished, oldest first, narrowed by scenario, target and time."""
        conditions: list[ColumnElement[bool]] = [*which, runs.c.finished_at.is_not(None)]
        if scenario is not None:
            conditions.append(runs.c.scenario_name == scenario)
        if target_url is not None:
            conditions.append(runs.c.target_url == target_url)
        if since is not None:
            conditions.append(runs.c.finished_at >= since)
        statement = select(runs).where(*conditions).order_by(runs.c.finished_at, runs.c.id)
        async with self._db.read() as conn:
            return [run_of(row) for row in (await conn.execute(statement)).mappings()]


def _stopped() -> Select[Any]:
    """The emergency stop's reason, as a query: a row only while the stop is on."""
    return select(control.c.value).where(control.c.key == EMERGENCY_STOP)


def abort_queued(stop: str, now: datetime) -> Update:
    """Ends every queued run as aborted by the emergency stop whose reason is ``stop``: what a claim does
    while the stop is on, and what releasing it does, so no run caught in the queue fires on release."""
    reason = stop_reason(stop)
    return (
        update(runs)
        .where(runs.c.status == QUEUED)
        .values(status=RunStatus.ABORTED.value, reason=reason, abort_requested=reason, finished_at=now)
    )


def _held(run_id: str, owner: str) -> tuple[ColumnElement[bool], ...]:
    """The run is running and ``owner`` holds it: the guard of every change a worker makes."""
    return (runs.c.id == run_id, runs.c.status == RUNNING, runs.c.owner == owner)


def _reaped(run_id: str, owner: str) -> tuple[ColumnElement[bool], ...]:
    """The run was ``owner``'s and was interrupted by the reaper (no result yet): its owner may still say how
    it really ended, once."""
    return (runs.c.id == run_id, runs.c.status == INTERRUPTED, runs.c.owner == owner, runs.c.result.is_(None))


async def _duplicate_of(conn: AsyncConnection, run: Run) -> Run | None:
    """The stored run ``run`` would double: same idempotency key first, then same schedule and fire time."""
    lookups: list[ColumnElement[bool]] = []
    if run.idempotency_key is not None:
        lookups.append(runs.c.idempotency_key == run.idempotency_key)
    if run.schedule_id is not None and run.fire_time is not None:
        lookups.append(and_(runs.c.schedule_id == run.schedule_id, runs.c.fire_time == run.fire_time))
    for lookup in lookups:
        row = (await conn.execute(select(runs).where(lookup))).mappings().first()
        if row is not None:
            return run_of(row)
    return None
