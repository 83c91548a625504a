"""Game days in the stores: kept from their start to their end under their driver's lease, one a schedule's fire,
stopped by the first reason asked, and interrupted when their lease lapses — on the in-memory twin, SQLite and
PostgreSQL alike."""

from __future__ import annotations

from dataclasses import replace

import pytest
from store_kit import T0, Backend, seconds

from cliffwatch.domain.service.gamedays import (
    ExperimentRecord,
    ExperimentState,
    Gameday,
    GamedayEnd,
    GamedayStatus,
)
from cliffwatch.domain.service.runs import Trigger

SUITE = {"name": "weekly", "experiments": [{"scenario": "burst-storm", "expect": {"score_at_least": 60}}]}
FIRST = ExperimentRecord(name="burst-storm", scenario="burst-storm", hypothesis="score at least 60")


def gameday(gameday_id: str, *, at: float = 0, **changes: object) -> Gameday:
    made = Gameday(id=gameday_id, name="weekly", suite=SUITE, status=GamedayStatus.RUNNING, trigger=Trigger.API,
                   triggered_by="ci", created_at=T0 + seconds(at), experiments=(FIRST,), owner="a",
                   lease_until=T0 + seconds(at + 30))  # fmt: skip
    return replace(made, **changes)  # type: ignore[arg-type]


async def test_a_game_day_comes_back_as_stored_and_lists_newest_first(backend: Backend) -> None:
    first, created = await backend.store.create_gameday(gameday("g1"))
    assert created
    assert first == gameday("g1")
    await backend.store.create_gameday(gameday("g2", at=1))
    assert await backend.store.get_gameday("g1") == first
    assert await backend.store.get_gameday("nope") is None
    assert [g.id for g in await backend.store.list_gamedays(limit=10)] == ["g2", "g1"]
    assert [g.id for g in await backend.store.list_gamedays(limit=1)] == ["g2"]
    with pytest.raises(ValueError, match="already taken"):
        await backend.store.create_gameday(gameday("g1", at=2))


async def test_one_fire_of_a_schedule_starts_one_game_day(backend: Backend) -> None:
    fire = T0 + seconds(60)
    first, created = await backend.store.create_gameday(gameday("g1", schedule_id="s1", fire_time=fire))
    again, created_again = await backend.store.create_gameday(gameday("g2", schedule_id="s1", fire_time=fire))
    assert (created, created_again) == (True, False)
    assert again.id == first.id == "g1"
    other, created_other = await backend.store.create_gameday(
        gameday("g3", schedule_id="s1", fire_time=fire + seconds(60))
    )
    assert created_other
    assert other.id == "g3"
    await backend.store.finish_gameday("g3", owner="a", end=GamedayEnd(status=GamedayStatus.FINISHED,
                                                                      finished_at=T0 + seconds(90),
                                                                      experiments=(FIRST,)))  # fmt: skip
    await backend.store.create_gameday(gameday("g4", at=3, schedule_id="s2"))
    running = await backend.store.list_gamedays(limit=10, schedule_id="s1", status=GamedayStatus.RUNNING)
    assert [g.id for g in running] == ["g1"]  # what a schedule's next fire asks: is one of mine still running?
    assert [g.id for g in await backend.store.list_gamedays(limit=10, schedule_id="s1")] == ["g3", "g1"]


async def test_progress_and_the_end_are_written_by_the_owner_only_while_it_runs(backend: Backend) -> None:
    await backend.store.create_gameday(gameday("g1"))
    running = replace(FIRST, state=ExperimentState.RUNNING, run_id="r1")
    assert await backend.store.save_gameday_progress("g1", owner="b", experiments=(running,),
                                                     lease_until=T0 + seconds(60)) is None  # fmt: skip
    saved = await backend.store.save_gameday_progress("g1", owner="a", experiments=(running,),
                                                      lease_until=T0 + seconds(60))  # fmt: skip
    assert saved is not None
    assert saved.experiments == (running,)
    assert saved.lease_until == T0 + seconds(60)
    held = replace(running, state=ExperimentState.HELD)
    end = GamedayEnd(status=GamedayStatus.FINISHED, finished_at=T0 + seconds(90), experiments=(held,),
                     verdict="held", summary="weekly: held (1 held)",
                     notifications=({"url": "http://127.0.0.1:9/…", "event": "finished", "ok": True, "attempts": 1,
                                     "status": 204, "error": None},))  # fmt: skip
    assert not await backend.store.finish_gameday("g1", owner="b", end=end)
    assert await backend.store.finish_gameday("g1", owner="a", end=end)
    done = await backend.store.get_gameday("g1")
    assert done is not None
    assert (done.status, done.verdict, done.summary, done.experiments) == (
        GamedayStatus.FINISHED, "held", "weekly: held (1 held)", (held,))  # fmt: skip
    assert done.notifications == end.notifications
    assert not await backend.store.finish_gameday("g1", owner="a", end=end)  # finished: written once
    with pytest.raises(ValueError, match="finished or interrupted"):
        await backend.store.finish_gameday("g1", owner="a", end=replace(end, status=GamedayStatus.RUNNING))


async def test_an_abort_keeps_the_first_reason_and_a_finished_game_day_is_left_as_it_is(backend: Backend) -> None:
    await backend.store.create_gameday(gameday("g1"))
    first = await backend.store.request_gameday_abort("g1", "drill")
    second = await backend.store.request_gameday_abort("g1", "another")
    assert first is not None
    assert second is not None
    assert (first.abort_requested, second.abort_requested) == ("drill", "drill")
    assert await backend.store.request_gameday_abort("nope", "drill") is None
    end = GamedayEnd(
        status=GamedayStatus.FINISHED, finished_at=T0 + seconds(5), experiments=(FIRST,), verdict="stopped"
    )
    await backend.store.finish_gameday("g1", owner="a", end=end)
    await backend.store.create_gameday(gameday("g2", at=1))
    await backend.store.finish_gameday("g2", owner="a", end=end)
    after = await backend.store.request_gameday_abort("g2", "late")
    assert after is not None
    assert after.abort_requested is None


async def test_a_lapsed_lease_interrupts_the_game_day_and_its_owner_can_no_longer_write(backend: Backend) -> None:
    await backend.store.create_gameday(gameday("g1"))  # leased until T0 + 30 s
    await backend.store.create_gameday(gameday("g2", at=1, lease_until=T0 + seconds(100)))
    assert await backend.store.expire_gameday_leases(T0 + seconds(35), grace=seconds(10)) == []
    expired = await backend.store.expire_gameday_leases(T0 + seconds(45), grace=seconds(10))
    assert [g.id for g in expired] == ["g1"]
    assert expired[0].status is GamedayStatus.INTERRUPTED
    assert expired[0].reason is not None
    assert "stopped renewing its lease" in expired[0].reason
    assert await backend.store.save_gameday_progress("g1", owner="a", experiments=(FIRST,),
                                                     lease_until=T0 + seconds(90)) is None  # fmt: skip
    stored = await backend.store.get_gameday("g2")
    assert stored is not None
    assert stored.status is GamedayStatus.RUNNING


async def test_one_idempotency_key_starts_one_game_day(backend: Backend) -> None:
    first, created = await backend.store.create_gameday(gameday("g1", idempotency_key="t:k"))
    again, created_again = await backend.store.create_gameday(gameday("g2", at=1, idempotency_key="t:k"))
    assert (created, created_again, again.id) == (True, False, "g1")
    assert (await backend.store.gameday_with_key("t:k")) == first
    assert await backend.store.gameday_with_key("t:other") is None
    assert [g.id for g in await backend.store.list_gamedays(limit=10)] == ["g1"]
