"""Two service instances on one PostgreSQL: a schedule's fire is never doubled, and only one leads.

Each "instance" has its own engine (its own connections), as two processes would.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from cliffwatch.adapters.scheduler.cron import ApschedulerCron
from cliffwatch.adapters.scheduler.driver import ScheduleDriver
from cliffwatch.adapters.store.engine import create_engine
from cliffwatch.adapters.store.locks import leader_lock
from cliffwatch.adapters.store.migrate import upgrade
from cliffwatch.adapters.store.sql import SqlStore
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import content_hash
from cliffwatch.domain.service.runs import Run, RunQuery, ScenarioSource, Schedule, Trigger
from cliffwatch.services.schedules import FireStatus, ScheduleService, ScheduleSpec

DOCUMENT = {
    "name": "nightly-burst",
    "target": {"url": "builtin", "request": {"model": "sim-llm"}},
    "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
}
FIRE = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)  # 03:00 in Europe/Berlin


def now() -> datetime:
    return datetime(2026, 12, 1, 2, 0, 5, tzinfo=UTC)


async def make_run(schedule: Schedule, fire_time: datetime) -> Run:
    return Run(id=uuid.uuid4().hex[:12], scenario_name=schedule.scenario_name, scenario_hash=content_hash(DOCUMENT),
               status=RunStatus.QUEUED, trigger=Trigger.SCHEDULE, triggered_by=schedule.id, created_at=now(),
               target_url="builtin", seed=0, threshold=70.0)  # fmt: skip


@asynccontextmanager
async def instances(postgres: Any, count: int) -> AsyncIterator[list[tuple[SqlStore, ScheduleService, Any]]]:
    url = await postgres.create_database(f"sched_{uuid.uuid4().hex[:8]}")
    await upgrade(url)
    engines = [create_engine(url) for _ in range(count)]
    try:
        made = []
        for engine in engines:
            store = SqlStore(engine, now=now)
            service = ScheduleService(schedules=store, runs=store, scenarios=store, calendar=ApschedulerCron(),
                                      make_run=make_run, now=now)  # fmt: skip
            made.append((store, service, engine))
        yield made
    finally:
        for engine in engines:
            await engine.dispose()


async def test_two_instances_firing_the_same_time_queue_one_run(postgres: Any) -> None:
    """Both instances handle the 03:00 fire at once (as if both thought they led): one run is queued, the
    other instance sees it as a duplicate."""
    async with instances(postgres, 2) as made:
        (store, first, _), (_, second, _) = made
        await store.save_scenario(name=DOCUMENT["name"], document=DOCUMENT, content_hash=content_hash(DOCUMENT),
                                  source=ScenarioSource.REGISTERED, at=now())  # fmt: skip
        schedule = await first.create(ScheduleSpec(name="nightly", cron="0 3 * * *", timezone="Europe/Berlin",
                                                   scenario_name=DOCUMENT["name"]))  # fmt: skip
        outcomes = await asyncio.gather(first.fire(schedule.id, FIRE), second.fire(schedule.id, FIRE))
        statuses = sorted(o.status for o in outcomes)
        assert statuses.count(FireStatus.QUEUED) == 1, statuses
        page = await store.list_runs(RunQuery(schedule_id=schedule.id))
        assert [(r.schedule_id, r.fire_time) for r in page.runs] == [(schedule.id, FIRE)]


async def test_only_one_instance_leads_and_the_other_takes_over_when_it_stops(postgres: Any) -> None:
    """Two drivers on one database: one holds the advisory lock and fires; when it shuts down, the other
    becomes the leader on its next check."""
    async with instances(postgres, 2) as made:
        drivers = [ScheduleDriver(service, leader_lock(engine), interval_s=0.2) for _, service, engine in made]
        await drivers[0].start()
        await drivers[1].start()
        try:
            assert [d.is_leader for d in drivers] == [True, False]
            await drivers[0].shutdown()
            for _ in range(50):
                if drivers[1].is_leader:
                    break
                await asyncio.sleep(0.1)
            assert drivers[1].is_leader
        finally:
            await drivers[1].shutdown()
            await drivers[0].shutdown()
