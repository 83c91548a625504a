"""Runs one scenario: pre-flight, phases on the clock, faults on and off, abort guards, live progress,
then aggregation and the score. Faults are always removed in ``finally``, shielded from cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.outcomes import NS_PER_S, Outcome, RequestRecord
from cliffwatch.domain.ports import (
    Clock,
    FaultInjector,
    LoadGenerator,
    Progress,
    ProgressObserver,
    RecordSink,
    ServerWatcher,
)
from cliffwatch.domain.results.isolation import class_plans
from cliffwatch.domain.results.metrics import ClassBook, RunAggregator
from cliffwatch.domain.results.result import PhaseTiming, RunResult, RunStatus
from cliffwatch.domain.results.scoring import score_run
from cliffwatch.domain.scenario.faults import FaultEvent
from cliffwatch.domain.scenario.scenario import PhaseRole, Scenario
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.traffic.generator_health import GeneratorReport
from cliffwatch.domain.traffic.plan import PhaseWindow, PlannedRequest, iter_plan, phase_windows
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING
from cliffwatch.services.memory import NoServerWatcher

log = structlog.get_logger(__name__)

START_LEAD_S = 0.05  # the plan starts a moment after set-up, so the first requests are not born late
# The baseline guard is judged this long before a baseline phase ends: judged at the end, it would race the
# generator sending the next phase's first request at that same instant.
BASELINE_CHECK_LEAD_S = 0.05
TICK_S = 1.0
LIVE_WINDOW_S = 5.0


class _Listener:
    """Feeds the generator's events to the aggregator and the sink (on the generator's hot path)."""

    def __init__(self, aggregator: RunAggregator, sink: RecordSink) -> None:
        self.aggregator = aggregator
        self.sink = sink

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        self.aggregator.dispatched(request.id, request.phase, request.scheduled_ns)

    def finished(self, record: RequestRecord) -> None:
        self.aggregator.add(record)
        self.sink.add(record)


@dataclass(kw_only=True)
class _RunState:
    start_ns: int
    abort_reason: str | None = None
    interrupted: bool = False
    cut_in_flight: bool = False  # stop outstanding requests too, once the faults are off
    last_progress_ns: int = 0  # when the previous progress line was taken; rates are over the time since
    last_dispatched: int = 0
    last_tokens: float = 0.0
    stopped: asyncio.Event = field(default_factory=asyncio.Event)  # set on abort or interrupt: stop waiting

    def halted(self, generator_task: asyncio.Task[GeneratorReport]) -> bool:
        """Whether the phases should stop: an abort, an interrupt, or a generator that failed.

        A generator that simply finished (every planned request answered) does not end the run early:
        the phases still keep their clock, so trailing phases are timed and their faults applied.
        """
        failed = generator_task.done() and (generator_task.cancelled() or generator_task.exception() is not None)
        return failed or self.abort_reason is not None or self.interrupted


class RunService:
    """Executes scenarios with the given ports; one instance may run many scenarios, one at a time."""

    def __init__(
        self,
        *,
        clock: Clock,
        generator: LoadGenerator,
        faults: FaultInjector,
        sink: RecordSink,
        observer: ProgressObserver,
        notes: tuple[str, ...] = (),
        workload: Scenario | None = None,
        watcher: ServerWatcher | None = None,
    ) -> None:
        self.clock = clock
        # What the plan walks: the prepared run's scenario with what its files hold (a trace's requests, a
        # dataset's sizes); None: the scenario executed, as it is.
        self.workload = workload
        self.generator = generator
        self.faults = faults
        self.sink = sink
        self.observer = observer
        self.notes = notes  # how the run was prepared differs from what its scenario asks (a capped pool)
        self.watcher: ServerWatcher = watcher or NoServerWatcher()  # the server's own metrics, when scraped
        self._watch_notes: tuple[str, ...] = ()
        self.sizing = WORDS_SIZING  # how prompt_tokens became prompts: the generator's preflight says
        self._state: _RunState | None = None

    def interrupt(self) -> None:
        """Stops the current run early (Ctrl-C): nothing more is sent; the run is recorded as interrupted."""
        if self._state is not None and not self._state.interrupted:
            self._state.interrupted = True
            self._state.cut_in_flight = True
            self._state.stopped.set()
            # In-flight requests are cut only once the phase's faults are off (see execute): clients
            # disconnecting while a toxic is being removed can stall Toxiproxy (its issue #558).
            self.generator.stop("run interrupted")

    def abort(self, reason: str) -> None:
        """Stops the current run at once because someone asked (an API abort, the emergency stop): as an
        interrupt, but recorded as aborted with ``reason``."""
        state = self._state
        if state is not None and state.abort_reason is None and not state.interrupted:
            state.abort_reason = reason
            state.cut_in_flight = True
            state.stopped.set()
            self.observer.note(f"aborting: {reason}")
            self.generator.stop(f"aborted: {reason}")

    async def execute(self, scenario: Scenario, *, run_id: str, target_url: str) -> RunResult:
        """Runs ``scenario`` against ``target_url`` and returns its result; raises before sending any load
        when the target or the fault injector is not usable."""
        windows = phase_windows(scenario)
        fast_fail_ms = scenario.score.fast_fail_fraction * scenario.slo.e2e_ms
        faulted = frozenset(i for i, phase in enumerate(scenario.phases) if phase.faults)
        aggregator = RunAggregator(windows, e2e_ms=scenario.slo.e2e_ms, fast_fail_ms=fast_fail_ms,
                                   classes=class_books(scenario), faulted=faulted)  # fmt: skip
        bound = log.bind(run_id=run_id, scenario=scenario.name)
        # The state exists from the start, so a stop during the checks is heard: it cuts them short, and the
        # run then ends at once with nothing sent (instead of running its whole length after them).
        state = _RunState(start_ns=self.clock.now_ns())
        self._state = state
        try:
            await self._until_stopped(self._checks(scenario), state)
        except BaseException:
            self._state = None
            raise

        started_at = self.clock.wall()
        state.start_ns = self.clock.now_ns() + round(START_LEAD_S * NS_PER_S)
        state.last_progress_ns = state.start_ns
        # The generator's counters may hold what an earlier run on it did (a sweep's steps share one HTTP client):
        # the live rates count from what they read now, not from zero.
        live = self.generator.live()
        state.last_dispatched, state.last_tokens = live.dispatched, live.tokens
        events: list[FaultEvent] = []
        timings: list[PhaseTiming] = []
        listener = _Listener(aggregator, self.sink)
        generator_task = asyncio.create_task(
            self.generator.run(iter_plan(self.workload or scenario), start_ns=state.start_ns, listener=listener)
        )
        self.watcher.start(state.start_ns)
        server: ServerView | None = None
        bound.info("run started", target=target_url, phases=len(windows))
        try:
            await self._drive_phases(scenario, windows, aggregator, state, events, timings, generator_task)
            if state.cut_in_flight:
                self.generator.stop(state.abort_reason or "run interrupted", cancel_in_flight=True)
            report = await generator_task
        except BaseException:
            generator_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, CliffwatchError):
                await generator_task
            raise
        finally:
            try:
                server = await asyncio.shield(self.watcher.stop())
                events.extend(_run_relative(await asyncio.shield(self.faults.remove_all()), state))
            finally:
                # even when a fault could not be removed, the records are kept and the service is free
                self._state = None
                await asyncio.shield(self.sink.flush())

        status = RunStatus.SUCCEEDED
        if state.interrupted:
            status = RunStatus.INTERRUPTED
        elif state.abort_reason is not None:
            status = RunStatus.ABORTED
        metrics = aggregator.result()
        result = RunResult(
            run_id=run_id,
            scenario=scenario,
            target_url=target_url,
            status=status,
            abort_reason=state.abort_reason,
            started_at=started_at,
            finished_at=self.clock.wall(),
            duration_s=(self.clock.now_ns() - state.start_ns) / NS_PER_S,
            metrics=metrics,
            generator=report,
            score=score_run(metrics, slo=scenario.slo, spec=scenario.score, server=server, plans=class_plans(scenario)),
            fault_events=tuple(events),
            phase_timings=tuple(timings),
            notes=self.notes + self._watch_notes,
            prompt_sizing=self.sizing,
            server=server,
        )
        bound.info("run finished", status=status.value, score=result.score.value, passed=result.passed)
        return result

    async def _checks(self, scenario: Scenario) -> None:
        """Before any load: the fault injector (when the scenario has faults) and the target answer."""
        if scenario.needs_faults():
            await self.faults.check()
        self.sizing = WORDS_SIZING
        self.sizing = await self.generator.preflight()
        note = await self.watcher.check()
        self._watch_notes = () if note is None else (note,)
        if note is not None:
            self.observer.note(note)

    async def _until_stopped(self, checks: Coroutine[Any, Any, None], state: _RunState) -> None:
        """Runs ``checks``, or cancels them when the run is stopped (an interrupt or abort) before they end."""
        task = asyncio.ensure_future(checks)
        stop_waiter = asyncio.ensure_future(state.stopped.wait())
        try:
            await asyncio.wait([task, stop_waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_waiter.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not task.cancelled():
            task.result()  # a failed check raises here, as before

    async def _drive_phases(
        self,
        scenario: Scenario,
        windows: tuple[PhaseWindow, ...],
        aggregator: RunAggregator,
        state: _RunState,
        events: list[FaultEvent],
        timings: list[PhaseTiming],
        generator_task: asyncio.Task[GeneratorReport],
    ) -> None:
        for phase, window in zip(scenario.phases, windows, strict=True):
            await self._sleep_until(state.start_ns + window.start_ns, generator_task, state)
            if state.halted(generator_task):
                return
            began = self.clock.now_ns() - state.start_ns
            if phase.faults:
                applied = _run_relative(await self.faults.apply(window.index, phase.faults), state)
                events.extend(applied)
                failed = [e for e in applied if not e.ok]
                if failed:
                    await self._abort(state, f"a fault could not be applied: {failed[0].detail}", window.index, events)
            self.observer.note(f"phase {phase.name} ({phase.role.value}): {phase.arrival.describe()}")
            check_ns: int | None = None
            if phase.role is PhaseRole.BASELINE and scenario.abort.baseline is not None:
                check_ns = state.start_ns + window.end_ns - round(BASELINE_CHECK_LEAD_S * NS_PER_S)
            for tick_end in _ticks(state.start_ns + window.start_ns, state.start_ns + window.end_ns):
                if check_ns is not None and tick_end >= check_ns:
                    await self._sleep_until(check_ns, generator_task, state)
                    check_ns = None
                    reason = (
                        None
                        if state.halted(generator_task)
                        else self._unhealthy_baseline(scenario, window, aggregator, state)
                    )
                    if reason is not None:
                        await self._abort(state, reason, window.index, events)
                        break
                await self._sleep_until(tick_end, generator_task, state)
                self._report_progress(scenario, window, aggregator, state)
                await self.sink.flush()
                reason = self._error_rate_breach(scenario, aggregator, state)
                if reason is not None:
                    await self._abort(state, reason, window.index, events)
                if state.halted(generator_task):
                    break
            if phase.faults:
                events.extend(_run_relative(await self.faults.remove(window.index), state))
            timings.append(
                PhaseTiming(index=window.index, began_ns=began, ended_ns=self.clock.now_ns() - state.start_ns)
            )
            if state.halted(generator_task):
                return

    async def _sleep_until(
        self, deadline_ns: int, generator_task: asyncio.Task[GeneratorReport], state: _RunState
    ) -> None:
        """Sleeps until ``deadline_ns``, waking early when the run halts (abort, interrupt, generator failure)."""
        remaining = (deadline_ns - self.clock.now_ns()) / NS_PER_S
        if remaining <= 0 or state.halted(generator_task):
            return
        stop_waiter = asyncio.ensure_future(state.stopped.wait())
        waiters: list[asyncio.Future[Any]] = [stop_waiter]
        if not generator_task.done():
            waiters.append(generator_task)
        try:
            while not state.halted(generator_task) and remaining > 0:
                done, _ = await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                if stop_waiter in done:
                    return
                if generator_task in done:
                    waiters = [stop_waiter]
                remaining = (deadline_ns - self.clock.now_ns()) / NS_PER_S
        finally:
            stop_waiter.cancel()

    async def _abort(self, state: _RunState, reason: str, phase: int, events: list[FaultEvent]) -> None:
        """Stops the load, rolls the phase's faults back, and only then records why the run stopped."""
        if state.abort_reason is not None:
            return
        self.generator.stop(f"aborted: {reason}")
        events.extend(_run_relative(await asyncio.shield(self.faults.remove(phase)), state))
        state.abort_reason = reason
        state.stopped.set()
        self.observer.note(f"aborting: {reason}")
        log.warning("run aborted", reason=reason)

    def _error_rate_breach(self, scenario: Scenario, aggregator: RunAggregator, state: _RunState) -> str | None:
        guard = scenario.abort.error_rate
        if guard is None:
            return None
        now = self.clock.now_ns() - state.start_ns
        ratio, count = aggregator.window_ratio(now, guard.window_s, guard.outcomes)
        if count >= guard.min_requests and ratio > guard.max_ratio:
            names = "/".join(sorted(o.value for o in guard.outcomes))
            return (
                f"{ratio:.0%} of the {count} requests finished in the last {guard.window_s:g}s were {names} "
                f"(limit {guard.max_ratio:.0%})"
            )
        return None

    def _unhealthy_baseline(
        self, scenario: Scenario, window: PhaseWindow, aggregator: RunAggregator, state: _RunState
    ) -> str | None:
        guard = scenario.abort.baseline
        if guard is None:
            return None
        ratio, decided = aggregator.phase_health(window.index, self.clock.now_ns() - state.start_ns)
        if ratio is not None and ratio < guard.min_on_time_ratio:
            return (
                f"baseline {window.name!r} already unhealthy: {ratio:.0%} of {decided} decided requests on time "
                f"(needs {guard.min_on_time_ratio:.0%}); no stress was applied"
            )
        return None

    def _report_progress(
        self, scenario: Scenario, window: PhaseWindow, aggregator: RunAggregator, state: _RunState
    ) -> None:
        live = self.generator.live()
        now_ns = self.clock.now_ns()
        now = now_ns - state.start_ns
        # ticks are shorter than TICK_S at a phase's end (or when the generator finished early)
        interval_s = max(now_ns - state.last_progress_ns, 1) / NS_PER_S
        ratio, count = aggregator.window_ratio(now, LIVE_WINDOW_S, frozenset({Outcome.ON_TIME}))
        self.observer.progress(
            Progress(
                elapsed_s=now / NS_PER_S,
                total_s=scenario.duration_s,
                phase=window.name,
                role=window.role.value,
                offered_per_s=(live.dispatched - state.last_dispatched) / interval_s,
                on_time_ratio=ratio if count else None,
                tokens_per_s=(live.tokens - state.last_tokens) / interval_s,
                in_flight=live.in_flight,
            )
        )
        state.last_progress_ns = now_ns
        state.last_dispatched = live.dispatched
        state.last_tokens = live.tokens


def class_books(scenario: Scenario) -> tuple[ClassBook, ...]:
    """The traffic classes a run keeps apart: every declared one (none for a scenario without classes)."""
    fraction = scenario.score.fast_fail_fraction
    return tuple(ClassBook(name=c.name, e2e_ms=c.slo.e2e_ms, fast_fail_ms=fraction * c.slo.e2e_ms)
                 for c in scenario.classes)  # fmt: skip


def _run_relative(events: Iterable[FaultEvent], state: _RunState) -> list[FaultEvent]:
    """Injectors stamp events on the shared clock; the result holds them from the run's start."""
    return [replace(e, at_ns=e.at_ns - state.start_ns) for e in events]


def _ticks(start_ns: int, end_ns: int) -> Iterator[int]:
    """Tick deadlines every second from ``start_ns``, the last one exactly at ``end_ns``."""
    at = start_ns
    step = round(TICK_S * NS_PER_S)
    while at + step < end_ns:
        at += step
        yield at
    yield end_ns
