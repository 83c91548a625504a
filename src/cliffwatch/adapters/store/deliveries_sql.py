"""``DeliveryStore`` in SQL: every webhook delivery of a run, a sweep or a game day, in the order made.

A delivery is appended once and never changed; a run's or a game day's are read back by the index on their
owner and the id (``webhook_deliveries``, migration 0010).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import RowMapping, insert, select

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.tables import webhook_deliveries
from cliffwatch.domain.scenario.notify_spec import Delivery
from cliffwatch.services.store_values import delivery_owner


class SqlDeliveries:
    _db: Database

    async def add_deliveries(
        self, deliveries: Sequence[Delivery], *, run_id: str | None = None, gameday_id: str | None = None
    ) -> None:
        delivery_owner(run_id, gameday_id)
        if not deliveries:
            return
        rows = [{**_row(d), "run_id": run_id, "gameday_id": gameday_id} for d in deliveries]
        async with self._db.write() as conn:
            await conn.execute(insert(webhook_deliveries), rows)

    async def list_deliveries(self, *, run_id: str | None = None, gameday_id: str | None = None) -> list[Delivery]:
        column = webhook_deliveries.c.run_id if delivery_owner(run_id, gameday_id) == "run" else (
            webhook_deliveries.c.gameday_id)  # fmt: skip
        made = select(webhook_deliveries).where(column == (run_id or gameday_id)).order_by(webhook_deliveries.c.id)
        async with self._db.read() as conn:
            return [_delivery(row) for row in (await conn.execute(made)).mappings()]


def _row(delivery: Delivery) -> dict[str, object]:
    return {"event": delivery.event, "url": delivery.url, "format": delivery.format, "ok": delivery.ok,
            "status": delivery.status, "attempts": delivery.attempts, "error": delivery.error,
            "at": delivery.at}  # fmt: skip


def _delivery(row: RowMapping) -> Delivery:
    return Delivery(url=row["url"], event=row["event"], format=row["format"], ok=row["ok"], status=row["status"],
                    attempts=row["attempts"], error=row["error"], at=row["at"])  # fmt: skip
