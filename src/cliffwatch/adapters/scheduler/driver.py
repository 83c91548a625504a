"""The trigger engine: APScheduler 3.x's ``AsyncIOScheduler``, run only by the instance holding the leader lock.

The schedule table is the source of truth; APScheduler keeps no state of its own (memory job store) and is
rebuilt from the table whenever this instance becomes the leader. There is one job per enabled schedule, whose
trigger gives the fire times of the service's ``CronCalendar`` (APScheduler's ``CronTrigger`` in production),
so the engine and ``ScheduleService.fire`` agree on every fire time. A job calls ``fire(schedule, scheduled
run time)``: the time it was due, never "now", so every instance derives the same run key for one fire.

Leader election: every ``interval_s`` (and at once after a change made through this instance) the driver
asks the lock; while it holds it, it runs the scheduler and reconciles the jobs with the table (schedules
added, changed, paused or deleted through any instance); when it no longer holds it (or cannot tell), it stops
the scheduler. On becoming leader it first catches up the fire times no one fired. ``LeaderLock.try_acquire``
is asked again while held, so it must answer True to its holder without stacking a second hold
(``PgLeaderLock`` then only checks that its connection, and so its advisory lock, is still alive).

APScheduler logs through the standard ``logging`` module, which ``configure_logging`` routes with ours.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import structlog
from apscheduler.executors.base import BaseExecutor  # type: ignore[import-untyped]
from apscheduler.jobstores.base import JobLookupError  # type: ignore[import-untyped]
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]
from apscheduler.triggers.base import BaseTrigger  # type: ignore[import-untyped]

from cliffwatch.domain.errors import ScheduleInvalid
from cliffwatch.domain.ports import CronCalendar, LeaderLock
from cliffwatch.services.schedules import ScheduleService

log = structlog.get_logger(__name__)

DEFAULT_INTERVAL_S = 15.0
MAX_INSTANCES = 3  # a fire slowed by the database must not make APScheduler drop the next one
_TICK = timedelta(microseconds=1)

Fire = Callable[[str, datetime], Awaitable[None]]


class CalendarTrigger(BaseTrigger):  # type: ignore[misc]
    """An APScheduler trigger firing at the fire times of one cron expression in one zone, as a
    ``CronCalendar`` computes them."""

    __slots__ = ("calendar", "cron", "timezone")

    def __init__(self, calendar: CronCalendar, cron: str, timezone: str) -> None:
        self.calendar = calendar
        self.cron = cron
        self.timezone = timezone

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        """The first fire time after the previous one, or (for a new job) at or after ``now``."""
        after = previous_fire_time if previous_fire_time is not None else now - _TICK
        times = self.calendar.next_fire_times(self.cron, self.timezone, after=after, count=1)
        return times[0] if times else None

    def __str__(self) -> str:
        return f"cron[{self.cron!r} in {self.timezone}]"


class FireExecutor(BaseExecutor):  # type: ignore[misc]
    """Runs a job as ``await fire(job id, run time it was due)``: APScheduler 3's own executors call a job's
    function without the time it was due, and that time is the fire time. A run time later than the job's
    misfire grace goes to ``missed`` instead, for the schedule's catch-up policy to decide."""

    def __init__(self, fire: Fire, missed: Fire) -> None:
        super().__init__()
        self._fire = fire
        self._missed = missed
        self._tasks: set[asyncio.Task[None]] = set()

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(job, run_times))
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._finished(job.id, done))

    async def _run(self, job: Any, run_times: list[datetime]) -> None:
        for run_time in run_times:
            late = datetime.now(UTC) - run_time
            if job.misfire_grace_time is not None and late > timedelta(seconds=job.misfire_grace_time):
                await self._missed(job.id, run_time)
            else:
                await self._fire(job.id, run_time)

    def _finished(self, job_id: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._run_job_success(job_id, [])  # frees the job's instance slot; no APScheduler events are used

    def shutdown(self, wait: bool = True) -> None:
        for task in self._tasks:
            task.cancel()

    async def drain(self) -> None:
        """Cancels the fires in progress and waits for them to end (a cancelled fire is caught up later)."""
        self.shutdown()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class ScheduleDriver:
    """Fires the schedules of ``service`` while this instance holds ``lock``.

    ``start()`` makes a first attempt at the lock (and, when it gets it, catches up and starts firing) before
    it returns; ``shutdown()`` stops firing and releases the lock. Changes made through ``service`` reach the
    jobs at once; changes made through other instances within ``interval_s``.
    """

    def __init__(self, service: ScheduleService, lock: LeaderLock, *, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.service = service
        self.lock = lock
        self.interval_s = interval_s
        self._scheduler: Any = None  # an AsyncIOScheduler while leader
        self._executor: FireExecutor | None = None
        self._jobs: dict[str, tuple[str, str]] = {}  # schedule id → (cron, timezone) its job was built for
        self._retry: set[str] = set()  # schedules whose fire was missed or failed: caught up on the next tick
        self._lock = asyncio.Lock()  # leadership changes and job reconciliation, one at a time
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def is_leader(self) -> bool:
        return self._scheduler is not None

    def scheduled(self) -> dict[str, datetime | None]:
        """Each job's next run time, by schedule id; empty while not the leader."""
        if self._scheduler is None:
            return {}
        return {job.id: job.next_run_time for job in self._scheduler.get_jobs()}

    def request_sync(self) -> None:
        """Asks for a lock check and a reconciliation soon, without waiting for it (the service's listener)."""
        self._wake.set()

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the schedule driver is already started")
        self._unsubscribe = self.service.on_change(self.request_sync)
        await self._tick()
        self._task = asyncio.create_task(self._loop(), name="schedule-driver")

    async def shutdown(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        async with self._lock:
            await self._step_down("shutting down")
        try:
            await self.lock.release()  # even when not known to be held: the lock's adapters allow it
        except Exception:  # the lock ends with its session anyway; shutting down must go on
            log.warning("could not release the leader lock", exc_info=True)

    async def __aenter__(self) -> ScheduleDriver:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    async def sync(self) -> None:
        """Reconciles the jobs with the schedule table now; does nothing while not the leader."""
        async with self._lock:
            await self._sync(after=None)

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()  # before the tick: a change made during it wakes the next one
            await self._tick()

    async def _tick(self) -> None:
        try:
            held = await self.lock.try_acquire()
        except Exception:  # not knowing whether we hold the lock, we must not fire
            log.warning("could not check the leader lock", exc_info=True)
            held = False
        try:
            async with self._lock:
                if held and self._scheduler is None:
                    await self._lead()
                elif not held:
                    await self._step_down("not holding the leader lock")
                else:
                    await self._sync(after=None)
                await self._catch_up_retries()
        except Exception:  # the store is down, say: the next tick tries again
            log.error("schedule driver tick failed", exc_info=True)

    async def _lead(self) -> None:
        now = self.service.now()
        log.info("leading the schedules: catching up, then firing")
        try:
            await self.service.catch_up(now)
        except Exception:  # firing from now on matters more than what was missed
            log.error("catch-up failed", exc_info=True)
        self._executor = FireExecutor(self._fire, self._missed)
        grace = max(1, round(self.service.late_grace.total_seconds()))
        self._scheduler = AsyncIOScheduler(
            timezone=UTC,
            executors={"default": self._executor},
            job_defaults={"coalesce": True, "max_instances": MAX_INSTANCES, "misfire_grace_time": grace},
        )
        self._scheduler.start()
        self._jobs = {}
        await self._sync(after=now)  # the first fires are those after the catch-up's now: none falls between

    async def _step_down(self, why: str) -> None:
        scheduler, executor = self._scheduler, self._executor
        if scheduler is None or executor is None:
            return
        self._scheduler, self._executor, self._jobs = None, None, {}
        self._retry.clear()  # the next leader's catch-up covers them
        scheduler.shutdown(wait=False)
        await executor.drain()
        await asyncio.sleep(0)  # AsyncIOScheduler shuts down in a callback of the loop's next turn
        log.info("stopped firing schedules", reason=why)

    async def _sync(self, *, after: datetime | None) -> None:
        scheduler = self._scheduler
        if scheduler is None:
            return
        wanted = {s.id: s for s in await self.service.list_schedules() if s.enabled}
        for schedule_id in set(self._jobs) - set(wanted):
            with contextlib.suppress(JobLookupError):
                scheduler.remove_job(schedule_id)
            del self._jobs[schedule_id]
            log.info("schedule job removed", schedule_id=schedule_id)
        for schedule in wanted.values():
            built_for = (schedule.cron, schedule.timezone)
            if self._jobs.get(schedule.id) == built_for:
                continue
            trigger = CalendarTrigger(self.service.calendar, schedule.cron, schedule.timezone)
            try:
                # APScheduler runs on the real clock, so a job added later starts from the real now
                first = trigger.get_next_fire_time(after, after or datetime.now(UTC))
            except ScheduleInvalid as exc:  # a zone this host's tz database lacks: the other schedules still fire
                log.error("schedule cannot be fired here", schedule_id=schedule.id, reason=str(exc))
                continue
            scheduler.add_job(
                _due,
                trigger=trigger,
                args=(schedule.id,),
                id=schedule.id,
                name=schedule.name,
                replace_existing=True,
                next_run_time=first,
            )
            self._jobs[schedule.id] = built_for
            log.info("schedule job set", schedule_id=schedule.id, trigger=str(trigger), next_fire=first)

    async def _fire(self, schedule_id: str, fire_time: datetime) -> None:
        try:
            await self.service.fire(schedule_id, fire_time)
        except Exception:  # the scheduler goes on; the next tick catches this schedule up
            log.error("schedule fire failed", schedule_id=schedule_id, fire_time=fire_time.isoformat(), exc_info=True)
            self._retry_later(schedule_id)

    async def _missed(self, schedule_id: str, fire_time: datetime) -> None:
        log.warning("schedule fire missed its grace", schedule_id=schedule_id, fire_time=fire_time.isoformat())
        self._retry_later(schedule_id)

    def _retry_later(self, schedule_id: str) -> None:
        self._retry.add(schedule_id)
        self._wake.set()

    async def _catch_up_retries(self) -> None:
        while self._retry and self._scheduler is not None:
            schedule_id = self._retry.pop()
            try:
                await self.service.catch_up(schedule_id=schedule_id)
            except Exception:
                self._retry.add(schedule_id)
                raise


def _due(schedule_id: str) -> None:
    """The function APScheduler records for a schedule's job; never called, as the executor fires instead."""
    raise AssertionError(f"schedule {schedule_id}: a job runs on the fire executor only")
