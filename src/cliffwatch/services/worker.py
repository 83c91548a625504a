"""The worker: claims queued runs, executes them under a renewable lease, streams their outcomes to the
store, and records how each ended. Several instances may share one database: a run is claimed once.

A run of kind sweep goes through ``prepare_sweep`` instead of ``prepare``, under the same lease, abort,
interrupt and shutdown handling; its end carries the sweep document and the usable capacity. While it runs,
the document of the steps so far is stored after every step as the run's provisional result.

A run whose lease this worker loses (an instance that was frozen, say) is stopped here, since another
instance may already have declared it interrupted. An abort asked for through the API reaches the run
within ``ABORT_POLL_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

import structlog

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.ports import RecordSink
from cliffwatch.domain.redaction import restore
from cliffwatch.domain.result import RunResult, RunStatus
from cliffwatch.domain.runs import Run, RunEnd, RunKind
from cliffwatch.domain.scenario import Scenario, parse_scenario, with_overrides
from cliffwatch.domain.service_ports import RunStore, ScenarioStore
from cliffwatch.domain.sweep_spec import SweepSpec
from cliffwatch.services.runner import RunService
from cliffwatch.services.sweep import SweepObserver
from cliffwatch.services.sweep_progress import SweepProgress

log = structlog.get_logger(__name__)
T = TypeVar("T")

POLL_S = 0.5  # how often an idle worker looks for queued runs
ABORT_POLL_S = 1.0


class PreparedRunLike(Protocol):
    @property
    def service(self) -> RunService: ...

    @property
    def target_url(self) -> str: ...

    @property
    def run_id(self) -> str: ...


class Stoppable(Protocol):
    """What the lease and abort watchers and the shutdown stop: a run's service, or a sweep."""

    def interrupt(self) -> None: ...

    def abort(self, reason: str) -> None: ...


class SweepOutcomeLike(Protocol):
    """How a sweep ended (``bootstrap_sweep.SweepOutcome``)."""

    @property
    def status(self) -> RunStatus: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def usable_rps(self) -> float | None: ...

    def to_dict(self) -> dict[str, Any]: ...


class SweepHandleLike(Stoppable, Protocol):
    """A prepared sweep (``bootstrap_sweep.SweepHandle``): run once, stoppable meanwhile."""

    @property
    def target_url(self) -> str: ...

    async def run(self) -> SweepOutcomeLike: ...


Prepare = Callable[[Scenario, str, RecordSink], AbstractAsyncContextManager[PreparedRunLike]]
# (scenario, spec, run id, the observer told of every step) → a prepared sweep
PrepareSweep = Callable[[Scenario, SweepSpec, str, SweepObserver], AbstractAsyncContextManager[SweepHandleLike]]
OutcomeCounter = Callable[[str, Counter[str]], None]


class StoreSink:
    """A ``RecordSink`` writing outcomes to the store in batches, once per runner tick."""

    def __init__(self, store: RunStore, run_id: str, count: OutcomeCounter | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.count = count
        self._buffer: list[RequestRecord] = []
        self._lock = asyncio.Lock()

    def add(self, record: RequestRecord) -> None:
        self._buffer.append(record)

    async def flush(self) -> None:
        async with self._lock:  # the runner's final flush may meet a tick's
            batch, self._buffer = self._buffer, []
            if not batch:
                return
            await self.store.add_outcomes(self.run_id, batch)
            if self.count is not None:
                self.count(self.run_id, Counter(r.outcome.value for r in batch))


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    owner: str
    max_concurrent_runs: int
    lease_s: float


class Worker:
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
    ) -> None:
        self.runs = runs
        self.scenarios = scenarios
        self.prepare = prepare
        self.prepare_sweep = prepare_sweep
        self.settings = settings
        self.now = now
        self.count_outcomes = count_outcomes
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._services: dict[str, Stoppable] = {}
        self._claiming = True

    @property
    def active(self) -> int:
        return len(self._tasks)

    async def run_forever(self) -> None:
        """Claims and starts runs while there is room, until ``stop_claiming`` (or cancellation)."""
        while self._claiming:
            started = False
            if len(self._tasks) < self.settings.max_concurrent_runs:
                started = await self._claim_one()
            if not started:
                await asyncio.sleep(POLL_S)

    async def _claim_one(self) -> bool:
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
        task = asyncio.create_task(self._execute(run), name=f"run-{run.id}")
        self._tasks[run.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(run.id, None))
        return True

    def stop_claiming(self) -> None:
        self._claiming = False

    async def shutdown(self, grace_s: float) -> None:
        """Stops claiming, interrupts every run (faults rolled back), and waits up to ``grace_s`` for them to
        record their end; what is still going then is cancelled (and recorded as interrupted if it can)."""
        self.stop_claiming()
        for service in list(self._services.values()):
            service.interrupt()
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _execute(self, run: Run) -> None:
        bound = log.bind(run_id=run.id, scenario=run.scenario_name)
        structlog.contextvars.bind_contextvars(run_id=run.id)
        end: RunEnd
        try:
            scenario = await self._scenario(run)
            if run.kind is RunKind.SWEEP:
                end = await self._sweep(run, scenario)
            else:
                end = await self._run(run, scenario)
        except asyncio.CancelledError:
            end = RunEnd(status=RunStatus.INTERRUPTED, finished_at=self.now(),
                         reason="the service stopped before the run could finish")  # fmt: skip
            await asyncio.shield(self._finish(run, end))
            raise
        except CliffwatchError as exc:
            # Raised before any load (target unreachable, Toxiproxy unavailable, invalid stored scenario).
            end = RunEnd(status=RunStatus.FAILED, finished_at=self.now(), reason=str(exc))
        except Exception as exc:  # a bug of ours: the run is recorded as failed, the worker goes on
            bound.exception("run crashed")
            end = RunEnd(status=RunStatus.FAILED, finished_at=self.now(),
                         reason=f"cliffwatch internal error: {type(exc).__name__}: {exc}")  # fmt: skip
        finally:
            self._services.pop(run.id, None)
            structlog.contextvars.unbind_contextvars("run_id")
        await self._finish(run, end)

    async def _run(self, run: Run, scenario: Scenario) -> RunEnd:
        sink = StoreSink(self.runs, run.id, self.count_outcomes)
        async with self.prepare(scenario, run.id, sink) as prepared:
            service = prepared.service
            result = await self._watched(
                run, service, service.execute(scenario, run_id=run.id, target_url=prepared.target_url)
            )
        return run_end(result, self.now())

    async def _sweep(self, run: Run, scenario: Scenario) -> RunEnd:
        if run.sweep is None:
            raise CliffwatchError(f"the sweep run {run.id} has no sweep parameters stored")
        if self.prepare_sweep is None:
            raise CliffwatchError("this instance cannot run sweeps (no sweep machinery configured)")
        progress = SweepProgress(sweep_id=run.id, scenario=scenario, spec=run.sweep, target_url=run.target_url,
                                 started_at=self.now())  # fmt: skip
        async with self.prepare_sweep(scenario, run.sweep, run.id, progress) as handle:
            progress.target_url = handle.target_url
            publisher = asyncio.create_task(self._publish_progress(run, progress))
            try:
                outcome = await self._watched(run, handle, handle.run())
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
                return  # the lease watcher stops the sweep

    async def _watched(self, run: Run, stoppable: Stoppable, work: Awaitable[T]) -> T:
        """Awaits ``work`` while keeping the run's lease and watching for an abort asked through the store."""
        self._services[run.id] = stoppable
        watchers = [
            asyncio.create_task(self._keep_lease(run, stoppable)),
            asyncio.create_task(self._watch_abort(run, stoppable)),
        ]
        try:
            return await work
        finally:
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

    async def _finish(self, run: Run, end: RunEnd) -> None:
        recorded = await self.runs.finish_run(run.id, owner=self.settings.owner, end=end)
        log.info("run ended", run_id=run.id, status=end.status.value, score=end.score, recorded=recorded)

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

    async def _keep_lease(self, run: Run, service: Stoppable) -> None:
        every = self.settings.lease_s / 3
        while True:
            await asyncio.sleep(every)
            held = await self.runs.renew_lease(
                run.id, owner=self.settings.owner, lease_until=self.now() + timedelta(seconds=self.settings.lease_s)
            )
            if not held:
                log.warning("lost the lease of a running run: stopping it", run_id=run.id)
                service.interrupt()
                return

    async def _watch_abort(self, run: Run, service: Stoppable) -> None:
        while True:
            await asyncio.sleep(ABORT_POLL_S)
            with contextlib.suppress(CliffwatchError):
                current = await self.runs.get_run(run.id)
                if current is not None and current.abort_requested:
                    service.abort(current.abort_requested)
                    return


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
