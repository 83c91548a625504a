"""Game days: schedules (validated, stored, paused and resumed), what one fire of a schedule does, and the
catch-up of fire times no instance fired.

A fire queues one run keyed by (schedule, fire time): ``RunStore.create_run`` refuses a second run with that
key, so two instances firing at once, or a fire retried after a crash, never double a run. Nothing here checks
and then inserts to prevent doubles; the checks before the insert (paused, already handled, overlap) only save
work, and stay correct when they race. The trigger engine (``adapters/scheduler/driver.py``) only decides *when*;
every decision is made here, against the ports, with the time passed in, so tests drive it with a manual clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import structlog

from cliffwatch.domain.errors import (
    CliffwatchError,
    GamedayOverlap,
    Problem,
    ScheduleInvalid,
    ScheduleNotFound,
    ServiceStopping,
    StoreUnavailable,
    SuiteInvalid,
)
from cliffwatch.domain.ports import CronCalendar, RunStore, ScenarioStore, ScheduleStore
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import CatchUp, Run, Schedule, Trigger
from cliffwatch.services.ports import GamedayFactory, RunFactory, SuiteCheck
from cliffwatch.services.schedule_specs import MAX_NAME_LENGTH, ScheduleSpec, spec_problems

__all__ = ["MAX_NAME_LENGTH", "FireOutcome", "FireStatus", "ScheduleService", "ScheduleSpec"]

log = structlog.get_logger(__name__)

MAX_NEXT_FIRE_TIMES = 100
DEFAULT_LATE_GRACE = timedelta(minutes=1)
_TICK = timedelta(microseconds=1)


class FireStatus(StrEnum):
    QUEUED = "queued"  # a run was queued for this fire
    DUPLICATE = "duplicate"  # handled before: its run exists, or it was skipped or refused already
    OVERLAP = "overlap"  # skipped: a run of this schedule is still queued or running
    REFUSED = "refused"  # the run factory refused the run; ``reason`` says why
    MISSED = "missed"  # no instance fired it in time, and the schedule's catch-up policy is skip
    IGNORED = "ignored"  # the schedule is paused or gone, or this is not (any more) one of its fire times


@dataclass(frozen=True, kw_only=True)
class FireOutcome:
    schedule_id: str
    fire_time: datetime
    status: FireStatus
    run: Run | None = None  # the run queued; for a duplicate, the run queued before when the store said so
    reason: str | None = None
    gameday_id: str | None = None  # the game day a suite's fire started (or had started, for a duplicate)


def _new_id() -> str:
    return uuid.uuid4().hex[:12]


class ScheduleService:
    """Schedules and their fires. ``late_grace``: a fire time missed by at most this long is late, not
    missed, and fires whatever the catch-up policy (a restart at the minute of a fire does not lose it); the
    trigger engine uses it as its misfire grace too."""

    def __init__(
        self,
        *,
        schedules: ScheduleStore,
        runs: RunStore,
        scenarios: ScenarioStore,
        calendar: CronCalendar,
        make_run: RunFactory,
        now: Callable[[], datetime],
        late_grace: timedelta = DEFAULT_LATE_GRACE,
        new_id: Callable[[], str] = _new_id,
        start_gameday: GamedayFactory | None = None,
        check_suite: SuiteCheck | None = None,
    ) -> None:
        self.schedules = schedules
        self.runs = runs
        self.scenarios = scenarios
        self.calendar = calendar
        self.make_run = make_run
        self.now = now
        self.late_grace = late_grace
        self.new_id = new_id
        self.start_gameday = start_gameday
        self.check_suite = check_suite  # judges a schedule's suite when it is stored (``GamedaysService.check``)
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Calls ``listener`` after each change made through this service (the trigger engine re-syncs its
        jobs); returns the function that unsubscribes it. It must not block: it runs inside the change."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # CRUD

    async def create(self, spec: ScheduleSpec, *, created_by: str = "") -> Schedule:
        """Stores a new schedule; raises ``ScheduleInvalid`` listing every problem, by field."""
        await self._check(spec)
        schedule = Schedule(
            id=self.new_id(),
            name=spec.name.strip(),
            cron=spec.cron,
            timezone=spec.timezone,
            scenario_name=spec.scenario_name,
            overrides=spec.overrides,
            enabled=spec.enabled,
            catch_up=spec.catch_up,
            created_at=self.now(),
            created_by=created_by,
            kind=spec.kind,
            sweep=spec.sweep,
            suite=spec.suite,
        )
        return await self._save(schedule, "created")

    async def update(self, schedule_id: str, spec: ScheduleSpec) -> Schedule:
        """Replaces what a client sets; raises ``ScheduleNotFound`` or ``ScheduleInvalid``. With a new cron
        expression or time zone, or when resumed, fire times up to now are not missed: none is caught up."""
        await self._check(spec)
        current = await self.get(schedule_id)
        last = current.last_fire_time
        if (spec.cron, spec.timezone) != (current.cron, current.timezone) or (spec.enabled and not current.enabled):
            last = self._handled_until_now(spec.cron, spec.timezone, current)
        # A fire marked by the leader between our read and this write is undone here; it is then caught up
        # as missed one day, which the run key (RUN_ONCE) or the skip policy makes harmless.
        schedule = replace(
            current,
            name=spec.name.strip(),
            cron=spec.cron,
            timezone=spec.timezone,
            scenario_name=spec.scenario_name,
            overrides=spec.overrides,
            enabled=spec.enabled,
            catch_up=spec.catch_up,
            last_fire_time=last,
            kind=spec.kind,
            sweep=spec.sweep,
            suite=spec.suite,
        )
        return await self._save(schedule, "updated")

    async def get(self, schedule_id: str) -> Schedule:
        schedule = await self.schedules.get_schedule(schedule_id)
        if schedule is None:
            raise ScheduleNotFound(schedule_id)
        return schedule

    async def list_schedules(self) -> list[Schedule]:
        return await self.schedules.list_schedules()

    async def delete(self, schedule_id: str) -> None:
        """Deletes the schedule (its runs stay); raises ``ScheduleNotFound``."""
        if not await self.schedules.delete_schedule(schedule_id):
            raise ScheduleNotFound(schedule_id)
        log.info("schedule deleted", schedule_id=schedule_id)
        self._changed()

    async def pause(self, schedule_id: str) -> Schedule:
        """Stops firing; a run already queued or running goes on. Raises ``ScheduleNotFound``."""
        current = await self.get(schedule_id)
        return current if not current.enabled else await self._save(replace(current, enabled=False), "paused")

    async def resume(self, schedule_id: str) -> Schedule:
        """Fires again from now on: the fire times passed while paused are not caught up."""
        current = await self.get(schedule_id)
        if current.enabled:
            return current
        last = self._handled_until_now(current.cron, current.timezone, current)
        return await self._save(replace(current, enabled=True, last_fire_time=last), "resumed")

    async def next_fire_times(self, schedule_id: str, count: int = 5) -> list[datetime]:
        """The next ``count`` (1 to 100) fire times from now, in UTC; empty while paused."""
        if not 1 <= count <= MAX_NEXT_FIRE_TIMES:
            raise ScheduleInvalid([Problem(path="count", message=f"must be 1 to {MAX_NEXT_FIRE_TIMES}, got {count}")])
        schedule = await self.get(schedule_id)
        if not schedule.enabled:
            return []
        after = max(self.now(), schedule.last_fire_time or schedule.created_at)
        return self.calendar.next_fire_times(schedule.cron, schedule.timezone, after=after, count=count)

    # Fires

    async def fire(self, schedule_id: str, fire_time: datetime) -> FireOutcome:
        """Handles one fire time of a schedule: queues its run, or says why not (see ``FireStatus``). Every
        instance passes the same ``fire_time`` for one fire (the trigger's, never "now"): it is the run's key.

        Raises only what the stores raise (``StoreUnavailable``); a refusal is an outcome, not an error.
        """
        if fire_time.utcoffset() is None:
            raise ValueError(f"a fire time must be an aware datetime, got {fire_time!r}")
        # Every log line of this fire, down to the run it queues, carries the schedule's id.
        with structlog.contextvars.bound_contextvars(schedule_id=schedule_id):
            return await self._fire(schedule_id, fire_time.astimezone(UTC))

    async def _fire(self, schedule_id: str, at: datetime) -> FireOutcome:
        schedule = await self.schedules.get_schedule(schedule_id)
        if schedule is None or not schedule.enabled:
            why = "the schedule was deleted" if schedule is None else "the schedule is paused"
            return _logged(FireOutcome(schedule_id=schedule_id, fire_time=at, status=FireStatus.IGNORED, reason=why))
        if schedule.last_fire_time is not None and at <= schedule.last_fire_time:
            return self._outcome(schedule, at, FireStatus.DUPLICATE, reason="this fire time was handled already")
        if not self._is_fire_time(schedule, at):
            why = f"not a fire time of {schedule.cron!r} in {schedule.timezone} (changed since it was scheduled?)"
            return self._outcome(schedule, at, FireStatus.IGNORED, reason=why)
        if schedule.suite is not None:
            return await self._fire_suite(schedule, at)
        mine = [r for r in await self.runs.active_runs() if r.schedule_id == schedule.id]
        same = next((r for r in mine if r.fire_time == at), None)
        if same is not None:
            return self._outcome(schedule, at, FireStatus.DUPLICATE, run=same, reason="its run is queued already")
        if mine:
            await self._mark(schedule, at)
            why = f"run {mine[0].id} of this schedule is still {mine[0].status.value}"
            return self._outcome(schedule, at, FireStatus.OVERLAP, reason=why)
        try:
            run = await self.make_run(schedule, at)
        except StoreUnavailable:
            raise  # not a decision about this run: the fire is retried (caught up) once the store is back
        except CliffwatchError as exc:
            await self._mark(schedule, at)
            return self._outcome(schedule, at, FireStatus.REFUSED, reason=str(exc))
        run = replace(
            run,
            schedule_id=schedule.id,
            fire_time=at,
            trigger=Trigger.SCHEDULE,
            triggered_by=schedule.id,
            status=RunStatus.QUEUED,
        )
        stored, created = await self.runs.create_run(run)
        await self._mark(schedule, at)
        if created:
            return self._outcome(schedule, at, FireStatus.QUEUED, run=stored)
        return self._outcome(schedule, at, FireStatus.DUPLICATE, run=stored, reason="its run was queued already")

    async def _fire_suite(self, schedule: Schedule, at: datetime) -> FireOutcome:
        """Starts the schedule's game day, keyed by (schedule, fire time) as a run is; its experiments are then
        queued one by one as the schedule's runs (``GamedaysService``)."""
        if self.start_gameday is None:
            return self._outcome(schedule, at, FireStatus.REFUSED, reason="this instance runs no game days")
        try:
            gameday_id, created = await self.start_gameday(schedule, at)
        except (StoreUnavailable, ServiceStopping):
            raise  # not a decision about this fire: it is retried (caught up) once the store or the service is back
        except GamedayOverlap as exc:
            await self._mark(schedule, at)
            return self._outcome(schedule, at, FireStatus.OVERLAP, reason=str(exc))
        except CliffwatchError as exc:  # the suite refused as it is now (a scenario gone, the emergency stop)
            await self._mark(schedule, at)
            return self._outcome(schedule, at, FireStatus.REFUSED, reason=str(exc))
        await self._mark(schedule, at)
        status = FireStatus.QUEUED if created else FireStatus.DUPLICATE
        outcome = self._outcome(schedule, at, status, reason=None if created else "its game day was started already")
        return replace(outcome, gameday_id=gameday_id)

    async def catch_up(self, now: datetime | None = None, *, schedule_id: str | None = None) -> list[FireOutcome]:
        """Applies the catch-up policy of each enabled schedule (or of ``schedule_id`` only) to the fire times
        no one handled between its last handled one (or its creation) and ``now``: with RUN_ONCE the latest
        of them fires; with SKIP they are marked handled, unless the latest is within ``late_grace``, which
        then fires. Called when an instance becomes the leader; one outcome per schedule that missed any."""
        now = (now or self.now()).astimezone(UTC)
        if schedule_id is None:
            candidates = await self.schedules.list_schedules()
        else:
            one = await self.schedules.get_schedule(schedule_id)
            candidates = [] if one is None else [one]
        outcomes = []
        for schedule in candidates:
            if not schedule.enabled:
                continue
            since = schedule.last_fire_time or schedule.created_at
            try:
                latest = self._latest_fire(schedule.cron, schedule.timezone, after=since, until=now)
            except ScheduleInvalid as exc:  # a zone this host's tz database lacks, say: the others still fire
                log.error("schedule cannot be caught up", schedule_id=schedule.id, reason=str(exc))
                continue
            if latest is None:
                continue
            if schedule.catch_up is CatchUp.RUN_ONCE or now - latest <= self.late_grace:
                outcomes.append(await self.fire(schedule.id, latest))
            else:
                await self._mark(schedule, latest)
                why = f"missed since {since.isoformat()}; the catch-up policy is skip"
                outcomes.append(self._outcome(schedule, latest, FireStatus.MISSED, reason=why))
        return outcomes

    # Helpers

    async def _check(self, spec: ScheduleSpec) -> None:
        problems = await spec_problems(spec, self.calendar, self.scenarios)
        if not problems and spec.suite is not None and self.check_suite is not None:
            try:  # each experiment as the run it will be, and the webhooks: refused now, not silently at every fire
                await self.check_suite(spec.suite)
            except SuiteInvalid as exc:
                problems = [Problem(path=f"suite.{p.path}" if p.path else "suite", message=p.message)
                            for p in exc.problems]  # fmt: skip
        if problems:
            raise ScheduleInvalid(problems)

    async def _save(self, schedule: Schedule, what: str) -> Schedule:
        saved = await self.schedules.save_schedule(schedule)
        log.info(
            f"schedule {what}", schedule_id=saved.id, cron=saved.cron, timezone=saved.timezone, enabled=saved.enabled
        )
        self._changed()
        return saved

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    async def _mark(self, schedule: Schedule, at: datetime) -> None:
        if schedule.last_fire_time is None or at > schedule.last_fire_time:
            await self.schedules.mark_fired(schedule.id, at)

    def _is_fire_time(self, schedule: Schedule, at: datetime) -> bool:
        try:
            return self.calendar.fire_times(schedule.cron, schedule.timezone, after=at - _TICK, until=at) == [at]
        except ScheduleInvalid:
            return False

    def _handled_until_now(self, cron: str, timezone: str, schedule: Schedule) -> datetime | None:
        """The schedule's new ``last_fire_time`` when it fires anew from now (resumed, or its expression
        changed): the latest fire time up to now, which is thus never caught up."""
        since = schedule.last_fire_time or schedule.created_at
        return self._latest_fire(cron, timezone, after=since, until=self.now()) or schedule.last_fire_time

    def _latest_fire(self, cron: str, timezone: str, *, after: datetime, until: datetime) -> datetime | None:
        """The latest fire time in ``(after, until]``. Looks back from ``until`` over a window doubled until
        it finds one, so a long downtime with a minute-by-minute schedule does not list every minute."""
        window = timedelta(hours=1)
        while True:
            start = max(after, until - window)
            times = self.calendar.fire_times(cron, timezone, after=start, until=until)
            if times or start <= after:
                return times[-1] if times else None
            window *= 2

    def _outcome(
        self, schedule: Schedule, at: datetime, status: FireStatus, *, run: Run | None = None, reason: str | None = None
    ) -> FireOutcome:
        return _logged(FireOutcome(schedule_id=schedule.id, fire_time=at, status=status, run=run, reason=reason))


def _logged(outcome: FireOutcome) -> FireOutcome:
    level = log.warning if outcome.status in (FireStatus.REFUSED, FireStatus.MISSED) else log.info
    level(
        "schedule fire " + outcome.status.value,
        schedule_id=outcome.schedule_id,
        fire_time=outcome.fire_time.isoformat(),
        run_id=outcome.run.id if outcome.run else None,
        reason=outcome.reason,
    )
    return outcome
