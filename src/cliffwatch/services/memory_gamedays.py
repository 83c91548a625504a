"""The in-memory twin of ``GamedayStore``, a part of ``InMemoryStore``; the contract suite holds the SQL store to it.

The choices the port leaves open, made alike in ``adapters/store/gamedays_sql.py``: a second game day for the
same (schedule, fire time) returns the first; an id taken by another is a ``ValueError``; progress, an abort
request and the end are written only while the game day runs (progress and end only by its owner); an abort
keeps the first reason asked for; ``expire_gameday_leases`` interrupts running game days whose lease ended
before ``now - grace``, with the reason a run's lease gives, oldest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from cliffwatch.domain.service.gamedays import ExperimentRecord, Gameday, GamedayEnd, GamedayStatus
from cliffwatch.services.store_values import as_utc, check_limit, lease_reason, opt_text, opt_utc, plain_json


class InMemoryGamedays:
    _gamedays: dict[str, Gameday]

    async def create_gameday(self, gameday: Gameday) -> tuple[Gameday, bool]:
        gameday = _stored(gameday)
        if gameday.schedule_id is not None:
            fire = (gameday.schedule_id, gameday.fire_time)
            same = next((g for g in self._gamedays.values() if (g.schedule_id, g.fire_time) == fire), None)
            if same is not None:
                return same, False
        if gameday.idempotency_key is not None:
            keyed = await self.gameday_with_key(gameday.idempotency_key)
            if keyed is not None:
                return keyed, False
        if gameday.id in self._gamedays:
            raise ValueError(f"game day id {gameday.id!r} is already taken")
        self._gamedays[gameday.id] = gameday
        return gameday, True

    async def get_gameday(self, gameday_id: str) -> Gameday | None:
        return self._gamedays.get(gameday_id)

    async def gameday_with_key(self, key: str) -> Gameday | None:
        return next((g for g in self._gamedays.values() if g.idempotency_key == key), None)

    async def list_gamedays(self, *, limit: int, schedule_id: str | None = None,
                            status: GamedayStatus | None = None) -> list[Gameday]:  # fmt: skip
        check_limit(limit)
        found = [
            g
            for g in self._gamedays.values()
            if (schedule_id is None or g.schedule_id == schedule_id) and (status is None or g.status is status)
        ]
        return sorted(found, key=lambda g: (g.created_at, g.id), reverse=True)[:limit]

    async def save_gameday_progress(
        self, gameday_id: str, *, owner: str, experiments: Sequence[ExperimentRecord], lease_until: datetime
    ) -> Gameday | None:
        gameday = self._held(gameday_id, owner)
        if gameday is None:
            return None
        gameday = replace(gameday, experiments=tuple(experiments), lease_until=as_utc(lease_until))
        self._gamedays[gameday_id] = gameday
        return gameday

    async def request_gameday_abort(self, gameday_id: str, reason: str) -> Gameday | None:
        gameday = self._gamedays.get(gameday_id)
        if gameday is not None and gameday.status is GamedayStatus.RUNNING and gameday.abort_requested is None:
            gameday = replace(gameday, abort_requested=opt_text(reason))
            self._gamedays[gameday_id] = gameday
        return gameday

    async def finish_gameday(self, gameday_id: str, *, owner: str, end: GamedayEnd) -> bool:
        if not end.status.terminal:
            raise ValueError(f"a game day ends finished or interrupted, not {end.status.value}")
        gameday = self._held(gameday_id, owner)
        if gameday is None:
            return False
        self._gamedays[gameday_id] = replace(
            gameday, status=end.status, finished_at=as_utc(end.finished_at), verdict=end.verdict,
            summary=opt_text(end.summary), reason=opt_text(end.reason), experiments=tuple(end.experiments),
            notifications=tuple(plain_json(list(end.notifications))),
        )  # fmt: skip
        return True

    async def expire_gameday_leases(self, now: datetime, *, grace: timedelta = timedelta(0)) -> list[Gameday]:
        now = as_utc(now)
        expired = []
        for gameday in sorted(self._gamedays.values(), key=lambda g: (g.created_at, g.id)):
            lease = gameday.lease_until
            if gameday.status is GamedayStatus.RUNNING and lease is not None and lease < now - grace:
                gameday = replace(gameday, status=GamedayStatus.INTERRUPTED, finished_at=now,
                                  reason=lease_reason(gameday.owner, lease))  # fmt: skip
                self._gamedays[gameday.id] = gameday
                expired.append(gameday)
        return expired

    def _held(self, gameday_id: str, owner: str) -> Gameday | None:
        gameday = self._gamedays.get(gameday_id)
        if gameday is None or gameday.status is not GamedayStatus.RUNNING or gameday.owner != owner:
            return None
        return gameday


def _stored(gameday: Gameday) -> Gameday:
    """``gameday`` as a store gives it back: times in UTC, JSON values plain, free text without NUL."""
    return replace(gameday, suite=plain_json(gameday.suite), created_at=as_utc(gameday.created_at),
                   fire_time=opt_utc(gameday.fire_time), lease_until=opt_utc(gameday.lease_until),
                   finished_at=opt_utc(gameday.finished_at), abort_requested=opt_text(gameday.abort_requested),
                   reason=opt_text(gameday.reason), summary=opt_text(gameday.summary),
                   notifications=tuple(plain_json(list(gameday.notifications))))  # fmt: skip
