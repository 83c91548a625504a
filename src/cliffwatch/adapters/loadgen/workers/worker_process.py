"""A generator worker: a process that sends its share of one run's plan and streams the records back.

Started by the coordinator (``coordinator.py``) as ``python -m cliffwatch.adapters.loadgen.workers.worker_process
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
from collections.abc import AsyncIterator
from typing import Any

from cliffwatch.adapters.clock import MonotonicClock
from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.loadgen.workers.spec import WorkerSpec
from cliffwatch.adapters.loadgen.workers.wire import WireBroken, pack, plan_row, planned, receive, record_row
from cliffwatch.adapters.logs import configure_logging, remember_secrets
from cliffwatch.adapters.target_access import Destinations
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.plan import PlannedRequest
from cliffwatch.domain.rate_limit import TokenBucket

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

    async def __aiter__(self) -> AsyncIterator[PlannedRequest]:
        while (rows := await self._queue.get()) is not None:
            for row in rows:
                yield planned(row)


class _Outbox:
    """The ``GeneratorListener`` of a worker: what happened, batched for the coordinator."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._dispatched: list[tuple[tuple[Any, ...], int]] = []
        self._finished: list[tuple[Any, ...]] = []
        self.generator: OpenLoopGenerator | None = None

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        self._dispatched.append((plan_row(request), at_ns))

    def finished(self, record: RequestRecord) -> None:
        self._finished.append(record_row(record))
        if len(self._finished) >= FLUSH_RECORDS:
            self.flush()

    def flush(self) -> None:
        if self.writer.is_closing():
            return
        live = self.generator.live() if self.generator is not None else None
        counters = None if live is None else (live.dispatched, live.in_flight, live.tokens)
        self.writer.write(pack(("batch", self._dispatched, self._finished, counters)))
        self._dispatched, self._finished = [], []

    async def keep_flushing(self) -> None:
        # Plain sleeps: a ``wait_for`` here could swallow the cancellation that ends this task (3.11).
        while True:
            await asyncio.sleep(FLUSH_S)
            self.flush()
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()


async def serve(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_connection(sock=sock)
    first = await receive(reader)
    if first[0] != "spec" or not isinstance(first[1], WorkerSpec):
        raise WireBroken(f"expected the worker's spec, got {first[0]!r}")
    spec: WorkerSpec = first[1]
    configure_logging(level=spec.log_level, fmt="json", rules=spec.redaction)
    remember_secrets(spec.secrets)
    clock = MonotonicClock()
    cap = None if spec.cap is None else TokenBucket(spec.cap, clock.now_ns())
    destinations = Destinations.pinned_to(spec.allowlist, spec.pins)
    try:
        async with HttpExecutor(
            spec.scenario, spec.base_url, destinations=destinations, cap=cap, **spec.executor
        ) as executor:
            generator = OpenLoopGenerator(spec.scenario, executor, clock, spec.limits, cap=cap, shares=spec.count)
            writer.write(pack(("ready", os.getpid())))
            await writer.drain()
            return await _send_share(spec, generator, reader, writer)
    except Exception as exc:  # set-up failed: the coordinator says why and loses nothing it had not dealt
        with contextlib.suppress(Exception):
            writer.write(pack(("failed", f"{type(exc).__name__}: {exc}")))
            await writer.drain()
        raise


async def _send_share(
    spec: WorkerSpec, generator: OpenLoopGenerator, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> int:
    while (go := await receive(reader))[0] != "go":
        if go[0] == "stop":  # stopped before the start: the plan still comes, and is all not sent
            generator.stop(go[1], cancel_in_flight=bool(go[2]))
    feed, outbox = _PlanFeed(), _Outbox(writer)
    outbox.generator = generator
    heard = [time.monotonic()]
    fenced = asyncio.Event()

    def fence() -> None:
        fenced.set()
        generator.stop(FENCED, cancel_in_flight=True)
        feed.end()

    async def listen() -> None:
        try:
            while True:
                message = await receive(reader)
                heard[0] = time.monotonic()
                kind = message[0]
                if kind == "plan":
                    feed.put(message[1])
                elif kind == "end":
                    feed.end()
                elif kind == "stop":
                    generator.stop(message[1], cancel_in_flight=bool(message[2]))
        except (WireBroken, ConnectionError):
            fence()

    async def watch_beats() -> None:
        while True:
            await asyncio.sleep(spec.beat_timeout_s / 4)
            if time.monotonic() - heard[0] > spec.beat_timeout_s:
                fence()
                return

    tasks = [asyncio.create_task(t) for t in (listen(), watch_beats(), outbox.keep_flushing())]
    try:
        measures = await generator.measure(feed, start_ns=go[1], listener=outbox)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if fenced.is_set():
        return 0  # nobody is listening (or nobody who answers): waiting on the stream could last forever
    outbox.flush()
    if not writer.is_closing():
        writer.write(pack(("done", measures)))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
    return 0


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def main() -> int:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle: it stops us
    return asyncio.run(serve(int(sys.argv[1])))


if __name__ == "__main__":
    sys.exit(main())
