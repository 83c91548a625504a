"""One game day driven through the service: ``GamedayService`` with an ``ExperimentRunner`` that queues each
experiment as an ordinary run and waits for its end.

Each experiment is submitted through ``RunsService.submit`` as any API caller's (or schedule's) run would be, so
the emergency stop, the caps, the allowlist, the caller's quotas, and then the worker's lease, fencing and fault
roll-back hold for it exactly as for a single run. Nothing here sends load: it only queues, watches and judges.

While the suite goes, a keeper renews the game day's lease with its experiments so far (every ``tick_s``), and
stops the suite (no experiment starts after the one running, which is aborted) when:

- the game day is asked to stop (``abort``: this instance at once, another through the store's flag);
- the emergency stop is on (its run was aborted by it, or the store says it is on): the suite is stopped;
- the lease could not be renewed (another instance reaped it as interrupted): the suite is fenced.

A cancelled driver (the service shutting down) records the game day as interrupted and asks for its running
experiment's run to be aborted: queued, it would otherwise start after the restart (or on another instance) with
no game day watching it; running elsewhere, it would run to its end.

A run the environment ended (interrupted: its worker's instance went down; aborted by someone but this suite)
is no verdict on the target: the experiment could not run, and the suite fails as the CLI's does, with nothing
run after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from cliffwatch.domain.errors import CliffwatchError, EmergencyStopActive, EmergencyStopNotRecorded
from cliffwatch.domain.gameday.hypothesis import JudgedRun, judge
from cliffwatch.domain.gameday.stored_result import StoredResult
from cliffwatch.domain.gameday.suite_spec import ExperimentSpec, SuiteSpec
from cliffwatch.domain.gameday_ports import DeliveryStore, GamedayStore
from cliffwatch.domain.ports import ControlStore, RunStore
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.notify_spec import Delivery
from cliffwatch.domain.service.gamedays import ExperimentRecord, ExperimentState, Gameday, GamedayEnd, GamedayStatus
from cliffwatch.services.gameday import ExperimentNotStarted, GamedayService, SuiteOutcome
from cliffwatch.services.ports import Notifier
from cliffwatch.services.runs import RunRequest, RunsService
from cliffwatch.services.store_values import stop_reason

log = structlog.get_logger(__name__)
RUN_POLL_S = 0.5
EMERGENCY = stop_reason("")  # how the reason of a run the emergency stop ended begins


class _Stopped(ExperimentNotStarted):
    """The suite was stopped while an experiment was starting: it did not run."""


class GamedayExecution:
    """Drives one stored game day (``gameday``, owned by ``owner``) to its end; ``run`` once."""

    def __init__(self, *, gameday: Gameday, suite: SuiteSpec, requests: Mapping[str, RunRequest], store: GamedayStore,
                 runs: RunsService, run_store: RunStore, control: ControlStore, owner: str, lease_s: float,
                 now: Callable[[], datetime], notify: Notifier | None = None,
                 deliveries: DeliveryStore | None = None) -> None:  # fmt: skip
        self.gameday = gameday
        self.suite = suite
        self.requests = requests
        self.store = store
        self.runs = runs
        self.run_store = run_store
        self.control = control
        self.owner = owner
        self.lease = timedelta(seconds=lease_s)
        self.tick_s = max(0.2, min(1.0, lease_s / 3))
        self.now = now
        self.notify = notify
        self.deliveries = deliveries
        self.records = {r.name: r for r in gameday.experiments}
        self.service = GamedayService(suite, _Runner(self), pause=self._pause)
        self.stop_reason: str | None = None
        self.fenced: str | None = None
        self._stopped = asyncio.Event()
        self._current: str | None = None  # the run of the experiment in progress
        self._aborted: set[str] = set()

    def stop(self, reason: str) -> None:
        """No experiment starts after this; the one running is aborted (an emergency stop has done so already)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.service.stop()
        self._stopped.set()

    async def run(self) -> None:
        bound = log.bind(gameday_id=self.gameday.id, suite=self.suite.name)
        keeper = asyncio.create_task(self._keep(), name=f"gameday-lease-{self.gameday.id}")
        try:
            try:
                outcome = await self.service.run()
            except asyncio.CancelledError:
                end = GamedayEnd(status=GamedayStatus.INTERRUPTED, finished_at=self.now(),
                                 experiments=self._interrupted(),
                                 reason="the service stopped before the game day could finish")  # fmt: skip
                await asyncio.shield(self._finish(end))
                await asyncio.shield(self._abort_current("the service stopped before its game day could finish"))
                raise
            end = self._ended(outcome)
            await asyncio.shield(self._finish(end))  # the verdict is recorded first: webhooks may read it back
            bound.info("game day ended", verdict=end.verdict, status=end.status.value)
            await self._tell(outcome)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)

    async def run_experiment(self, experiment: ExperimentSpec) -> JudgedRun:
        if self._stopped.is_set():
            raise _Stopped(self.stop_reason or "stopped")
        try:
            run, _ = await self.runs.submit(self.requests[experiment.name])
        except (EmergencyStopActive, EmergencyStopNotRecorded) as exc:
            self.stop(str(exc))
            raise ExperimentNotStarted(str(exc)) from exc
        self._current = run.id
        self._record(experiment.name, state=ExperimentState.RUNNING, run_id=run.id)
        try:
            await self._save()
        except CliffwatchError as exc:  # the keeper saves again within a second; the run is queued either way
            log.warning("could not record a game day's progress", gameday_id=self.gameday.id, error=str(exc))
        if self._stopped.is_set():  # asked while its run was being queued
            await self._abort_current()
        ended = await self._ended_run(run.id)  # cancelled (a shutdown): _current stays, for run() to abort it
        self._current = None
        if ended.status is RunStatus.ABORTED and (ended.reason or "").startswith(EMERGENCY):
            self.stop(ended.reason or EMERGENCY)  # the emergency stop ended it: the whole suite ends with it
        elsewhere = ended.status is RunStatus.INTERRUPTED or (
            ended.status is RunStatus.ABORTED and ended.abort_requested is not None and run.id not in self._aborted
            and not self._stopped.is_set())  # fmt: skip
        if ended.result is None or elsewhere:
            why = f"run {run.id} {ended.status.value}: {ended.reason or 'it ended without a result'}"
            if elsewhere:
                why += " (ended from outside the game day, so it says nothing of the target)"
            self._record(experiment.name, state=ExperimentState.FAILED, error=why)
            raise CliffwatchError(why)
        try:
            result = StoredResult.of(ended.result)
        except ValueError as exc:  # a stored document this version cannot read: no verdict on the target either
            why = f"run {run.id}'s stored result cannot be read: {exc}"
            self._record(experiment.name, state=ExperimentState.FAILED, error=why)
            raise CliffwatchError(why) from exc
        judgement = judge(experiment.expect, result)
        self._record(experiment.name, state=ExperimentState.HELD if judgement.held else ExperimentState.BROKEN,
                     broken_because=judgement.broken_because)  # fmt: skip
        return result

    # Helpers

    async def _ended_run(self, run_id: str) -> Any:
        while True:
            current = await self._read_run(run_id)
            if current is not None and current.status.terminal:
                return current
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), timeout=RUN_POLL_S)
            if self._stopped.is_set():
                await self._abort_current()

    async def _read_run(self, run_id: str) -> Any:
        try:
            return await self.run_store.get_run(run_id)
        except CliffwatchError as exc:  # the database went away: its run goes on, its end is read once it is back
            log.warning("could not read a game day's run", run_id=run_id, error=str(exc))
            return None

    async def _abort_current(self, why: str | None = None) -> None:
        """Aborts the running experiment's run (once; a failed attempt is tried again on the next look)."""
        run_id, why = self._current, why or self.stop_reason
        if run_id is None or why is None or run_id in self._aborted:
            return
        try:
            await self.runs.abort(run_id, f"its game day {self.gameday.id} was stopped: {why}")
        except CliffwatchError as exc:
            log.warning("could not abort a game day's run", run_id=run_id, error=str(exc))
            return
        self._aborted.add(run_id)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), timeout=seconds)

    async def _keep(self) -> None:
        """Renews the lease with the experiments so far; stops the suite on an abort, the emergency stop or a
        lost lease."""
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                held = await self._save()
                stop = await self.control.emergency_stop()
            except CliffwatchError as exc:
                log.warning("could not renew a game day's lease", gameday_id=self.gameday.id, error=str(exc))
                continue
            if held is None:
                self.fenced = "its lease was lost: another instance recorded the game day as interrupted"
                self.stop(self.fenced)
                return
            if held.abort_requested is not None:
                self.stop(held.abort_requested)
            elif stop is not None:
                self.stop(stop_reason(stop))

    async def _save(self) -> Gameday | None:
        return await self.store.save_gameday_progress(self.gameday.id, owner=self.owner,
                                                      experiments=tuple(self.records.values()),
                                                      lease_until=self.now() + self.lease)  # fmt: skip

    def _record(self, name: str, **changes: Any) -> None:
        self.records[name] = replace(self.records[name], **changes)

    def _interrupted(self) -> tuple[ExperimentRecord, ...]:
        return tuple(replace(r, state=ExperimentState.NOT_RUN) if r.state is ExperimentState.PENDING else r
                     for r in self.records.values())  # fmt: skip

    def _ended(self, outcome: SuiteOutcome) -> GamedayEnd:
        records = []
        for done in outcome.experiments:
            record = self.records[done.experiment.name]
            broken = () if done.judgement is None else done.judgement.broken_because
            records.append(replace(record, state=ExperimentState(done.state), broken_because=broken,
                                   error=done.error))  # fmt: skip
        reason = self.fenced or (self.stop_reason if outcome.verdict.value == "stopped" else None)
        return GamedayEnd(status=GamedayStatus.FINISHED, finished_at=self.now(), experiments=tuple(records),
                          verdict=outcome.verdict.value, summary=outcome.summary(), reason=reason)  # fmt: skip

    async def _tell(self, outcome: SuiteOutcome) -> None:
        """The suite's webhooks told how it ended, once its end is recorded, and each delivery recorded in turn (a
        shutdown meanwhile loses the rest, as a run's does). A fenced game day tells nothing: another instance
        recorded it as interrupted, and that record is the one people read."""
        if self.notify is None or not self.suite.notify or self.fenced is not None:
            return
        found: list[Delivery] = []
        for event in outcome.events():
            found += await self.notify(self.suite.notify, event, outcome.notice())
        if self.deliveries is None:
            return
        try:
            await self.deliveries.add_deliveries(found, gameday_id=self.gameday.id)
        except CliffwatchError as exc:
            log.warning("could not record a game day's webhook deliveries", gameday_id=self.gameday.id,
                        error=str(exc))  # fmt: skip

    async def _finish(self, end: GamedayEnd) -> None:
        try:
            recorded = await self.store.finish_gameday(self.gameday.id, owner=self.owner, end=end)
        except CliffwatchError as exc:
            log.error("could not record a game day's end", gameday_id=self.gameday.id, error=str(exc))
            return
        if not recorded:
            log.warning("a game day's end was not recorded: it is no longer this instance's",
                        gameday_id=self.gameday.id)  # fmt: skip


class _Runner:
    """The ``ExperimentRunner`` face of an execution."""

    def __init__(self, execution: GamedayExecution) -> None:
        self.execution = execution

    async def run(self, experiment: ExperimentSpec) -> JudgedRun:
        return await self.execution.run_experiment(experiment)
