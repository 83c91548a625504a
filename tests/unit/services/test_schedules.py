"""Schedules on a manual clock: fires land at the right instants, each queues one run at most, a run still going
is never overlapped, missed fire times follow the catch-up policy, and a restart never fires twice."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest.mock import AsyncMock
from zoneinfo import ZoneInfo

import pytest
from structlog.testing import capture_logs

from cliffwatch.adapters.scheduler.cron import ApschedulerCron
from cliffwatch.domain.errors import ScheduleInvalid, ScheduleNotFound, StoreUnavailable, TargetNotAllowed
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import content_hash
from cliffwatch.domain.service.runs import CatchUp, Overrides, Run, RunEnd, RunQuery, ScenarioSource, Schedule, Trigger
from cliffwatch.services.memory import ManualClock
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.schedules import FireStatus, ScheduleService, ScheduleSpec

SCENARIO: dict[str, Any] = {"name": "minimal", "slo": {"e2e_ms": 2000, "timeout_ms": 5000},
                            "target": {"url": "builtin", "request": {"model": "sim-llm"}},
                            "phases": [{"name": "steady", "role": "baseline", "duration_s": 10,
                                        "arrival": {"process": "constant", "rate": 5}}]}  # fmt: skip
MONDAY_8_BERLIN = datetime(2024, 6, 3, 6, 0, tzinfo=UTC)  # Monday 3 June 2024, 08:00 CEST
WEEKDAYS_AT_9 = ScheduleSpec(name="game day", cron="0 9 * * 1-5", timezone="Europe/Berlin", scenario_name="minimal")
DAILY_AT_9 = replace(WEEKDAYS_AT_9, cron="0 9 * * *")


def at_9_berlin(day: int) -> datetime:
    """09:00 CEST on that day of June 2024, as UTC."""
    return datetime(2024, 6, day, 7, 0, tzinfo=UTC)


class Factory:
    """The run factory the runs service provides: here it builds a plain run, or refuses with ``refusal``."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, datetime]] = []
        self.refusal: Exception | None = None

    async def __call__(self, schedule: Schedule, fire_time: datetime) -> Run:
        self.calls.append((schedule.id, fire_time))
        if self.refusal is not None:
            raise self.refusal
        # trigger and keys left unset on purpose: the service stamps them
        return Run(id=uuid.uuid4().hex[:12], scenario_name=schedule.scenario_name, scenario_hash="0" * 64,
                   status=RunStatus.QUEUED, trigger=Trigger.API, triggered_by="", created_at=self.clock(),
                   target_url="builtin", seed=1, threshold=50.0)  # fmt: skip


class RoundTripStore(InMemoryStore):
    """Yields to the loop before each call, as a database round trip does, so two instances interleave."""

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        await asyncio.sleep(0)
        return await super().get_schedule(schedule_id)

    async def active_runs(self) -> list[Run]:
        await asyncio.sleep(0)
        return await super().active_runs()

    async def create_run(self, run: Run) -> tuple[Run, bool]:
        await asyncio.sleep(0)
        return await super().create_run(run)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(MONDAY_8_BERLIN)


@pytest.fixture
def factory(clock: ManualClock) -> Factory:
    return Factory(clock)


async def with_scenario(store: InMemoryStore, clock: ManualClock) -> InMemoryStore:
    await store.save_scenario(name="minimal", document=SCENARIO, content_hash=content_hash(SCENARIO),
                              source=ScenarioSource.BUNDLED, at=clock())  # fmt: skip
    return store


@pytest.fixture
async def store(clock: ManualClock) -> InMemoryStore:
    return await with_scenario(InMemoryStore(now=clock), clock)


def service_on(store: InMemoryStore, clock: ManualClock, factory: Factory) -> ScheduleService:
    return ScheduleService(
        schedules=store, runs=store, scenarios=store, calendar=ApschedulerCron(), make_run=factory, now=clock
    )


@pytest.fixture
def service(store: InMemoryStore, clock: ManualClock, factory: Factory) -> ScheduleService:
    return service_on(store, clock, factory)


async def runs_of(store: InMemoryStore, schedule_id: str) -> list[Run]:
    page = await store.list_runs(RunQuery(schedule_id=schedule_id, limit=100))
    return sorted(page.runs, key=lambda r: r.fire_time or r.created_at)


async def finish_all(store: InMemoryStore, clock: ManualClock) -> None:
    while (run := await store.claim_run(owner="w", now=clock(), lease_until=clock() + timedelta(hours=1))) is not None:
        await store.finish_run(run.id, owner="w", end=RunEnd(status=RunStatus.SUCCEEDED, finished_at=clock()))


async def test_a_weekday_schedule_fires_at_nine_local_time_each_fire_queuing_one_run_keyed_by_its_fire_time(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock
) -> None:
    schedule = await service.create(WEEKDAYS_AT_9, created_by="ops")
    expected = [at_9_berlin(d) for d in (3, 4, 5, 6, 7, 10)]  # Mon–Fri, then Monday again
    assert await service.next_fire_times(schedule.id, 6) == expected
    for fire_time in expected:
        clock.set(fire_time)
        outcome = await service.fire(schedule.id, fire_time)
        assert outcome.status is FireStatus.QUEUED
        await finish_all(store, clock)
    runs = await runs_of(store, schedule.id)
    assert [r.fire_time for r in runs] == expected
    assert {(r.trigger, r.triggered_by) for r in runs} == {(Trigger.SCHEDULE, schedule.id)}
    assert (await service.get(schedule.id)).last_fire_time == expected[-1]


async def test_after_a_downtime_skip_drops_the_missed_fires_and_run_once_runs_the_latest_of_them_once(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock, factory: Factory
) -> None:
    skip = await service.create(DAILY_AT_9)
    once = await service.create(replace(DAILY_AT_9, name="catch up", catch_up=CatchUp.RUN_ONCE))
    clock.set(at_9_berlin(3))
    for schedule in (skip, once):
        assert (await service.fire(schedule.id, at_9_berlin(3))).status is FireStatus.QUEUED
    await finish_all(store, clock)
    clock.set(datetime(2024, 6, 6, 10, tzinfo=UTC))  # down from Monday 09:00 to Thursday 12:00 Berlin

    outcomes = {o.schedule_id: o for o in await service.catch_up()}

    assert (outcomes[skip.id].status, outcomes[skip.id].fire_time) == (FireStatus.MISSED, at_9_berlin(6))
    assert (outcomes[once.id].status, outcomes[once.id].fire_time) == (FireStatus.QUEUED, at_9_berlin(6))
    assert [r.fire_time for r in await runs_of(store, skip.id)] == [at_9_berlin(3)]
    assert [r.fire_time for r in await runs_of(store, once.id)] == [at_9_berlin(3), at_9_berlin(6)]
    for schedule in (skip, once):
        assert (await service.get(schedule.id)).last_fire_time == at_9_berlin(6)

    restarted = service_on(store, clock, factory)  # another start-up on the same table fires nothing again
    calls = len(factory.calls)
    assert await restarted.catch_up() == []
    assert len(factory.calls) == calls
    clock.set(at_9_berlin(7))
    await finish_all(store, clock)
    assert (await restarted.fire(skip.id, at_9_berlin(7))).status is FireStatus.QUEUED


@pytest.mark.parametrize(
    ("down_for", "status"), [(timedelta(seconds=30), FireStatus.QUEUED), (timedelta(minutes=2), FireStatus.MISSED)]
)
async def test_a_fire_time_missed_by_less_than_the_grace_is_late_not_missed_and_fires_even_under_skip(
    service: ScheduleService, clock: ManualClock, down_for: timedelta, status: FireStatus
) -> None:
    await service.create(DAILY_AT_9)
    clock.set(at_9_berlin(3) + down_for)  # a restart around 09:00
    [outcome] = await service.catch_up()
    assert (outcome.status, outcome.fire_time) == (status, at_9_berlin(3))


async def test_fire_times_before_a_schedule_existed_are_not_missed(
    service: ScheduleService, clock: ManualClock
) -> None:
    clock.set(at_9_berlin(3) + timedelta(minutes=30))
    await service.create(replace(DAILY_AT_9, catch_up=CatchUp.RUN_ONCE))
    clock.advance(timedelta(hours=2))
    assert await service.catch_up() == []


async def test_a_fire_while_a_run_of_the_schedule_is_queued_or_running_is_skipped_not_overlapped(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock
) -> None:
    schedule = await service.create(WEEKDAYS_AT_9)
    clock.set(at_9_berlin(3))
    first = await service.fire(schedule.id, at_9_berlin(3))
    assert first.status is FireStatus.QUEUED
    assert first.run is not None

    clock.set(at_9_berlin(4))
    queued = await service.fire(schedule.id, at_9_berlin(4))
    await store.claim_run(owner="w", now=clock(), lease_until=clock() + timedelta(days=2))
    clock.set(at_9_berlin(5))
    running = await service.fire(schedule.id, at_9_berlin(5))

    still = f"run {first.run.id} of this schedule is still"
    assert (queued.status, queued.reason) == (FireStatus.OVERLAP, f"{still} queued")
    assert (running.status, running.reason) == (FireStatus.OVERLAP, f"{still} running")
    assert len(await runs_of(store, schedule.id)) == 1
    assert (await service.get(schedule.id)).last_fire_time == at_9_berlin(5)  # handled: not caught up later
    await store.finish_run(first.run.id, owner="w", end=RunEnd(status=RunStatus.SUCCEEDED, finished_at=clock()))
    clock.set(at_9_berlin(6))
    assert (await service.fire(schedule.id, at_9_berlin(6))).status is FireStatus.QUEUED


async def test_the_same_fire_twice_queues_one_run(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock
) -> None:
    schedule = await service.create(WEEKDAYS_AT_9)
    clock.set(at_9_berlin(3))
    first = await service.fire(schedule.id, at_9_berlin(3))
    again = await service.fire(
        schedule.id, at_9_berlin(3).astimezone(ZoneInfo("Europe/Berlin"))
    )  # same instant, other zone
    assert (first.status, again.status) == (FireStatus.QUEUED, FireStatus.DUPLICATE)
    assert again.reason == "this fire time was handled already"
    assert len(await runs_of(store, schedule.id)) == 1


async def test_two_instances_firing_the_same_time_at_once_queue_one_run_by_its_key(clock: ManualClock) -> None:
    store = await with_scenario(RoundTripStore(now=clock), clock)
    factories = [Factory(clock), Factory(clock)]
    one, other = (service_on(store, clock, f) for f in factories)
    schedule = await one.create(WEEKDAYS_AT_9)
    clock.set(at_9_berlin(3))

    outcomes = await asyncio.gather(one.fire(schedule.id, at_9_berlin(3)), other.fire(schedule.id, at_9_berlin(3)))

    # both got past every check before the insert; only the (schedule, fire time) key stopped the double
    assert [len(f.calls) for f in factories] == [1, 1]
    assert sorted(o.status for o in outcomes) == [FireStatus.DUPLICATE, FireStatus.QUEUED]
    [run] = await runs_of(store, schedule.id)
    assert {o.run.id for o in outcomes if o.run is not None} == {run.id}


async def test_a_fire_retried_after_a_crash_between_queueing_and_marking_is_not_doubled(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = await service.create(replace(WEEKDAYS_AT_9, catch_up=CatchUp.RUN_ONCE))
    clock.set(at_9_berlin(3))

    with monkeypatch.context() as patch:
        patch.setattr(store, "mark_fired", AsyncMock(side_effect=StoreUnavailable("postgresql://db/cw", "lost")))
        with pytest.raises(StoreUnavailable):
            await service.fire(schedule.id, at_9_berlin(3))
    await finish_all(store, clock)  # its run even ended, so only the store's key knows of it
    clock.advance(timedelta(seconds=20))

    [outcome] = await service.catch_up()

    assert outcome.status is FireStatus.DUPLICATE
    assert len(await runs_of(store, schedule.id)) == 1
    assert (await service.get(schedule.id)).last_fire_time == at_9_berlin(3)


async def test_a_refused_run_is_an_outcome_with_its_reason_logged_and_is_not_retried(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock, factory: Factory
) -> None:
    schedule = await service.create(replace(WEEKDAYS_AT_9, catch_up=CatchUp.RUN_ONCE))
    factory.refusal = TargetNotAllowed("http://10.0.0.9:8000", "not in the allowlist")
    clock.set(at_9_berlin(3))
    with capture_logs() as logs:
        outcome = await service.fire(schedule.id, at_9_berlin(3))
    assert outcome.status is FireStatus.REFUSED
    assert outcome.reason == "target http://10.0.0.9:8000 is not allowed: not in the allowlist"
    assert [(e["log_level"], e["reason"]) for e in logs if e["event"] == "schedule fire refused"] == [
        ("warning", outcome.reason)
    ]
    assert await runs_of(store, schedule.id) == []
    factory.refusal = None
    clock.advance(timedelta(seconds=10))
    assert await service.catch_up() == []  # handled, so a restart does not try again


async def test_a_store_failure_while_building_the_run_is_no_refusal_and_the_fire_is_caught_up_later(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock, factory: Factory
) -> None:
    schedule = await service.create(replace(WEEKDAYS_AT_9, catch_up=CatchUp.RUN_ONCE))
    factory.refusal = StoreUnavailable("postgresql://db/cliffwatch", "timeout")
    clock.set(at_9_berlin(3))
    with pytest.raises(StoreUnavailable):
        await service.fire(schedule.id, at_9_berlin(3))
    factory.refusal = None
    clock.advance(timedelta(minutes=5))
    [outcome] = await service.catch_up()
    assert (outcome.status, outcome.fire_time) == (FireStatus.QUEUED, at_9_berlin(3))


async def test_a_paused_schedule_does_not_fire_and_on_resume_catches_nothing_up(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock, factory: Factory
) -> None:
    schedule = await service.create(replace(WEEKDAYS_AT_9, catch_up=CatchUp.RUN_ONCE))
    paused = await service.pause(schedule.id)
    assert not paused.enabled
    assert await service.pause(schedule.id) == paused
    assert await service.next_fire_times(schedule.id) == []
    clock.set(at_9_berlin(3))
    outcome = await service.fire(schedule.id, at_9_berlin(3))
    assert (outcome.status, outcome.reason) == (FireStatus.IGNORED, "the schedule is paused")

    clock.set(at_9_berlin(5) + timedelta(hours=1))  # Wednesday 10:00
    resumed = await service.resume(schedule.id)
    assert resumed.enabled
    assert await service.catch_up() == []
    assert factory.calls == []
    assert (await service.next_fire_times(schedule.id, 1)) == [at_9_berlin(6)]


async def test_a_changed_cron_expression_moves_the_fires_and_catches_up_nothing_before_the_change(
    service: ScheduleService, store: InMemoryStore, clock: ManualClock
) -> None:
    schedule = await service.create(replace(DAILY_AT_9, catch_up=CatchUp.RUN_ONCE))
    clock.set(at_9_berlin(3) + timedelta(hours=3))  # Monday 12:00; the 09:00 fire was missed
    await service.update(schedule.id, replace(DAILY_AT_9, cron="0 10 * * *", catch_up=CatchUp.RUN_ONCE))
    assert await service.catch_up() == []  # 10:00 today was before the change, 09:00 is no fire time any more
    stale = await service.fire(schedule.id, at_9_berlin(4))  # a job built for the old expression
    assert stale.status is FireStatus.IGNORED
    clock.set(at_9_berlin(4) + timedelta(hours=1))
    assert (await service.fire(schedule.id, clock())).status is FireStatus.QUEUED


@pytest.mark.parametrize(
    ("changes", "paths"),
    [
        ({"cron": "0 9 * * * *"}, ["cron"]),
        ({"cron": "0 25 * * *"}, ["cron"]),
        ({"timezone": "Europe/Atlantis"}, ["timezone"]),
        ({"cron": "nonsense", "timezone": "Nowhere"}, ["timezone", "cron"]),
        ({"scenario_name": "no-such-scenario"}, ["scenario_name"]),
        ({"name": "  "}, ["name"]),
        ({"overrides": Overrides(seed=-1, threshold=150)}, ["overrides.seed", "overrides.threshold"]),
        ({"overrides": Overrides(target_url="ftp://example.com")}, ["overrides.target_url"]),
    ],
)
async def test_an_invalid_schedule_is_refused_naming_every_field_at_fault(
    service: ScheduleService, store: InMemoryStore, changes: dict[str, Any], paths: list[str]
) -> None:
    with pytest.raises(ScheduleInvalid) as on_create:
        await service.create(replace(WEEKDAYS_AT_9, **changes))
    assert [p.path for p in on_create.value.problems] == paths
    schedule = await service.create(WEEKDAYS_AT_9)
    with pytest.raises(ScheduleInvalid) as on_update:
        await service.update(schedule.id, replace(WEEKDAYS_AT_9, **changes))
    assert [p.path for p in on_update.value.problems] == paths
    assert await service.get(schedule.id) == schedule


async def test_an_unknown_schedule_is_not_found_and_a_deleted_one_no_longer_fires(
    service: ScheduleService, clock: ManualClock
) -> None:
    for call in (service.get, service.delete, service.pause, service.resume, service.next_fire_times):
        with pytest.raises(ScheduleNotFound, match="no schedule 'nope'"):
            await call("nope")
    schedule = await service.create(WEEKDAYS_AT_9)
    await service.delete(schedule.id)
    assert await service.list_schedules() == []
    clock.set(at_9_berlin(3))
    outcome = await service.fire(schedule.id, at_9_berlin(3))
    assert (outcome.status, outcome.reason) == (FireStatus.IGNORED, "the schedule was deleted")


async def test_a_count_of_next_fire_times_out_of_1_to_100_or_a_naive_fire_time_is_refused(
    service: ScheduleService,
) -> None:
    schedule = await service.create(WEEKDAYS_AT_9)
    for count in (0, 101):
        with pytest.raises(ScheduleInvalid) as caught:
            await service.next_fire_times(schedule.id, count)
        assert [p.path for p in caught.value.problems] == ["count"]
    assert len(await service.next_fire_times(schedule.id, 100)) == 100
    with pytest.raises(ValueError, match="aware"):
        await service.fire(schedule.id, datetime(2024, 6, 3, 9))


async def test_every_change_is_announced_to_listeners_until_they_unsubscribe(service: ScheduleService) -> None:
    heard: list[int] = []
    unsubscribe = service.on_change(lambda: heard.append(1))
    schedule = await service.create(WEEKDAYS_AT_9)
    await service.update(schedule.id, replace(WEEKDAYS_AT_9, name="renamed"))
    await service.pause(schedule.id)
    await service.resume(schedule.id)
    await service.delete(schedule.id)
    assert len(heard) == 5
    unsubscribe()
    await service.create(WEEKDAYS_AT_9)
    assert len(heard) == 5


async def test_catch_up_for_one_schedule_leaves_the_others_to_their_own_catch_up(
    service: ScheduleService, clock: ManualClock
) -> None:
    one = await service.create(replace(DAILY_AT_9, catch_up=CatchUp.RUN_ONCE))
    other = await service.create(replace(DAILY_AT_9, catch_up=CatchUp.RUN_ONCE))
    clock.set(at_9_berlin(4) + timedelta(hours=1))
    [outcome] = await service.catch_up(schedule_id=one.id)
    assert (outcome.schedule_id, outcome.status) == (one.id, FireStatus.QUEUED)
    assert (await service.get(other.id)).last_fire_time is None
    assert await service.catch_up(schedule_id="gone") == []
