"""The small interfaces the services are written against; adapters and in-memory twins implement them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from cliffwatch.domain.faults import FaultSpec
from cliffwatch.domain.generator_health import GeneratorReport
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.plan import PlannedRequest


class Clock(Protocol):
    def now_ns(self) -> int:
        """Monotonic nanoseconds (``time.perf_counter_ns`` in production)."""

    async def sleep(self, seconds: float) -> None: ...

    def wall(self) -> datetime:
        """The current UTC wall-clock time, for timestamps people read; never for measuring."""


class GeneratorListener(Protocol):
    def dispatched(self, request: PlannedRequest, at_ns: int) -> None: ...

    def finished(self, record: RequestRecord) -> None: ...


@dataclass(frozen=True, kw_only=True)
class LiveCounters:
    dispatched: int  # logical requests started so far
    in_flight: int  # attempts outstanding now
    tokens: float  # output tokens received so far, from every attempt


class LoadGenerator(Protocol):
    async def preflight(self) -> None:
        """Checks the target answers at all; raises ``TargetUnreachable`` before any load is sent."""

    async def run(
        self, plan: Iterable[PlannedRequest], *, start_ns: int, listener: GeneratorListener
    ) -> GeneratorReport:
        """Sends the plan open-loop from ``start_ns``; returns when every request has finished."""

    def stop(self, reason: str, *, cancel_in_flight: bool = False) -> None:
        """Sends nothing more (the rest of the plan finishes as not_sent); in-flight requests finish,
        or are cut short when ``cancel_in_flight``."""

    def live(self) -> LiveCounters: ...


class RecordSink(Protocol):
    def add(self, record: RequestRecord) -> None:
        """Buffers one finished request; must not block (it is called on the generator's hot path)."""

    async def flush(self) -> None:
        """Persists what was buffered."""


@dataclass(frozen=True, kw_only=True)
class FaultEvent:
    """A fault switched on or off, at run-relative time: the fault band a report draws."""

    phase: int
    fault: FaultSpec
    action: str  # "on" or "off"
    at_ns: int  # an injector stamps ``Clock.now_ns()``; the runner makes it relative to the run's start
    ok: bool
    detail: str = ""


class FaultInjector(Protocol):
    async def check(self) -> None:
        """Raises ``FaultInjectionFailed`` when faults cannot be applied (before any load is sent)."""

    async def apply(self, phase: int, faults: Sequence[FaultSpec]) -> list[FaultEvent]: ...

    async def remove(self, phase: int) -> list[FaultEvent]:
        """Removes the faults of ``phase``; must be safe to call when none are active."""

    async def remove_all(self) -> list[FaultEvent]:
        """Removes every fault this injector applied; called in ``finally``, shielded from cancellation."""


@dataclass(frozen=True, kw_only=True)
class Progress:
    """One live progress line."""

    elapsed_s: float
    total_s: float
    phase: str
    role: str
    offered_per_s: float
    on_time_ratio: float | None  # over the last few seconds of finished requests
    tokens_per_s: float
    in_flight: int


class ProgressObserver(Protocol):
    def progress(self, progress: Progress) -> None: ...

    def note(self, message: str) -> None: ...
