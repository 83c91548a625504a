"""The worker: claims queued runs, executes them under a renewable lease, streams their outcomes to the
store, and records how each ended. Several instances may share one database: a run is claimed once.

A run of kind sweep goes through ``prepare_sweep`` instead of ``prepare``, under the same lease, abort,
interrupt and shutdown handling; its end carries the sweep document and the usable capacity. While it runs,
the document of the steps so far is stored after every step as the run's provisional result.

The lease is kept by a ``LeaseKeeper`` from the claim until the run's end is recorded: renewed on time,
retried through a database outage, and — when it cannot be renewed before it would expire — given up by
fencing the run (its load stopped, its faults removed) before another instance may reap it. Outcomes go to
the store through a ``BufferedStoreSink`` that never makes the run wait for the database, and the end is
recorded with retries, so an outage loses nothing the worker still holds.

An abort asked for through the store reaches the run within ``ABORT_POLL_S``; one asked of this instance
(``abort_local``, ``stop_local``: the API's abort and emergency stop) reaches it at once, database or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import structlog

from cliffwatch.domain.errors import CliffwatchError, StoreUnavailable
from cliffwatch.domain.ports import RunStore, ScenarioStore
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.security.redaction import restore
from cliffwatch.domain.service.runs import Run, RunEnd, RunKind
from cliffwatch.services.lease import LeaseKeeper, LeaseTiming
from cliffwatch.services.notifications import RunNotices
from cliffwatch.services.outcome_sink import BufferedStoreSink
from cliffwatch.services.overrides import with_overrides
from cliffwatch.services.ports import OutcomeCounter, Prepare, PrepareSweep, Stoppable, SweepOutcomeLike
from cliffwatch.services.store_values import stop_reason
from cliffwatch.services.sweep_progress import SweepProgress

log = structlog.get_logger(__name__)
T = TypeVar("T")

POLL_S = 0.5  # how often an idle worker looks for queued runs
ABORT_POLL_S = 1.0
FINISH_RETRY_FIRST_S = 0.2
FINISH_RETRY_MAX_S = 5.0


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    owner: str
    max_concurrent_runs: int
    lease_s: float
    outcome_buffer: int = 100_000  # outcomes a run may hold while the database cannot take them


class _RunHandle:
    """What the lease keeper and the local controls stop: the run's service (or sweep) once it is prepared.
    A stop asked for before then is remembered, and the run then ends without starting its load."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.task: asyncio.Task[None] | None = None  # the run's execution, from its claim to its recorded end
        self.target: Stoppable | None = None
        self.interrupted = False
        self.abort_reason: str | None = None
        self.unstored: str | None = None  # how many outcomes could not be stored, and why

    @property
    def stopped(self) -> bool:
        return self.interrupted or self.abort_reason is not None

    def interrupt(self) -> None:
        self.interrupted = True
        if self.target is not None:
            self.target.interrupt()

    def abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
        if self.target is not None:
            self.target.abort(reason)


class _StoppedBeforeStart(Exception):
    """The run was stopped (fenced, aborted, shut down) before its load began."""


class RunWorker:
    def __init__(
        self,
        *,
        runs: RunStore,
        scenarios: ScenarioStore,
        prepare: Prepare,
        settings: WorkerSettings,
        now: Callable[[], datetime],
        count_outcomes: OutcomeCounter | None = None,
        prepare_sweep: PrepareSweep | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        notices: RunNotices | None = None,
    ) -> None:
        self.runs = runs
        self.scenarios = scenarios
        self.prepare = prepare
        self.prepare_sweep = prepare_sweep
        self.settings = settings
        self.now = now
        self.monotonic = monotonic
        self.count_outcomes = count_outcomes
        self.notices = notices  # tells a run's webhooks once its end is stored
        self.lease_timing = LeaseTiming(lease_s=settings.lease_s)
        self._handles: dict[str, _RunHandle] = {}  # the runs in hand, from their claim to their recorded end
        self._claiming = True
        self._stopped: str | None = None  # an emergency stop this instance was told of, database or not

    @property
    def active(self) -> int:
        return len(self._handles)

    async def run_forever(self) -> None:
        """Claims and starts runs while there is room, until ``stop_claiming`` (or cancellation)."""
        while self._claiming:
            started = False
            if len(self._handles) < self.settings.max_concurrent_runs and self._stopped is None:
                started = await self._claim_one()
            if not started:
                await asyncio.sleep(POLL_S)

    async def _claim_one(self) -> bool:
        held_since = self.monotonic()  # before asking: the lease granted ends no earlier than this + lease_s
        now = self.now()
        try:
            run = await self.runs.claim_run(
                owner=self.settings.owner, now=now, lease_until=now + timedelta(seconds=self.settings.lease_s)
            )
        except CliffwatchError as exc:
            log.warning("could not claim a run", error=str(exc))
            return False
        if run is None:
            return False
        handle = _RunHandle(run)
        self._handles[run.id] = handle
        handle.task = asyncio.create_task(self._execute(run, handle, held_since), name=f"run-{run.id}")
        handle.task.add_done_callback(lambda _: self._handles.pop(run.id, None))
        if self._stopped is not None:  # the emergency stop came while this claim was on its way
            handle.abort(stop_reason(self._stopped))
        return True

    def stop_claiming(self) -> None:
        self._claiming = False

    def abort_local(self, run_id: str, reason: str) -> Run | None:
        """Stops ``run_id`` at once if this instance runs it, without the database; the run as this instance
        holds it (abort requested), or None when it does not run here."""
        handle = self._handles.get(run_id)
        if handle is None:
            return None
        handle.abort(reason)
        return replace(handle.run, abort_requested=handle.run.abort_requested or reason)

    def stop_local(self, reason: str) -> list[Run]:
        """The emergency stop on this instance, database or not: every run here is aborted and no run is
        claimed until ``release_local``. Returns the runs stopped."""
        self._stopped = reason
        return [run for run_id in list(self._handles) if (run := self.abort_local(run_id, stop_reason(reason)))]

    def release_local(self) -> None:
        """Lets this instance claim runs again (the database's emergency stop, if set, still holds)."""
        self._stopped = None

    def unrecorded_stop(self) -> str | None:
        """The emergency stop this instance holds until the database records it (``stop_local`` … ``release_local``:
        the service releases it here once the stop is recorded), or None."""
        return self._stopped

    async def shutdown(self, grace_s: float) -> None:
        """Stops claiming, interrupts every run (faults rolled back), and waits up to ``grace_s`` for them to
        record their end; what is still going then is cancelled (and recorded as interrupted if it can)."""
        self.stop_claiming()
        for handle in list(self._handles.values()):
            handle.interrupt()
        tasks = [handle.task for handle in self._handles.values() if handle.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _execute(self, run: Run, handle: _RunHandle, held_since: float) -> None:
        bound = log.bind(run_id=run.id, scenario=run.scenario_name)
        structlog.contextvars.bind_contextvars(run_id=run.id)
        lease = LeaseKeeper(runs=self.runs, run_id=run.id, owner=self.settings.owner, timing=self.lease_timing,
                            now=self.now, held_since=held_since, monotonic=self.monotonic)  # fmt: skip
        # The lease is kept until the end is recorded: a run whose database is down at its end is not reaped
        # while its worker still holds its result.
        keeper = asyncio.create_task(lease.keep(handle), name=f"lease-{run.id}")
        end: RunEnd
        scenario: Scenario | None = None  # known once read: a run whose scenario cannot be read tells no one
        try:
            try:
                scenario = await self._scenario(run)
                if run.kind is RunKind.SWEEP:
                    end = await self._sweep(run, scenario, handle)
                else:
                    end = await self._run(run, scenario, handle)
            except _StoppedBeforeStart:
                end = self._stopped_end(handle, lease)
            except asyncio.CancelledError:
                end = RunEnd(status=RunStatus.INTERRUPTED, finished_at=self.now(),
                             reason="the service stopped before the run could finish")  # fmt: skip
                await asyncio.shield(self._finish(run, end, attempts=1))
                raise
            except CliffwatchError as exc:
                # Raised before any load (target unreachable, Toxiproxy unavailable, invalid stored scenario).
                end = RunEnd(status=RunStatus.FAILED, finished_at=self.now(), reason=str(exc))
            except Exception as exc:  # a bug of ours: the run is recorded as failed, the worker goes on
                bound.exception("run crashed")
                end = RunEnd(status=RunStatus.FAILED, finished_at=self.now(),
                             reason=f"cliffwatch internal error: {type(exc).__name__}: {exc}")  # fmt: skip
            end = _explained(end, lease, handle)
            if await self._finish(run, end) and self.notices is not None and scenario is not None:
                self.notices.ended(run, scenario, end)  # after the end is stored, and never delaying it
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            structlog.contextvars.unbind_contextvars("run_id")

    def _stopped_end(self, handle: _RunHandle, lease: LeaseKeeper) -> RunEnd:
        if handle.abort_reason is not None:
            return RunEnd(status=RunStatus.ABORTED, finished_at=self.now(), reason=handle.abort_reason)
        reason = lease.fenced or "interrupted before its load began (the service stopped, or lost the run's lease)"
        return RunEnd(status=RunStatus.INTERRUPTED, finished_at=self.now(), reason=reason)

    async def _run(self, run: Run, scenario: Scenario, handle: _RunHandle) -> RunEnd:
        sink = BufferedStoreSink(self.runs, run.id, capacity=self.settings.outcome_buffer, count=self.count_outcomes)
        try:
            async with self.prepare(scenario, run.id, sink) as prepared:
                service = prepared.service
                sink.on_overflow = service.abort
                result = await self._watched(
                    run, handle, service, service.execute(scenario, run_id=run.id, target_url=prepared.target_url)
                )
            await sink.drain()  # every outcome stored before the end is: a reader of a finished run sees all
        finally:
            await sink.close()
        if sink.dropped or sink.broken is not None:
            cause = sink.broken or "the outcome buffer was full"
            handle.unstored = f"{sink.dropped + sink.pending:,} outcomes could not be stored ({cause})"
        return run_end(result, self.now())

    async def _sweep(self, run: Run, scenario: Scenario, handle: _RunHandle) -> RunEnd:
        if run.sweep is None:
            raise CliffwatchError(f"the sweep run {run.id} has no sweep parameters stored")
        if self.prepare_sweep is None:
            raise CliffwatchError("this instance cannot run sweeps (no sweep machinery configured)")
        progress = SweepProgress(sweep_id=run.id, scenario=scenario, spec=run.sweep, target_url=run.target_url,
                                 started_at=self.now())  # fmt: skip
        async with self.prepare_sweep(scenario, run.sweep, run.id, progress) as sweep:
            progress.target_url = sweep.target_url
            publisher = asyncio.create_task(self._publish_progress(run, progress))
            try:
                outcome = await self._watched(run, handle, sweep, sweep.run())
            finally:
                publisher.cancel()  # before the end is recorded: the final document replaces the provisional
                await asyncio.gather(publisher, return_exceptions=True)
        return sweep_end(outcome, self.now())

    async def _publish_progress(self, run: Run, progress: SweepProgress) -> None:
        """Stores the sweep's document so far after each step (coalesced: a slow store gets the latest)."""
        while True:
            await progress.changed.wait()
            progress.changed.clear()
            document = progress.document(self.now())
            try:
                held = await self.runs.save_provisional_result(run.id, owner=self.settings.owner, result=document)
            except CliffwatchError as exc:  # the next step tries again; the final document does not depend on it
                log.warning("could not store a sweep's progress", run_id=run.id, error=str(exc))
                continue
            if not held:
                return  # the lease keeper stops the sweep

    async def _watched(self, run: Run, handle: _RunHandle, stoppable: Stoppable, work: Coroutine[Any, Any, T]) -> T:
        """Awaits ``work`` while watching for an abort asked through the store; the handle now stops it."""
        if handle.stopped:
            work.close()
            raise _StoppedBeforeStart
        handle.target = stoppable
        watcher = asyncio.create_task(self._watch_abort(run, handle))
        try:
            # ``work`` starts at once, with no await before it: a stop cannot fall between the check and its start.
            return await work
        finally:
            handle.target = None
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _finish(self, run: Run, end: RunEnd, *, attempts: int | None = None) -> bool:
        """Records how the run ended, retrying while the database is unavailable (``attempts`` None: until it
        is back, or the worker is cancelled at shutdown); whether it was recorded as this end."""
        delay, tried = FINISH_RETRY_FIRST_S, 0
        while True:
            tried += 1
            try:
                recorded = await self.runs.finish_run(run.id, owner=self.settings.owner, end=end)
            except StoreUnavailable as exc:
                if attempts is not None and tried >= attempts:
                    log.error("could not record a run's end", run_id=run.id, status=end.status.value, error=str(exc))
                    return False
                if tried == 1:
                    log.warning("could not record a run's end: retrying", run_id=run.id, error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, FINISH_RETRY_MAX_S)
                continue
            log.info("run ended", run_id=run.id, status=end.status.value, score=end.score, recorded=recorded)
            return bool(recorded)

    async def _scenario(self, run: Run) -> Scenario:
        version = await self.scenarios.scenario_version(run.scenario_name, run.scenario_hash)
        if version is None:
            raise CliffwatchError(f"the stored scenario {run.scenario_name}@{run.scenario_hash[:12]} is gone")
        # Stored masked: the run alone gets the credentials kept apart, and reads its secret references at
        # its start (bootstrap's prepare); the hash it shows is the version's.
        credentials = await self.scenarios.scenario_credentials(run.scenario_name, run.scenario_hash)
        document = restore(version.document, credentials)
        scenario = parse_scenario(document, source=f"{run.scenario_name}@{run.scenario_hash[:12]}")
        o = run.overrides
        scenario = with_overrides(scenario, target_url=o.target_url, seed=o.seed, threshold=o.threshold)
        return replace(scenario, content_hash=run.scenario_hash)

    async def _watch_abort(self, run: Run, handle: _RunHandle) -> None:
        while True:
            await asyncio.sleep(ABORT_POLL_S)
            with contextlib.suppress(CliffwatchError):
                current = await self.runs.get_run(run.id)
                if current is not None and current.abort_requested:
                    handle.abort(current.abort_requested)
                    return


def _explained(end: RunEnd, lease: LeaseKeeper, handle: _RunHandle) -> RunEnd:
    """The end with what only the worker knows: that it fenced the run, and outcomes it could not store."""
    reason = end.reason
    if lease.fenced is not None and end.status is RunStatus.INTERRUPTED:
        reason = lease.fenced
    if handle.unstored is not None:
        reason = f"{reason}; {handle.unstored}" if reason else handle.unstored
    return replace(end, reason=reason)


def run_end(result: RunResult, finished_at: datetime) -> RunEnd:
    """What the store keeps of a finished run: the result document, its time series apart."""
    document = result.to_dict()
    timeseries: Sequence[dict[str, object]] = document.pop("timeseries")
    return RunEnd(
        status=result.status,
        finished_at=finished_at,
        reason=result.abort_reason if result.status is RunStatus.ABORTED else _reason(result),
        score=result.score.value,
        score_version=result.score.version,
        passed=result.passed,
        verdicts=tuple(v.name for v in result.verdicts()),
        result=document,
        timeseries=tuple(timeseries),
    )


def sweep_end(outcome: SweepOutcomeLike, finished_at: datetime) -> RunEnd:
    """What the store keeps of a finished sweep: its document and the first variant's usable capacity."""
    return RunEnd(status=outcome.status, finished_at=finished_at, reason=outcome.reason,
                  result=outcome.to_dict(), usable_rps=outcome.usable_rps)  # fmt: skip


def _reason(result: RunResult) -> str | None:
    if result.status is RunStatus.INTERRUPTED:
        return "interrupted before its end (the service stopped, or lost the run's lease)"
    return None
