"""The APScheduler driver on the real clock: only the lock holder fires, each job passes the time it was due,
the jobs follow the schedule table, and a new leader catches up first. Fires come every second here, from a
calendar that makes every expression fire each second, so no test waits for a cron minute."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger

from cliffwatch.adapters.scheduler.cron import ApschedulerCron
from cliffwatch.adapters.scheduler.driver import FireExecutor, ScheduleDriver
from cliffwatch.domain.ports import CronCalendar
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import content_hash
from cliffwatch.domain.service.runs import CatchUp, Run, RunQuery, ScenarioSource, Schedule, Trigger
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.schedules import FireOutcome, FireStatus, ScheduleService, ScheduleSpec

SCENARIO: dict[str, Any] = {
    "name": "minimal",
    "slo": {"e2e_ms": 2000, "timeout_ms": 5000},
    "target": {"url": "builtin", "request": {"model": "sim-llm"}},
    "phases": [{"name": "steady", "role": "baseline", "duration_s": 10, "arrival": {"process": "constant", "rate": 5}}],
}
SPEC = ScheduleSpec(name="game day", cron="0 9 * * 1-5", timezone="Europe/Berlin", scenario_name="minimal")
INTERVAL_S = 0.1
SECOND = timedelta(seconds=1)


def utc_now() -> datetime:
    return datetime.now(UTC)


class EverySecond:
    """A ``CronCalendar`` in which every expression fires at each whole second."""

    def validate(self, cron: str, timezone: str) -> str | None:
        return None

    def fire_times(self, cron: str, timezone: str, *, after: datetime, until: datetime) -> list[datetime]:
        times = []
        moment = _second_after(after)
        while moment <= until:
            times.append(moment)
            moment += SECOND
        return times

    def next_fire_times(self, cron: str, timezone: str, *, after: datetime, count: int) -> list[datetime]:
        first = _second_after(after)
        return [first + i * SECOND for i in range(count)]


def _second_after(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(microsecond=0) + SECOND


async def make_run(schedule: Schedule, fire_time: datetime) -> Run:
    return Run(
        id=f"{schedule.id}-{fire_time.timestamp():.0f}",
        scenario_name=schedule.scenario_name,
        scenario_hash="0" * 64,
        status=RunStatus.QUEUED,
        trigger=Trigger.SCHEDULE,
        triggered_by=schedule.id,
        created_at=utc_now(),
        target_url="builtin",
        seed=1,
        threshold=50.0,
    )


class RecordingService(ScheduleService):
    """Keeps each fire: its fire time, when it was called, and what came of it."""

    def __init__(self, store: InMemoryStore, calendar: CronCalendar) -> None:
        super().__init__(
            schedules=store, runs=store, scenarios=store, calendar=calendar, make_run=make_run, now=utc_now
        )
        self.fired: list[tuple[datetime, datetime, FireOutcome]] = []

    async def fire(self, schedule_id: str, fire_time: datetime) -> FireOutcome:
        called = utc_now()
        outcome = await super().fire(schedule_id, fire_time)
        self.fired.append((fire_time, called, outcome))
        return outcome


class SwitchableLock:
    """A leader lock a test can take away (``answer``), or make fail like an unreachable database."""

    def __init__(self) -> None:
        self.answer: bool | Exception = True
        self.released = 0

    async def try_acquire(self) -> bool:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    async def release(self) -> None:
        self.released += 1


@pytest.fixture
async def store() -> InMemoryStore:
    store = InMemoryStore()
    await store.save_scenario(
        name="minimal",
        document=SCENARIO,
        content_hash=content_hash(SCENARIO),
        source=ScenarioSource.BUNDLED,
        at=utc_now(),
    )
    return store


async def eventually(check: Callable[[], bool], *, within_s: float = 2.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.02)


async def test_only_the_lock_holder_fires_and_each_fire_carries_the_time_it_was_due(store: InMemoryStore) -> None:
    leader_service, follower_service = RecordingService(store, EverySecond()), RecordingService(store, EverySecond())
    schedule = await leader_service.create(SPEC)
    async with (
        ScheduleDriver(leader_service, store.leader_lock(), interval_s=INTERVAL_S) as leader,
        ScheduleDriver(follower_service, store.leader_lock(), interval_s=INTERVAL_S) as follower,
    ):
        assert (leader.is_leader, follower.is_leader) == (True, False)
        await eventually(lambda: len(leader_service.fired) >= 1)
        # hold the loop up across the next whole second: that fire comes late, yet carries its own time
        await asyncio.sleep(max(0.0, 0.9 - utc_now().microsecond / 1e6))  # to about 0.1 s before the next second
        time.sleep(1 - utc_now().microsecond / 1e6 + 0.3)  # noqa: ASYNC251 (blocking the loop is the point)
        await eventually(lambda: len(leader_service.fired) >= 3)
        assert follower.scheduled() == {}

    assert follower_service.fired == []
    fire_times = [fire_time for fire_time, _, _ in leader_service.fired]
    assert all(t.microsecond == 0 for t in fire_times)
    assert fire_times == [fire_times[0] + i * SECOND for i in range(len(fire_times))]
    lags = [(called - fire_time).total_seconds() for fire_time, called, _ in leader_service.fired]
    assert min(lags) >= 0
    assert max(lags) >= 0.25  # the fire held up by the blocked loop
    statuses = [outcome.status for _, _, outcome in leader_service.fired]
    assert statuses == [FireStatus.QUEUED] + [FireStatus.OVERLAP] * (len(statuses) - 1)  # no worker: still queued
    page = await store.list_runs(RunQuery(schedule_id=schedule.id))
    assert [r.fire_time for r in page.runs] == fire_times[:1]


async def test_when_the_leader_stops_another_instance_takes_over_and_fires(store: InMemoryStore) -> None:
    first_service, second_service = RecordingService(store, EverySecond()), RecordingService(store, EverySecond())
    await first_service.create(replace(SPEC, catch_up=CatchUp.SKIP))
    async with (
        ScheduleDriver(second_service, store.leader_lock(), interval_s=INTERVAL_S) as second,
        ScheduleDriver(first_service, store.leader_lock(), interval_s=INTERVAL_S) as first,
    ):
        assert not first.is_leader  # the second one started first
        await eventually(lambda: len(second_service.fired) >= 1)
        await second.shutdown()  # releases the lock
        await eventually(lambda: first.is_leader, within_s=1.0)
        await eventually(lambda: len(first_service.fired) >= 1)
    handled_first = {t for t, _, _ in second_service.fired}
    handled_next = {t for t, _, _ in first_service.fired}
    assert max(handled_first) < min(handled_next)  # nothing handled twice across the handover


async def test_jobs_follow_the_schedule_table_whichever_instance_changed_it(store: InMemoryStore) -> None:
    cron = ApschedulerCron()
    here, elsewhere = RecordingService(store, cron), RecordingService(store, cron)
    async with ScheduleDriver(here, store.leader_lock(), interval_s=INTERVAL_S) as driver:
        assert driver.scheduled() == {}
        schedule = await here.create(SPEC)  # through this instance: reconciled at once
        await eventually(lambda: schedule.id in driver.scheduled(), within_s=0.5)
        assert driver.scheduled()[schedule.id] == (await here.next_fire_times(schedule.id, 1))[0]

        await elsewhere.update(schedule.id, replace(SPEC, cron="30 18 * * 0", timezone="America/New_York"))
        expected = (await here.next_fire_times(schedule.id, 1))[0]  # Sunday 18:30 in New York
        await eventually(lambda: driver.scheduled().get(schedule.id) == expected, within_s=1.0)

        await elsewhere.pause(schedule.id)
        await eventually(lambda: driver.scheduled() == {}, within_s=1.0)
        await here.resume(schedule.id)
        await eventually(lambda: schedule.id in driver.scheduled(), within_s=0.5)
        await elsewhere.delete(schedule.id)
        await eventually(lambda: driver.scheduled() == {}, within_s=1.0)
    assert here.fired == []


async def test_an_instance_that_loses_the_lock_or_cannot_check_it_stops_firing_until_it_holds_it_again(
    store: InMemoryStore,
) -> None:
    service = RecordingService(store, ApschedulerCron())
    schedule = await service.create(SPEC)
    lock = SwitchableLock()
    async with ScheduleDriver(service, lock, interval_s=INTERVAL_S) as driver:
        assert list(driver.scheduled()) == [schedule.id]
        lock.answer = False
        await eventually(lambda: not driver.is_leader, within_s=1.0)
        assert driver.scheduled() == {}
        lock.answer = True
        await eventually(lambda: driver.is_leader, within_s=1.0)
        assert list(driver.scheduled()) == [schedule.id]
        lock.answer = ConnectionError("database unreachable")
        await eventually(lambda: not driver.is_leader, within_s=1.0)
    assert lock.released == 1


async def test_a_new_leader_catches_up_before_it_fires(store: InMemoryStore) -> None:
    service = RecordingService(store, ApschedulerCron())
    two_days_ago = utc_now() - timedelta(days=2)
    for catch_up in CatchUp:
        await store.save_schedule(
            Schedule(
                id=catch_up.value,
                name=catch_up.value,
                cron="0 9 * * *",
                timezone="UTC",
                scenario_name="minimal",
                catch_up=catch_up,
                created_at=two_days_ago,
            )
        )
    latest_nine = (ApschedulerCron().fire_times("0 9 * * *", "UTC", after=two_days_ago, until=utc_now()))[-1]
    lock = store.leader_lock()
    async with ScheduleDriver(service, lock, interval_s=INTERVAL_S):
        ran = await store.list_runs(RunQuery(schedule_id=CatchUp.RUN_ONCE.value))
        skipped = await store.list_runs(RunQuery(schedule_id=CatchUp.SKIP.value))
        assert [r.fire_time for r in ran.runs] == [latest_nine]
        assert skipped.runs == ()
        for catch_up in CatchUp:
            assert (await service.get(catch_up.value)).last_fire_time == latest_nine
    assert await store.leader_lock().try_acquire()  # released on shutdown


async def test_a_job_fires_with_the_time_it_was_due_and_one_later_than_its_grace_goes_to_catch_up() -> None:
    fired: list[tuple[str, datetime]] = []
    missed: list[tuple[str, datetime]] = []

    async def fire(job_id: str, due: datetime) -> None:
        fired.append((job_id, due))

    async def miss(job_id: str, due: datetime) -> None:
        missed.append((job_id, due))

    scheduler = AsyncIOScheduler(timezone=UTC, executors={"default": FireExecutor(fire, miss)})
    scheduler.start()
    now = utc_now()
    late, very_late = now - timedelta(seconds=5), now - timedelta(minutes=5)
    scheduler.add_job(print, DateTrigger(run_date=late), id="late", misfire_grace_time=60)
    scheduler.add_job(print, DateTrigger(run_date=very_late), id="very late", misfire_grace_time=60)
    await eventually(lambda: len(fired) + len(missed) == 2, within_s=1.0)
    scheduler.shutdown(wait=False)
    await asyncio.sleep(0)
    assert (fired, missed) == ([("late", late)], [("very late", very_late)])
