"""Telling a run's or a sweep's webhooks (its scenario's ``notify:``) how it ended, from the command line.

Delivered once the result is known and before its file is written, so ``--json`` keeps every delivery
(``notifications``); each is printed as the game day's are. A webhook that fails is a line saying so: never an
exit code of its own, never a reason to lose the result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.adapters.notify.webhooks import notify
from cliffwatch.bootstrap.run import secret_resolver
from cliffwatch.config import Settings
from cliffwatch.domain.scenario.notify_spec import Delivery, WebhookSpec


def deliver(webhooks: Sequence[WebhookSpec], events: Sequence[str], payload: Mapping[str, Any], *,
            defaults: Sequence[str], settings: Settings) -> list[Delivery]:  # fmt: skip
    """Each of ``events`` posted to the webhooks that hear it; every delivery, delivered or not."""
    if not webhooks or not events:
        return []

    async def send() -> list[Delivery]:
        destinations = Destinations(settings.allowed_webhooks)
        resolve = secret_resolver(settings).resolve
        found: list[Delivery] = []
        for event in events:
            found += await notify(webhooks, event, payload, destinations=destinations, resolve=resolve,
                                  defaults=defaults)  # fmt: skip
        return found

    return asyncio.run(send())


def print_deliveries(console: Console, deliveries: Sequence[Delivery]) -> None:
    """A line a delivery: the webhook as shown (scheme and host), the event, delivered or why not."""
    for delivery in deliveries:
        said = f"delivered ({delivery.status})" if delivery.ok else f"NOT delivered: {delivery.error}"
        console.print(Text(f"webhook {delivery.url} ({delivery.event}): {said}"))
