"""The asyncio side of the simulated engine: the step loop, its clock, and each request's token feed.

:class:`SimulatedEngine` owns a :class:`~cliffwatch.simulator.batching.BatchCore` and runs its steps back to back
against an absolute schedule, sleeping on an injectable :class:`EngineClock` (the event loop's in
production, :class:`VirtualClock` in tests). Handlers talk to it through :meth:`SimulatedEngine.submit`, which
returns a :class:`Generation` to await tokens from, and :meth:`SimulatedEngine.cancel`, which they call when their
client has gone (or unconditionally in a ``finally``: it is a no-op once the sequence has ended).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

import structlog

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.simulator.batching import BatchCore, EngineStats
from cliffwatch.simulator.sequences import EngineRequest, Result, SeqState

log = structlog.get_logger(__name__)

# How far the loop may fall behind its schedule and still catch up with back-to-back steps. Small lags
# (timer overshoot, a busy event loop) are caught up so throughput matches the model; after a longer
# stall the schedule restarts from now instead of replaying a burst of instant steps.
MAX_CATCH_UP_S = 0.25


class EngineClock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""

    async def sleep(self, delay: float) -> None: ...


class LoopClock:
    """The event loop's own clock, so steps line up with asyncio's timers."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(delay)


class VirtualClock:
    """Time that advances only when the engine sleeps: steps run back to back as fast as the loop can.

    Every sleep still yields to the event loop once, so consumers see each step's tokens before the next.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.time = start

    def now(self) -> float:
        return self.time

    async def sleep(self, delay: float) -> None:
        self.time += max(delay, 0.0)
        await asyncio.sleep(0)


class QueueDeadlineExceeded(CliffwatchError):
    """The request waited longer than ``max_queue_wait_ms`` for a batch slot (admission ``deadline``)."""

    def __init__(self, *, waited_s: float, limit_s: float) -> None:
        self.waited_s = waited_s
        self.limit_s = limit_s
        super().__init__(f"request waited {waited_s:.3f} s for a batch slot, the limit is {limit_s:.3f} s")


class GenerationAborted(CliffwatchError):
    """The sequence was cancelled or the engine shut down before it finished."""

    def __init__(self, request_id: int, result: Result) -> None:
        self.request_id = request_id
        self.result = result
        super().__init__(f"sequence {request_id} ended without completing: {result.value}")


class GenerationInterrupted(CliffwatchError):
    """The stream was ended early to make room for a waiting request (``interrupt_when_full``)."""

    def __init__(self, request_id: int) -> None:
        self.request_id = request_id
        super().__init__(f"sequence {request_id} was interrupted for a waiting request")


class EngineClosed(CliffwatchError):
    """The engine is shutting down and takes no new requests."""

    def __init__(self) -> None:
        super().__init__("the simulated engine is shutting down")


class Generation:
    """One request's view of its sequence: the tokens as they are produced, and how it ended.

    A streaming generation is woken at every step that gives it a token; a non-streaming one only
    when it ends, so waiting for whole responses costs nothing per step.
    """

    def __init__(self, request: EngineRequest, *, streaming: bool, max_queue_wait_s: float) -> None:
        self.request = request
        self.streaming = streaming
        self._max_queue_wait_s = max_queue_wait_s
        self._cursor = 0
        self._changed = asyncio.Event()

    @property
    def id(self) -> int:
        return self.request.id

    def _notify(self) -> None:
        self._changed.set()

    async def wait_tokens(self) -> Sequence[str]:
        """The tokens produced since the last call, waiting for at least one; empty once it completed.

        Raises ``QueueDeadlineExceeded`` if it was dropped from the queue, ``GenerationAborted`` if it
        was cancelled or the engine shut down. Tokens produced before an abort are returned first.
        """
        while True:
            request = self.request
            if self._cursor < len(request.tokens):
                new = request.tokens[self._cursor :]
                self._cursor = len(request.tokens)
                return new
            if request.state is SeqState.ENDED:
                self._raise_unless_completed()
                return ()
            self._changed.clear()
            await self._changed.wait()

    async def result(self) -> Sequence[str]:
        """Every token, once the sequence has completed; raises like :meth:`wait_tokens`."""
        while self.request.state is not SeqState.ENDED:
            self._changed.clear()
            await self._changed.wait()
        self._raise_unless_completed()
        return tuple(self.request.tokens)

    def _raise_unless_completed(self) -> None:
        request = self.request
        if request.result is Result.COMPLETED:
            return
        if request.result is Result.INTERRUPTED:
            raise GenerationInterrupted(request.id)
        if request.result is Result.DROPPED_DEADLINE_503:
            ended = request.ended_at if request.ended_at is not None else request.arrived_at
            raise QueueDeadlineExceeded(waited_s=ended - request.arrived_at, limit_s=self._max_queue_wait_s)
        raise GenerationAborted(request.id, request.result or Result.ABORTED_SHUTDOWN)


class SimulatedEngine:
    """A simulated continuous-batching engine; use as ``async with SimulatedEngine(model) as engine``."""

    def __init__(self, model: TargetModel, *, clock: EngineClock | None = None) -> None:
        self.model = model
        self.clock: EngineClock = clock if clock is not None else LoopClock()
        self._core = BatchCore(model)
        self._live: dict[int, Generation] = {}
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def __aenter__(self) -> SimulatedEngine:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the engine is already running")
        self._task = asyncio.create_task(self._run(), name="cliffwatch-target-engine")

    def close(self) -> None:
        """Refuses new requests and ends every queued or running one (their handlers get an error)."""
        if self._closed:
            return
        self._closed = True
        self._notify(self._core.abort_all(self.clock.now()))
        self._work.set()

    async def stop(self) -> None:
        """Closes the engine and waits for its step loop to finish."""
        self.close()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                # Re-raise only if *we* are being cancelled, not because we cancelled the loop.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise

    def is_closed(self) -> bool:
        # A method, not a property: mypy would otherwise keep a narrowed value across awaits.
        return self._closed

    def stats(self) -> EngineStats:
        return self._core.stats()

    def record_bad_request(self) -> None:
        self._core.record_bad_request()

    def submit(
        self,
        *,
        prompt_tokens: int,
        max_tokens: int,
        streaming: bool = True,
        priority: int = 0,
        tenant: str = "",
        blocks: tuple[int, ...] = (),
        tail: tuple[str, ...] = (),
    ) -> Generation:
        """Queues a sequence; raises ``QueueFull`` (429) or ``EngineClosed`` instead when it cannot.

        ``streaming`` False means the caller only wants :meth:`Generation.result`.
        """
        if self._closed:
            raise EngineClosed()
        request = self._core.submit(
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            now=self.clock.now(),
            streaming=streaming,
            priority=priority,
            tenant=tenant,
            blocks=blocks,
            tail=tail,
        )
        generation = Generation(request, streaming=streaming, max_queue_wait_s=self.model.max_queue_wait_ms / 1000.0)
        self._live[request.id] = generation
        self._work.set()
        return generation

    def cancel(self, generation: Generation) -> bool:
        """Aborts the sequence because its client went away; False (and no effect) if it had ended."""
        cancelled = self._core.cancel(generation.request, self.clock.now())
        if cancelled:
            self._notify([generation.request])
        return cancelled

    def _notify(self, requests: Sequence[EngineRequest]) -> None:
        for request in requests:
            generation = self._live.get(request.id)
            if generation is None:
                continue
            if request.state is SeqState.ENDED:
                del self._live[request.id]
                generation._notify()
            elif generation.streaming:
                generation._notify()

    async def _run(self) -> None:
        try:
            await self._steps()
        except Exception:
            # Without this, every handler would wait forever on a loop that no longer runs.
            log.exception("simulated engine step loop failed")
            self.close()
            raise

    async def _steps(self) -> None:
        core, clock = self._core, self.clock
        start = clock.now()
        while not self.is_closed():
            if not core.has_work:
                # Idle without polling: submit() sets the event.
                self._work.clear()
                await self._work.wait()
                start = clock.now()
                continue
            now = clock.now()
            if now - start > MAX_CATCH_UP_S:
                start = now
            step = core.begin_step(start)
            self._notify(step.dropped)
            self._notify(step.interrupted)
            if step.batch == 0:
                continue
            end = start + step.duration_s
            await self._sleep_until(end)
            if self.is_closed():
                return
            self._notify(core.end_step(end))
            # The next step starts when this one was due to end, not when we woke up: no drift.
            start = end

    async def _sleep_until(self, end: float) -> None:
        """Sleeps until ``end``, waking early to drop waiting requests exactly when their deadline passes."""
        while True:
            deadline = self._core.next_deadline()
            wake = end if deadline is None or deadline >= end else deadline
            await self.clock.sleep(wake - self.clock.now())
            if wake >= end or self.is_closed():
                return
            self._notify(self._core.expire(wake))
