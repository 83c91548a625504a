"""In-memory implementations of the ports: for tests, dry runs, and runs that keep no records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.faults import FaultSpec
from cliffwatch.domain.generator_health import GeneratorLimits, GeneratorReport, judge_generator
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_S, RequestRecord
from cliffwatch.domain.plan import PlannedRequest
from cliffwatch.domain.ports import Clock, FaultEvent, GeneratorListener, LiveCounters, Progress


class InMemorySink:
    """Keeps every record; for tests and short runs only (memory grows with the request count)."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.flushes = 0

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)

    async def flush(self) -> None:
        self.flushes += 1


class NullSink:
    """Keeps nothing: the run's aggregates are all that is wanted."""

    def add(self, record: RequestRecord) -> None:
        return None

    async def flush(self) -> None:
        return None


class NoFaultInjector:
    """The injector when no fault backend is configured: a scenario that needs faults fails before load."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def check(self) -> None:
        raise FaultInjectionFailed(proxy="-", toxic=None, reason=self.reason)

    async def apply(self, phase: int, faults: Sequence[FaultSpec]) -> list[FaultEvent]:
        raise FaultInjectionFailed(proxy="-", toxic=None, reason=self.reason)

    async def remove(self, phase: int) -> list[FaultEvent]:
        return []

    async def remove_all(self) -> list[FaultEvent]:
        return []


class RecordingFaultInjector:
    """Remembers which faults are on; ``active`` is what a real proxy would be doing right now."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.active: dict[int, tuple[FaultSpec, ...]] = {}
        self.history: list[tuple[str, int]] = []

    async def check(self) -> None:
        return None

    async def apply(self, phase: int, faults: Sequence[FaultSpec]) -> list[FaultEvent]:
        self.active[phase] = tuple(faults)
        self.history.append(("on", phase))
        return [self._event(phase, f, "on") for f in faults]

    async def remove(self, phase: int) -> list[FaultEvent]:
        faults = self.active.pop(phase, ())
        if faults:
            self.history.append(("off", phase))
        return [self._event(phase, f, "off") for f in faults]

    async def remove_all(self) -> list[FaultEvent]:
        events: list[FaultEvent] = []
        for phase in list(self.active):
            events.extend(await self.remove(phase))
        return events

    def _event(self, phase: int, fault: FaultSpec, action: str) -> FaultEvent:
        return FaultEvent(phase=phase, fault=fault, action=action, at_ns=self.clock.now_ns(), ok=True)


class ScriptedGenerator:
    """A load generator that answers each request with a record computed by ``respond`` after ``latency_s``.

    It keeps the plan's schedule on the given clock, so the runner's timing, guards and aggregation can
    be tested without HTTP. ``respond`` is called when a request is sent; if it raises, ``run`` raises, as a
    broken generator would. Cancelled, ``run`` cancels its answers: nothing is reported after it ends.
    """

    def __init__(
        self,
        clock: Clock,
        respond: Callable[[PlannedRequest], tuple[float, RequestRecord]],
        limits: GeneratorLimits | None = None,
    ) -> None:
        self.clock = clock
        self.respond = respond
        self.limits = limits or GeneratorLimits()
        self.stopped: str | None = None
        self.preflights = 0
        self._dispatched = 0
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def preflight(self) -> None:
        self.preflights += 1

    def stop(self, reason: str, *, cancel_in_flight: bool = False) -> None:
        self.stopped = self.stopped or reason
        if cancel_in_flight:
            for task in self._tasks:
                task.cancel()

    def live(self) -> LiveCounters:
        return LiveCounters(dispatched=self._dispatched, in_flight=self._in_flight, tokens=0.0)

    async def run(
        self, plan: Iterable[PlannedRequest], *, start_ns: int, listener: GeneratorListener
    ) -> GeneratorReport:
        try:
            for request in plan:
                delay = (start_ns + request.scheduled_ns - self.clock.now_ns()) / NS_PER_S
                if delay > 0 and self.stopped is None:
                    await self.clock.sleep(delay)
                if self.stopped is not None:
                    listener.finished(request.not_sent(self.stopped))
                    continue
                latency_s, record = self.respond(request)  # a respond that raises breaks the run, not one task
                self._dispatched += 1
                listener.dispatched(request, self.clock.now_ns() - start_ns)
                self._answer(request, latency_s, record, listener)
            while self._tasks:
                await asyncio.wait(list(self._tasks))
        except BaseException:
            # cancelled or broken: no request may go on answering after the run has ended
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks))
            raise
        return judge_generator(Histogram(), max_stall_ms=0.0, cpu_busy=0.0, overflow=0, limits=self.limits)

    def _answer(
        self, request: PlannedRequest, latency_s: float, record: RequestRecord, listener: GeneratorListener
    ) -> None:
        """Finishes ``request`` with ``record`` after ``latency_s``, or as not_sent when cut short (even
        when cancelled before it started: the listener hears of every dispatched request)."""
        task = asyncio.create_task(self.clock.sleep(latency_s))
        self._in_flight += 1
        self._tasks.add(task)

        def finished(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            self._in_flight -= 1
            cut_short = task.cancelled() or task.exception() is not None
            listener.finished(request.not_sent(self.stopped or "cancelled") if cut_short else record)

        task.add_done_callback(finished)


class CollectingObserver:
    """Keeps progress lines and notes, for tests."""

    def __init__(self) -> None:
        self.lines: list[Progress] = []
        self.notes: list[str] = []

    def progress(self, progress: Progress) -> None:
        self.lines.append(progress)

    def note(self, message: str) -> None:
        self.notes.append(message)


__all__ = [
    "CollectingObserver",
    "InMemorySink",
    "NoFaultInjector",
    "NullSink",
    "RecordingFaultInjector",
    "ScriptedGenerator",
]
