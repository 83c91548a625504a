"""The small interfaces the services are written against; adapters and in-memory twins implement them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.scenario.faults import FaultSpec, ProxyState, ToxicState
from cliffwatch.domain.security.secrets import SecretRef
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.traffic.generator_health import GeneratorReport
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.workload.prompt_sizing import PromptSizing


class Clock(Protocol):
    def now_ns(self) -> int:
        """Monotonic nanoseconds (``time.perf_counter_ns`` in production)."""

    async def sleep(self, seconds: float) -> None: ...

    def wall(self) -> datetime:
        """The current UTC wall-clock time, for timestamps people read; never for measuring."""


class PromptMaker(Protocol):
    """Makes a request's prompt of N tokens from fragments prepared ahead (the load path copies, never builds)."""

    def prepare(self, tokens: int) -> None: ...

    def fragments(self, request_id: int, tokens: int) -> tuple[bytes | memoryview, ...]: ...


class SecretResolver(Protocol):
    def resolve(self, reference: SecretRef) -> str:
        """The secret ``reference`` names, as read now; raises ``SecretUnavailable`` naming the reference and
        why (unset, not allowed, unreadable), never a value."""


class GeneratorListener(Protocol):
    def dispatched(self, request: PlannedRequest, at_ns: int) -> None: ...

    def finished(self, record: RequestRecord) -> None: ...


@dataclass(frozen=True, kw_only=True)
class LiveCounters:
    dispatched: int  # logical requests started so far
    in_flight: int  # attempts outstanding now
    tokens: float  # output tokens received so far, from every attempt


class LoadGenerator(Protocol):
    async def preflight(self) -> PromptSizing:
        """Checks the target answers at all; raises ``TargetUnreachable`` before any load is sent."""

    async def run(
        self, plan: Iterable[PlannedRequest], *, start_ns: int, listener: GeneratorListener
    ) -> GeneratorReport:
        """Sends the plan open-loop from ``start_ns``; returns when every request has finished."""

    def stop(self, reason: str, *, cancel_in_flight: bool = False) -> None:
        """Sends nothing more (the rest of the plan finishes as not_sent); in-flight requests finish,
        or are cut short when ``cancel_in_flight``."""

    def live(self) -> LiveCounters: ...


class ServerWatcher(Protocol):
    """Watches the server's own view (its Prometheus page) during a run; never fails the run."""

    async def check(self) -> str | None:
        """One look before any load: None when it worked, else why not (a note: the run goes on)."""

    def start(self, origin_ns: int) -> None:
        """Starts watching; times are counted from ``origin_ns`` on the run's clock (the run's start)."""

    async def stop(self) -> ServerView | None:
        """Stops watching; what was seen since ``start`` (None: nothing is watched)."""


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

    async def apply(self, phase: int, faults: Sequence[FaultSpec]) -> list[FaultEvent]:
        """Switches the phase's faults on, one event each; a fault that could not be applied gives an event
        with ``ok`` False (and the rest are not attempted), so the runner can abort and roll back."""

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


class ToxiproxyApi(Protocol):
    """The part of Toxiproxy's HTTP API cliffwatch uses. Every call raises ``FaultInjectionFailed`` naming
    the proxy, the toxic and the status when it cannot be done (after a bounded number of retries)."""

    url: str

    async def version(self) -> str: ...

    async def get_proxy(self, name: str) -> ProxyState | None:
        """The proxy with its toxics, or None when there is no such proxy."""

    async def create_proxy(self, *, name: str, listen: str, upstream: str) -> ProxyState: ...

    async def delete_proxy(self, name: str) -> bool:
        """Deletes the proxy (and its toxics); False when it was already gone."""

    async def add_toxic(self, proxy: str, toxic: ToxicState) -> ToxicState: ...

    async def remove_toxic(self, proxy: str, name: str) -> bool:
        """Removes the toxic; False when it was already gone (which is as good as removed)."""

    async def toxics(self, proxy: str) -> list[ToxicState]: ...


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """Something cliffwatch created on a Toxiproxy server: a toxic, or (``toxic`` None) a proxy."""

    run_id: str
    server: str  # the Toxiproxy API URL
    proxy: str
    toxic: str | None = None
    managed: bool = False  # the server was started by the run itself, so it does not outlive the run

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.server, self.proxy, self.toxic)


class FaultLedger(Protocol):
    """A durable record of every fault cliffwatch creates, so none outlives a crash unnoticed.

    An entry is recorded *before* the toxic (or proxy) is created and marked removed only once its removal
    is confirmed; a crash between the two leaves it outstanding for the reconciler.
    """

    async def run_started(self, run_id: str) -> None:
        """Marks ``run_id`` as running in this process (its owner)."""

    async def run_finished(self, run_id: str) -> None: ...

    async def planned(self, entry: LedgerEntry) -> None: ...

    async def removed(self, entry: LedgerEntry) -> None: ...

    async def outstanding(self) -> list[LedgerEntry]:
        """Entries planned and not yet confirmed removed, oldest first."""

    async def is_running(self, run_id: str) -> bool:
        """Whether the run's owner is still alive and the run has not finished."""

    async def compact(self) -> None:
        """Forgets the runs that are settled (finished, or their owner dead, with nothing outstanding);
        what ``outstanding`` and ``is_running`` answer is unchanged. The reconciler calls it after a pass."""
