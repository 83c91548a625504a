"""A generator worker: a process that sends its share of one run's plan and streams the records back.

Started by the coordinator (``coordinator.py``) as ``python -m cliffwatch.adapters.distributed.worker_process
FD``, FD its end of a socket pair. It never outlives the coordinator: the end of that stream, or no beat for
``beat_timeout_s``, fences it (it stops sending, cuts what is in flight short and exits); on Linux the kernel
also kills it when its parent dies (``PR_SET_PDEATHSIG``), so even a coordinator killed outright leaves no
worker sending.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import structlog

from cliffwatch.adapters.distributed.spec import WorkerSpec, this_boot
from cliffwatch.adapters.distributed.wire import WireBroken, pack, plan_row, planned, receive, record_row
from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.adapters.runtime.logs import configure_logging, remember_secrets
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.traffic.rate_limit import TokenBucket

log = structlog.get_logger(__name__)

FLUSH_S = 0.05  # records reach the coordinator within this (its abort guards and progress read them)
FLUSH_RECORDS = 500  # or as soon as this many are waiting
FENCED = "fenced: the coordinator was lost"
_PR_SET_PDEATHSIG = 1


class _PlanFeed:
    """The worker's share of the plan as it arrives (rows in batches, ahead of their time), as an async
    iterator for the generator; it ends at the coordinator's ``end`` (or when the worker is fenced)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[list[tuple[Any, ...]] | None] = asyncio.Queue()

    def put(self, rows: list[tuple[Any, ...]]) -> None:
        self._queue.put_nowait(rows)

    def end(self) -> None:
        self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[Iterator[PlannedRequest]]:
        while (rows := await self._queue.get()) is not None:
            yield map(planned, rows)


class _Outbox:
    """The ``GeneratorListener`` of a worker: what happened, batched for the coordinator."""

    def __init__(self, writer: asyncio.StreamWriter, generator: OpenLoopGenerator) -> None:
        self.writer = writer
        self.generator = generator
        self._dispatched: list[tuple[int | tuple[Any, ...], int]] = []
        self._finished: list[tuple[Any, ...]] = []

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        # The coordinator dealt the request and knows it by id; a conversation's later turn was made here.
        self._dispatched.append((request.id, at_ns) if request.turn <= 1 else (plan_row(request), at_ns))

    def finished(self, record: RequestRecord) -> None:
        self._finished.append(record_row(record))
        if len(self._finished) >= FLUSH_RECORDS:
            self.flush()

    def flush(self) -> None:
        if self.writer.is_closing():
            return
        live = self.generator.live()
        counters = (live.dispatched, live.in_flight, live.tokens)
        self.writer.write(pack(("batch", self._dispatched, self._finished, counters)))
        self._dispatched, self._finished = [], []

    async def keep_flushing(self) -> None:
        # Plain sleeps: a ``wait_for`` here could swallow the cancellation that ends this task (3.11).
        while True:
            await asyncio.sleep(FLUSH_S)
            self.flush()
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()


async def serve(fd: int, node: str | None = None) -> int:
    """Serves a coordinator for its stream's life (its spec, then every run it starts, until the stream ends).
    ``fd``: the socket pair's end ``spawn_worker`` passed, or the connection a Ray actor opened to the
    coordinator and handed over (``node``: the actor's)."""
    reader, writer = await asyncio.open_connection(sock=socket.socket(fileno=fd))
    first = await receive(reader)
    if first[0] != "spec" or not isinstance(first[1], WorkerSpec):
        raise WireBroken(f"expected the worker's spec, got {first[0]!r}")
    spec: WorkerSpec = first[1]
    configure_logging(level=spec.log_level, fmt="json", rules=spec.redaction)
    remember_secrets(spec.secrets)
    niceness = settle_niceness(spec.niceness)
    cap = None if spec.cap is None else TokenBucket(spec.cap, MonotonicClock().now_ns())
    destinations = Destinations.pinned_to(spec.allowlist, spec.pins)
    options = dict(spec.executor)
    try:
        client = HttpExecutor(spec.scenario, spec.base_url, destinations=destinations, cap=cap, **options)
        async with client as executor:
            writer.write(pack(("ready", os.getpid(), this_boot(), node or socket.gethostname(), niceness)))
            await writer.drain()
            session = _Session(spec, reader, writer, executor, cap)
            tasks = [asyncio.create_task(session.listen()), asyncio.create_task(session.watch_beats())]
            try:
                await _send_shares(session, writer)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            return 0
    except Exception as exc:  # set-up failed: the coordinator says why and loses nothing it had not dealt
        with contextlib.suppress(Exception):
            writer.write(pack(("failed", f"{type(exc).__name__}: {exc}")))
            await writer.drain()
        raise


def settle_niceness(run: int) -> int:
    """Takes the run's scheduling priority (``run``, its nice value) back when this process was started at a
    lower one — Ray starts its workers at nice 15 (``RAY_worker_niceness``), and a generator at 15 yields its
    core to anything else on the node, the target included, and falls behind — and returns the nice value it
    sends at. Raising a priority may need a privilege the process lacks: it then stays, and says so."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if own <= run:
        return own
    try:
        os.setpriority(os.PRIO_PROCESS, 0, run)
    except OSError as exc:
        log.warning("generator worker runs at a lower priority than its run", nice=own, run_nice=run,
                    error=str(exc), fix="start the Ray cluster with RAY_worker_niceness=0")  # fmt: skip
        return own
    return os.getpriority(os.PRIO_PROCESS, 0)


class _Session:
    """The worker's end of the stream for its whole life: runs start on ``go``; the run in progress takes
    the plan, the end of it and stops; a stream that ends, or a coordinator silent for ``beat_timeout_s``,
    fences the worker (the run in progress is cut short, no other starts)."""

    def __init__(
        self,
        spec: WorkerSpec,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        executor: HttpExecutor,
        cap: TokenBucket | None,
    ) -> None:
        self.spec = spec
        self.reader = reader
        self.writer = writer
        self.executor = executor
        self.cap = cap
        self.clock = MonotonicClock()
        # Each run is made as its ``go`` is read, so the plan and stops that follow it always find it.
        self.runs: asyncio.Queue[tuple[int, OpenLoopGenerator, _PlanFeed] | None] = asyncio.Queue()
        self.run: tuple[OpenLoopGenerator, _PlanFeed] | None = None
        self.heard = time.monotonic()
        self.fenced = False

    async def listen(self) -> None:
        try:
            while True:
                message = await receive(self.reader)
                self.heard = time.monotonic()
                kind = message[0]
                if kind == "go":
                    self._start(*message[1:])
                elif kind == "ping":  # the coordinator measures this machine's clock against its own
                    self.writer.write(pack(("pong", message[1], self.clock.now_ns(), time.time_ns())))
                elif self.run is not None:
                    generator, feed = self.run
                    if kind == "plan":
                        feed.put(message[1])
                    elif kind == "end":
                        feed.end()
                    elif kind == "stop":
                        generator.stop(message[1], cancel_in_flight=bool(message[2]))
        except (WireBroken, ConnectionError):
            self.lost()

    async def watch_beats(self) -> None:
        while True:
            await asyncio.sleep(self.spec.beat_timeout_s / 4)
            if time.monotonic() - self.heard > self.spec.beat_timeout_s:
                self.lost()
                return

    def lost(self) -> None:
        """The coordinator is gone (or silent): stop sending, now."""
        if self.fenced:
            return
        self.fenced = True
        if self.run is not None:
            generator, feed = self.run
            generator.stop(FENCED, cancel_in_flight=True)
            feed.end()
        self.runs.put_nowait(None)

    def _start(self, start_ns: int, scenario: Scenario, next_prompts: bool) -> None:
        if next_prompts:
            self.executor.next_prompts()
        spec = self.spec
        generator = OpenLoopGenerator(scenario, self.executor, self.clock, cap=self.cap, shares=spec.count)
        feed = _PlanFeed()
        self.run = (generator, feed)
        self.runs.put_nowait((start_ns, generator, feed))


async def _send_shares(session: _Session, writer: asyncio.StreamWriter) -> None:
    """Sends each run's share as the coordinator starts it, until the stream ends (or the worker is fenced)."""
    while (run := await session.runs.get()) is not None:
        start_ns, generator, feed = run
        outbox = _Outbox(writer, generator)
        flusher = asyncio.create_task(outbox.keep_flushing())
        try:
            measures = await generator.measure(feed, start_ns=start_ns, listener=outbox)
        finally:
            session.run = None
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
        if session.fenced:
            return  # nobody is listening (or nobody who answers): waiting on the stream could last forever
        outbox.flush()
        if not writer.is_closing():
            writer.write(pack(("done", measures)))
            with contextlib.suppress(ConnectionError):
                await writer.drain()


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def main() -> int:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle: it stops us
    return asyncio.run(serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))


if __name__ == "__main__":
    sys.exit(main())
