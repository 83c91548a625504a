"""In-memory implementations of the ports: for tests, dry runs, and runs that keep no records."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_S, RequestRecord
from cliffwatch.domain.ports import Clock, GeneratorListener, LedgerEntry, LiveCounters, Progress, ToxiproxyApi
from cliffwatch.domain.scenario.faults import FaultEvent, FaultSpec, ProxyState, ToxicState
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, GeneratorReport, judge_generator
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing


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


class NoServerWatcher:
    """The watcher of a run whose scenario scrapes no server metrics (``target.metrics`` absent)."""

    async def check(self) -> str | None:
        return None

    def start(self, origin_ns: int) -> None:
        return None

    async def stop(self) -> ServerView | None:
        return None

    async def backlog(self) -> float | None:
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
        *,
        tokens: float = 0.0,
    ) -> None:
        self.clock = clock
        self.respond = respond
        self.limits = limits or GeneratorLimits()
        self.stopped: str | None = None
        self.preflights = 0
        self.tokens = tokens  # output tokens answered so far (from ``tokens``: what an earlier run left counted)
        self._dispatched = 0
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def preflight(self) -> PromptSizing:
        self.preflights += 1
        return WORDS_SIZING

    def stop(self, reason: str, *, cancel_in_flight: bool = False) -> None:
        self.stopped = self.stopped or reason
        if cancel_in_flight:
            for task in self._tasks:
                task.cancel()

    def live(self) -> LiveCounters:
        return LiveCounters(dispatched=self._dispatched, in_flight=self._in_flight, tokens=self.tokens)

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
            if not cut_short and record.final is not None:
                self.tokens += record.final.output_tokens
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


class InMemoryFaultLedger:
    """The ``FaultLedger`` twin: the events a ledger file would hold, in a list.

    A run is running from ``run_started`` until ``run_finished``, unless its id is put in ``dead``: its owner
    crashed, as a test declares.
    """

    def __init__(self) -> None:
        self.dead: set[str] = set()
        self.events: list[tuple[str, str, LedgerEntry | None]] = []  # (event, run id, entry), oldest first
        self.compactions = 0

    async def run_started(self, run_id: str) -> None:
        self.events.append(("run_started", run_id, None))

    async def run_finished(self, run_id: str) -> None:
        self.events.append(("run_finished", run_id, None))

    async def planned(self, entry: LedgerEntry) -> None:
        self.events.append(("planned", entry.run_id, entry))

    async def removed(self, entry: LedgerEntry) -> None:
        self.events.append(("removed", entry.run_id, entry))

    async def outstanding(self) -> list[LedgerEntry]:
        return list(self._outstanding().values())

    async def is_running(self, run_id: str) -> bool:
        return self._running(run_id)

    async def compact(self) -> None:
        keep = {run_id for run_id, _ in self._outstanding()} | {r for _, r, _ in self.events if self._running(r)}
        self.events = [event for event in self.events if event[1] in keep]
        self.compactions += 1

    def _outstanding(self) -> dict[tuple[str, tuple[str, str, str | None]], LedgerEntry]:
        entries: dict[tuple[str, tuple[str, str, str | None]], LedgerEntry] = {}
        for kind, run_id, entry in self.events:
            if entry is not None and kind == "planned":
                entries[(run_id, entry.key)] = entry
            elif entry is not None:
                entries.pop((run_id, entry.key), None)
        return entries

    def _running(self, run_id: str) -> bool:
        lifecycle = [kind for kind, r, entry in self.events if r == run_id and entry is None]
        return bool(lifecycle) and lifecycle[-1] == "run_started" and run_id not in self.dead


class InMemoryToxiproxy:
    """The ``ToxiproxyApi`` twin: proxies and their toxics in a dict, answering as Toxiproxy does.

    ``down`` (a reason) makes every call fail as an unreachable server does, without an HTTP status;
    ``fail`` may fail any one call: given (call, proxy, toxic) it returns the error to raise, or None.
    ``calls`` lists the changes asked for that reached the server, in order, whether or not they changed anything.
    """

    def __init__(self, url: str = "http://127.0.0.1:8474") -> None:
        self.url = url
        self.proxies: dict[str, ProxyState] = {}
        self.down: str | None = None
        self.fail: Callable[[str, str, str | None], FaultInjectionFailed | None] | None = None
        self.calls: list[tuple[str, str, str | None]] = []
        self._next_port = 20000

    async def version(self) -> str:
        self._call("version", "-")
        return "2.12.0"

    async def get_proxy(self, name: str) -> ProxyState | None:
        self._call("get_proxy", name)
        return self.proxies.get(name)

    async def create_proxy(self, *, name: str, listen: str, upstream: str) -> ProxyState:
        self._call("create_proxy", name, change=True)
        if name in self.proxies:
            raise FaultInjectionFailed(proxy=name, toxic=None, reason="proxy already exists", status=409)
        host, _, port = listen.rpartition(":")
        if port == "0":  # Toxiproxy binds a free port and reports it
            self._next_port += 1
            listen = f"{host}:{self._next_port}"
        self.proxies[name] = ProxyState(name=name, listen=listen, upstream=upstream, enabled=True)
        return self.proxies[name]

    async def delete_proxy(self, name: str) -> bool:
        self._call("delete_proxy", name, change=True)
        return self.proxies.pop(name, None) is not None

    async def add_toxic(self, proxy: str, toxic: ToxicState) -> ToxicState:
        self._call("add_toxic", proxy, toxic.name, change=True)
        state = self._proxy(proxy, toxic.name)
        if any(t.name == toxic.name for t in state.toxics):
            raise FaultInjectionFailed(proxy=proxy, toxic=toxic.name, reason="toxic already exists", status=409)
        self.proxies[proxy] = replace(state, toxics=(*state.toxics, toxic))
        return toxic

    async def remove_toxic(self, proxy: str, name: str) -> bool:
        self._call("remove_toxic", proxy, name, change=True)
        state = self.proxies.get(proxy)
        if state is None or all(t.name != name for t in state.toxics):
            return False  # with its proxy gone, the toxic is gone too
        self.proxies[proxy] = replace(state, toxics=tuple(t for t in state.toxics if t.name != name))
        return True

    async def toxics(self, proxy: str) -> list[ToxicState]:
        self._call("toxics", proxy)
        return list(self._proxy(proxy, None).toxics)

    def _proxy(self, proxy: str, toxic: str | None) -> ProxyState:
        state = self.proxies.get(proxy)
        if state is None:
            raise FaultInjectionFailed(proxy=proxy, toxic=toxic, reason="proxy not found", status=404)
        return state

    def _call(self, call: str, proxy: str, toxic: str | None = None, *, change: bool = False) -> None:
        if self.down is not None:
            raise FaultInjectionFailed(proxy=proxy, toxic=toxic, reason=self.down)
        error = self.fail(call, proxy, toxic) if self.fail is not None else None
        if error is not None:
            raise error
        if change:
            self.calls.append((call, proxy, toxic))


def in_memory_connect(*servers: InMemoryToxiproxy) -> Callable[[str], AbstractAsyncContextManager[ToxiproxyApi]]:
    """A ``connect`` for the reconciler over in-memory servers, by URL; an unknown URL fails as a refused
    connection does."""
    by_url = {server.url: server for server in servers}

    @asynccontextmanager
    async def connect(url: str) -> AsyncIterator[ToxiproxyApi]:
        server = by_url.get(url)
        if server is None:
            raise FaultInjectionFailed(proxy="-", toxic=None, reason=f"cannot connect to {url}: connection refused")
        yield server

    return connect


__all__ += ["InMemoryFaultLedger", "InMemoryToxiproxy", "in_memory_connect"]


class ManualClock:
    """A UTC wall clock that moves only when a test moves it: the ``now`` callable services take.

    ``clock()`` (and ``wall()``) give the current aware UTC time; ``advance`` moves it on, ``set`` anywhere
    (back too, as a host's clock can jump).
    """

    def __init__(self, start: datetime) -> None:
        self._now = _aware_utc(start)

    def __call__(self) -> datetime:
        return self._now

    def wall(self) -> datetime:
        return self._now

    def advance(self, by: timedelta | float) -> datetime:
        """Moves the clock on by ``by`` (seconds, or a timedelta); returns the new time."""
        self._now += by if isinstance(by, timedelta) else timedelta(seconds=by)
        return self._now

    def set(self, at: datetime) -> None:
        self._now = _aware_utc(at)


def _aware_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"a clock needs an aware datetime, got {moment!r}")
    return moment.astimezone(UTC)


__all__ += ["ManualClock"]
