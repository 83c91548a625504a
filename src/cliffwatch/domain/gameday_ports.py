"""The game days' and webhook deliveries' stores, as the services see them (``domain.ports`` holds the rest): a
game day kept from its start to its verdict under its driver's lease, and every delivery of a run's, a sweep's or a
game day's webhooks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from cliffwatch.domain.scenario.notify_spec import Delivery
from cliffwatch.domain.service.gamedays import ExperimentRecord, Gameday, GamedayEnd, GamedayStatus


class GamedayStore(Protocol):
    async def create_gameday(self, gameday: Gameday) -> tuple[Gameday, bool]:
        """Stores it (True), or returns the one its schedule's fire started already (False)."""

    async def get_gameday(self, gameday_id: str) -> Gameday | None: ...

    async def gameday_with_key(self, key: str) -> Gameday | None:
        """The game day a request with this idempotency key started, if any."""

    async def list_gamedays(self, *, limit: int, schedule_id: str | None = None,
                            status: GamedayStatus | None = None) -> list[Gameday]:  # fmt: skip
        """The latest ``limit`` game days (of one schedule, in one status, when given), newest first."""

    async def save_gameday_progress(
        self, gameday_id: str, *, owner: str, experiments: Sequence[ExperimentRecord], lease_until: datetime
    ) -> Gameday | None:
        """Its experiments so far and a longer lease, while ``owner`` drives it; None when it no longer does."""

    async def request_gameday_abort(self, gameday_id: str, reason: str) -> Gameday | None: ...

    async def finish_gameday(self, gameday_id: str, *, owner: str, end: GamedayEnd) -> bool: ...

    async def expire_gameday_leases(self, now: datetime, *, grace: timedelta = ...) -> list[Gameday]:
        """Running game days whose lease ended before ``now - grace``, now interrupted."""


class DeliveryStore(Protocol):
    """Every webhook delivery, delivered or not, of one run (a sweep is a run) or one game day: exactly one of
    ``run_id`` and ``gameday_id`` is named, else a ``ValueError``."""

    async def add_deliveries(
        self, deliveries: Sequence[Delivery], *, run_id: str | None = None, gameday_id: str | None = None
    ) -> None: ...

    async def list_deliveries(self, *, run_id: str | None = None, gameday_id: str | None = None) -> list[Delivery]:
        """Its deliveries in the order they were made (at most a few a webhook: no page is needed)."""
