"""``GamedayStore`` in SQL: game days from their start to their verdict, held under a lease as runs are.

As in ``runs_sql``, every change is one statement whose guard is in its ``WHERE`` clause (``status = 'running'
AND owner = …``): a game day reaped as interrupted is not written over by the instance that lost it, and one
fire of a schedule starts one game day (the unique (schedule_id, fire_time), inserted with ``ON CONFLICT DO
NOTHING`` and the winner read back).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import RowMapping, select, update

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.tables import gamedays
from cliffwatch.domain.service.gamedays import ExperimentRecord, Gameday, GamedayEnd, GamedayStatus
from cliffwatch.domain.service.runs import Trigger
from cliffwatch.services.store_values import check_limit, lease_reason, plain_json

RUNNING = GamedayStatus.RUNNING.value


class SqlGamedays:
    _db: Database

    async def create_gameday(self, gameday: Gameday) -> tuple[Gameday, bool]:
        async with self._db.write() as conn:
            inserted = await conn.execute(
                self._db.insert(gamedays).values(gameday_row(gameday)).on_conflict_do_nothing().returning(*gamedays.c)
            )
            row = inserted.mappings().first()
            if row is not None:
                return gameday_of(row), True
            if gameday.idempotency_key is not None:  # a repeat that raced its first: the insert found it
                same = select(gamedays).where(gamedays.c.idempotency_key == gameday.idempotency_key)
            else:
                same = select(gamedays).where(gamedays.c.schedule_id == gameday.schedule_id,
                                              gamedays.c.fire_time == gameday.fire_time)  # fmt: skip
            existing = (await conn.execute(same)).mappings().first()
        if existing is None or (gameday.schedule_id is None and gameday.idempotency_key is None):
            raise ValueError(f"game day id {gameday.id!r} is already taken")
        return gameday_of(existing), False

    async def gameday_with_key(self, key: str) -> Gameday | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(gamedays).where(gamedays.c.idempotency_key == key))).mappings().first()
        return None if row is None else gameday_of(row)

    async def get_gameday(self, gameday_id: str) -> Gameday | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(gamedays).where(gamedays.c.id == gameday_id))).mappings().first()
        return None if row is None else gameday_of(row)

    async def list_gamedays(self, *, limit: int, schedule_id: str | None = None,
                            status: GamedayStatus | None = None) -> list[Gameday]:  # fmt: skip
        check_limit(limit)
        newest = select(gamedays).order_by(gamedays.c.created_at.desc(), gamedays.c.id.desc()).limit(limit)
        if schedule_id is not None:
            newest = newest.where(gamedays.c.schedule_id == schedule_id)
        if status is not None:
            newest = newest.where(gamedays.c.status == status.value)
        async with self._db.read() as conn:
            return [gameday_of(row) for row in (await conn.execute(newest)).mappings()]

    async def save_gameday_progress(
        self, gameday_id: str, *, owner: str, experiments: Sequence[ExperimentRecord], lease_until: datetime
    ) -> Gameday | None:
        save = (
            update(gamedays)
            .where(*_held(gameday_id, owner))
            .values(experiments=_experiments(experiments), lease_until=lease_until)
            .returning(*gamedays.c)
        )
        async with self._db.write() as conn:
            row = (await conn.execute(save)).mappings().first()
        return None if row is None else gameday_of(row)

    async def request_gameday_abort(self, gameday_id: str, reason: str) -> Gameday | None:
        first = (*_running(gameday_id), gamedays.c.abort_requested.is_(None))  # the first reason asked for stands
        async with self._db.write() as conn:
            await conn.execute(update(gamedays).where(*first).values(abort_requested=reason))
            row = (await conn.execute(select(gamedays).where(gamedays.c.id == gameday_id))).mappings().first()
        return None if row is None else gameday_of(row)

    async def finish_gameday(self, gameday_id: str, *, owner: str, end: GamedayEnd) -> bool:
        if not end.status.terminal:
            raise ValueError(f"a game day ends finished or interrupted, not {end.status.value}")
        values = {"status": end.status.value, "finished_at": end.finished_at, "verdict": end.verdict,
                  "summary": end.summary, "reason": end.reason, "experiments": _experiments(end.experiments),
                  "notifications": plain_json(list(end.notifications))}  # fmt: skip
        async with self._db.write() as conn:
            return (await conn.execute(update(gamedays).where(*_held(gameday_id, owner)).values(values))).rowcount == 1

    async def expire_gameday_leases(self, now: datetime, *, grace: timedelta = timedelta(0)) -> list[Gameday]:
        lapsed = (gamedays.c.status == RUNNING, gamedays.c.lease_until < now - grace)
        candidates = select(gamedays.c.id, gamedays.c.owner, gamedays.c.lease_until).where(*lapsed)
        if self._db.postgres:
            candidates = candidates.with_for_update(skip_locked=True)  # another instance is expiring those
        expired = []
        async with self._db.write() as conn:
            for gameday_id, owner, lease_until in (await conn.execute(candidates)).all():
                ended = {"status": GamedayStatus.INTERRUPTED.value, "finished_at": now,
                         "reason": lease_reason(owner, lease_until)}  # fmt: skip
                interrupt = update(gamedays).where(gamedays.c.id == gameday_id, *lapsed).values(ended)
                interrupt = interrupt.returning(*gamedays.c)
                row = (await conn.execute(interrupt)).mappings().first()
                if row is not None:
                    expired.append(gameday_of(row))
        return sorted(expired, key=lambda g: (g.created_at, g.id))


def _running(gameday_id: str) -> tuple[Any, ...]:
    return gamedays.c.id == gameday_id, gamedays.c.status == RUNNING


def _held(gameday_id: str, owner: str) -> tuple[Any, ...]:
    return (*_running(gameday_id), gamedays.c.owner == owner)


def _experiments(experiments: Sequence[ExperimentRecord]) -> list[Any]:
    return [e.to_dict() for e in experiments]


def gameday_row(gameday: Gameday) -> dict[str, Any]:
    return {
        "id": gameday.id,
        "name": gameday.name,
        "suite": plain_json(gameday.suite),
        "status": gameday.status.value,
        "trigger": gameday.trigger.value,
        "triggered_by": gameday.triggered_by,
        "created_at": gameday.created_at,
        "experiments": _experiments(gameday.experiments),
        "schedule_id": gameday.schedule_id,
        "fire_time": gameday.fire_time,
        "owner": gameday.owner,
        "lease_until": gameday.lease_until,
        "finished_at": gameday.finished_at,
        "abort_requested": gameday.abort_requested,
        "reason": gameday.reason,
        "verdict": gameday.verdict,
        "summary": gameday.summary,
        "notifications": plain_json(list(gameday.notifications)),
        "idempotency_key": gameday.idempotency_key,
    }


def gameday_of(row: RowMapping) -> Gameday:
    return Gameday(
        id=row["id"],
        name=row["name"],
        suite=row["suite"],
        status=GamedayStatus(row["status"]),
        trigger=Trigger(row["trigger"]),
        triggered_by=row["triggered_by"],
        created_at=row["created_at"],
        experiments=tuple(ExperimentRecord.from_dict(e) for e in row["experiments"]),
        schedule_id=row["schedule_id"],
        fire_time=row["fire_time"],
        owner=row["owner"],
        lease_until=row["lease_until"],
        finished_at=row["finished_at"],
        abort_requested=row["abort_requested"],
        reason=row["reason"],
        verdict=row["verdict"],
        summary=row["summary"],
        notifications=tuple(row["notifications"]),
        idempotency_key=row["idempotency_key"],
    )
