"""Webhook deliveries in the stores: a run's and a game day's kept apart, in the order made, as a database keeps
them (times in UTC, no NUL in free text), and one owner exactly — on the in-memory twin, SQLite and PostgreSQL
alike."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta, timezone

import pytest
from store_kit import T0, Backend, seconds

from cliffwatch.domain.scenario.notify_spec import Delivery

EAST = timezone(timedelta(hours=2))


def delivery(event: str, *, at: float = 0, **changes: object) -> Delivery:
    made = {"url": "http://127.0.0.1:9000/…", "event": event, "format": "generic", "ok": True, "attempts": 1,
            "status": 204, "error": None, "at": T0 + seconds(at)}  # fmt: skip
    return Delivery(**{**made, **changes})  # type: ignore[arg-type]


async def test_a_runs_and_a_game_days_deliveries_come_back_apart_in_the_order_made(backend: Backend) -> None:
    store = backend.store
    failed = delivery("not_passed", at=1, format="slack", ok=False, attempts=3, status=500, error="HTTP 500")
    refused = delivery("not_passed", at=2, ok=False, attempts=3, status=None, error="ClientConnectorError: refused")
    await store.add_deliveries([delivery("finished"), failed], run_id="r1")
    await store.add_deliveries([refused], run_id="r1")
    await store.add_deliveries([delivery("hypothesis_broken", at=3)], gameday_id="g1")
    await store.add_deliveries([delivery("failed", at=4)], run_id="r2")
    await store.add_deliveries([], run_id="r3")
    assert await store.list_deliveries(run_id="r1") == [delivery("finished"), failed, refused]
    assert await store.list_deliveries(gameday_id="g1") == [delivery("hypothesis_broken", at=3)]
    assert await store.list_deliveries(gameday_id="r1") == []  # a run's id names no game day's deliveries
    assert await store.list_deliveries(run_id="r3") == []
    assert [d.event for d in await backend.another_store().list_deliveries(run_id="r2")] == ["failed"]


async def test_a_delivery_is_kept_as_a_database_keeps_it(backend: Backend) -> None:
    made = delivery("failed", at=0, ok=False, attempts=0, status=None, error="bad\x00key")
    await backend.store.add_deliveries([replace(made, at=made.at.astimezone(EAST))], gameday_id="g1")
    (kept,) = await backend.store.list_deliveries(gameday_id="g1")
    assert kept.at == T0
    assert kept.at.utcoffset() == timedelta(0)
    assert kept.error == "bad\ufffdkey"
    assert (kept.ok, kept.attempts, kept.status) == (False, 0, None)


@pytest.mark.parametrize("owners", [{}, {"run_id": "r1", "gameday_id": "g1"}])
async def test_a_delivery_belongs_to_one_run_or_one_game_day(backend: Backend, owners: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        await backend.store.add_deliveries([delivery("finished")], **owners)
    with pytest.raises(ValueError, match="exactly one"):
        await backend.store.list_deliveries(**owners)
