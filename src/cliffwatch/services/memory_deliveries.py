"""The in-memory twin of ``DeliveryStore``, a part of ``InMemoryStore``; the contract suite holds the SQL store
to it. A delivery is kept as a database keeps it: its time in UTC, its free text without NUL."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cliffwatch.domain.scenario.notify_spec import Delivery
from cliffwatch.services.store_values import as_utc, delivery_owner, opt_text, without_nul


class InMemoryDeliveries:
    _deliveries: list[tuple[str, str, Delivery]]  # (owner kind, owner id, delivery), in the order made

    async def add_deliveries(
        self, deliveries: Sequence[Delivery], *, run_id: str | None = None, gameday_id: str | None = None
    ) -> None:
        kind = delivery_owner(run_id, gameday_id)
        owner = run_id or gameday_id or ""
        for delivery in deliveries:
            kept = replace(delivery, url=without_nul(delivery.url), error=opt_text(delivery.error),
                           at=as_utc(delivery.at))  # fmt: skip
            self._deliveries.append((kind, owner, kept))

    async def list_deliveries(self, *, run_id: str | None = None, gameday_id: str | None = None) -> list[Delivery]:
        kind = delivery_owner(run_id, gameday_id)
        return [d for k, owner, d in self._deliveries if k == kind and owner == (run_id or gameday_id)]
