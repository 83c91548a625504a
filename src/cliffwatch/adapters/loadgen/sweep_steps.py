"""The real ``StepRunner``: one sweep step is one short run of the step scenario against the target.

The step scenario (``domain.capacity.sweep_plan.step_scenario``) runs through the same ``RunService``, generator
and HTTP executor as ``cliffwatch run``, so a step measures exactly what a run would: latencies from the
scheduled send time, every failure in the denominator, a generator that says when it fell behind. The
target and the HTTP session are the sweep's (started once, in ``bootstrap.sweep``), not the step's.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import structlog

from cliffwatch.adapters.distributed.coordinator import ShardedGenerator
from cliffwatch.adapters.distributed.pool import WorkerPool
from cliffwatch.adapters.loadgen.closed_loop import ClosedLoopGenerator
from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.request_attempts import AttemptExecutor
from cliffwatch.adapters.loadgen.step_drain import TargetDrain
from cliffwatch.domain.capacity.arrival_luck import ReferenceSlot
from cliffwatch.domain.capacity.capacity_stats import StepStats
from cliffwatch.domain.capacity.sweep_plan import WindowRecords, measured_index, step_scenario, step_stats
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepMode, SweepSpec
from cliffwatch.domain.ports import Clock, LoadGenerator, Progress, ProgressObserver, ServerWatcher
from cliffwatch.domain.scenario.retry import RetryPolicy
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.services.memory import NoFaultInjector
from cliffwatch.services.runner import RunService
from cliffwatch.services.sweep import StepStopped

log = structlog.get_logger(__name__)

NO_FAULTS = "a sweep measures the target as it is: it applies no faults"


class _StepProgress:
    """Passes a step's live progress on and keeps its per-phase notes out of the sweep's output."""

    def __init__(self, observer: ProgressObserver) -> None:
        self.observer = observer

    def progress(self, progress: Progress) -> None:
        self.observer.progress(progress)

    def note(self, message: str) -> None:
        pass


class HttpStepRunner:
    """Runs the steps of one retry variant through ``executor`` (already open, aimed at the target)."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        spec: SweepSpec,
        variant: str,
        retry: RetryPolicy | None,
        executor: AttemptExecutor,
        clock: Clock,
        observer: ProgressObserver,
        target_url: str,
        sweep_id: str,
        cap: TokenBucket | None = None,
        watcher: ServerWatcher | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        self.scenario = scenario
        self.spec = spec
        self.variant = variant
        self.retry = retry
        self.executor = executor
        self.clock = clock
        self.observer = observer
        self.target_url = target_url
        self.sweep_id = sweep_id
        self.cap = cap  # the sweep's attempt cap, shared by its steps
        self.watcher = watcher  # the target's own metrics, scraped during each step (target.metrics)
        self.pool = pool  # the sweep's worker processes (client.workers, rate steps): they send each step
        self._service: RunService | None = None
        self._stopped = asyncio.Event()
        # After each step: the target itself idle again, by its gauges or a probe (domain.capacity.step_drain)
        self._drain = TargetDrain(executor, clock, watcher=watcher, stopped=self._stopped,
                                  timeout_s=spec.drain_timeout_s, cap=cap)  # fmt: skip
        self._steps = 0
        # Poisson rate steps are read beside one reference slot for the whole variant (domain.capacity.arrival_luck)
        poisson = spec.mode is SweepMode.RATE and spec.arrival is SweepArrival.POISSON
        self._reference = ReferenceSlot() if poisson and spec.luck_correction else None

    def stop(self, reason: str, *, aborted: bool) -> None:
        self._stopped.set()
        service = self._service
        if service is not None:
            if aborted:
                service.abort(reason)
            else:
                service.interrupt()

    async def run_step(self, rate: float, *, trial: int, extended: bool = False) -> StepStats:
        if self._stopped.is_set():
            raise StepStopped(f"step at {rate:g} not run: the sweep was stopped")
        step = step_scenario(self.scenario, rate, self.spec, self.retry, variant=self.variant, trial=trial,
                             extended=extended)  # fmt: skip
        if self._steps == 0:
            await self._drain.reference()  # the probes' idle first-token time, before any step's load
        self.executor.next_prompts()  # the step's plan numbers its requests from 0 again: fresh prompt text
        generator: LoadGenerator
        if self.spec.mode is SweepMode.CONCURRENCY:
            generator = ClosedLoopGenerator(step, self.executor, self.clock, clients=max(1, round(rate)), cap=self.cap)
        elif self.pool is not None:
            generator = ShardedGenerator(self.pool, step, self.clock, next_prompts=True)
        else:
            generator = OpenLoopGenerator(step, self.executor, self.clock, cap=self.cap)
        slos = [step.slo_for(k) for k in range(len(step.traffic_classes))]
        window = WindowRecords(measured_index(step), slos, keep_requests=self._reference is not None)
        service = RunService(
            clock=self.clock,
            generator=generator,
            faults=NoFaultInjector(NO_FAULTS),
            sink=window,
            observer=_StepProgress(self.observer),
            watcher=self.watcher,
        )
        self._steps += 1
        self._service = service
        try:
            result = await service.execute(
                step, run_id=f"{self.sweep_id}-{self.variant}-{self._steps}", target_url=self.target_url
            )
        finally:
            self._service = None
        drain = await self._drain.drain()
        if self.spec.cooldown_s > 0 and not self._stopped.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.spec.cooldown_s)
        measured = result.metrics.phases[measured_index(step)]
        # Closed-loop clients cannot build a queue ahead of the target: only rate steps are checked for one.
        checked = self.spec.growth_check and self.spec.mode is SweepMode.RATE
        growth = window.growth(measured.window, rate=rate, server=result.server) if checked else None
        index = measured_index(step)
        classes = [(name, metrics.phases[index]) for name, metrics in result.metrics.classes]
        stats = step_stats(measured, result.generator, rate=rate, trial=trial, late_by=window.counts, growth=growth,
                           extended=extended, server=result.server, classes=classes)  # fmt: skip
        stats = replace(stats, drain=drain)
        reading = None if self._reference is None else window.reference(self._reference, rate=rate)
        # Only a reading of exactly the step's requests may correct its verdict: one that counts otherwise (a
        # record the sink never saw) is left out rather than trusted, and said.
        if reading is None:
            return stats
        if (reading.requests, reading.missed) != (stats.offered, stats.offered - stats.on_time):
            log.warning("sweep step read beside its reference queue counted other requests: not corrected",
                        rate=rate, trial=trial, offered=stats.offered, read=reading.requests)  # fmt: skip
            return stats
        return replace(stats, reference=reading)
