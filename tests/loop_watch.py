"""How long the event loop was blocked: a probe that sleeps a little, again and again, and records how late
it woke. Any callback that holds the loop (a parser, a regex, a sync call) delays the probe's wake by as
long as it held it, so the longest lateness is the longest block.

Use it around a block of code, or around requests to an in-process aiohttp test server (which shares the
test's loop, so its handlers' blocks are measured too); ``slowest_answer_while`` also asks a cheap endpoint
(``/healthz``) all along, to show the service kept answering::

    async with watch_loop() as watch:
        reply, slowest_health_ms = await slowest_answer_while(client, "/healthz", client.post(...))
    assert watch.longest_ms < 100, watch.report()

An app served from a thread of its own (a synchronous client such as schemathesis's in the test's thread) is
watched with ``with watching(loop) as watch: ...`` from the test's thread.

A full collection of Python's garbage collector holds the loop too, for a time that grows with every
object in the process: ``cliffwatch serve`` freezes what it built at start-up out of the collector's
sight (``gc.freeze``), and ``frozen_heap`` does the same for a test, so a test measures its own requests'
blocks, not a walk over pytest's and every earlier test's objects (200 ms with a million of them).

A probe wake can also be late because the machine is busy (other processes on its cores), so a test
asserts a bound well above the noise (100 ms, against a probe that sees ~1 ms on an idle machine), and
``report`` names the worst wakes to tell one long block from a busy machine.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
PROBE_INTERVAL_S = 0.002


@dataclass
class LoopWatch:
    """What the probe saw: every wake's lateness, in seconds, and when (``perf_counter``) each one came."""

    interval_s: float = PROBE_INTERVAL_S
    wakes: int = 0
    lateness_s: list[tuple[float, float]] = field(default_factory=list)  # (lateness, woke at), worst kept
    longest_s: float = 0.0

    @property
    def longest_ms(self) -> float:
        return self.longest_s * 1000

    def record(self, late_s: float, at: float) -> None:
        self.wakes += 1
        self.longest_s = max(self.longest_s, late_s)
        if late_s >= 0.01:  # only blocks worth naming; the rest is the probe's own jitter
            self.lateness_s.append((late_s, at))
            self.lateness_s.sort(reverse=True)
            del self.lateness_s[5:]

    def report(self) -> str:
        worst = ", ".join(f"{late * 1000:.1f} ms" for late, _ in self.lateness_s) or "none over 10 ms"
        return f"longest loop block {self.longest_ms:.1f} ms over {self.wakes} probe wakes; worst: {worst}"


async def _probe(watch: LoopWatch, stop: asyncio.Event) -> None:
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(watch.interval_s)
        woke = time.perf_counter()
        watch.record(max(0.0, woke - before - watch.interval_s), woke)


@asynccontextmanager
async def watch_loop(interval_s: float = PROBE_INTERVAL_S) -> AsyncIterator[LoopWatch]:
    """Measures the running loop's longest block during the ``async with`` block.

    The probe runs one more round after the block, so a block that ended just before the exit is counted.
    """
    watch = LoopWatch(interval_s=interval_s)
    stop = asyncio.Event()
    task = asyncio.create_task(_probe(watch, stop))
    await asyncio.sleep(0)  # the probe takes its first reading before the block starts
    try:
        yield watch
    finally:
        stop.set()
        await task


async def slowest_answer_while(client: Any, path: str, work: Awaitable[T], *, every_s: float = 0.01) -> tuple[T, float]:
    """Runs ``work`` while ``client`` (an aiohttp client, e.g. a ``TestClient``) GETs ``path`` (``/healthz``)
    every ``every_s``; returns what ``work`` gave and the slowest of those answers, in ms. Each answer must be
    a 200: the service keeps answering while it is fed hostile input."""
    done = asyncio.Event()
    slowest = 0.0

    async def probe() -> None:
        nonlocal slowest
        while not done.is_set():
            started = time.perf_counter()
            async with client.get(path) as response:
                assert response.status == 200, (path, response.status)
            slowest = max(slowest, (time.perf_counter() - started) * 1000)
            await asyncio.sleep(every_s)

    prober = asyncio.create_task(probe())
    try:
        result = await work
    finally:
        done.set()
        await prober
    return result, slowest


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Every object that exists now is frozen out of the garbage collector's sight for the block, as
    ``cliffwatch serve`` freezes its start-up objects once it serves."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def watching(loop: asyncio.AbstractEventLoop, interval_s: float = PROBE_INTERVAL_S) -> Iterator[LoopWatch]:
    """The same probe on a loop running in another thread (an app served from a thread of its own, as for
    schemathesis), started and stopped from the calling thread."""
    watch = LoopWatch(interval_s=interval_s)
    stop = asyncio.Event()  # bound to ``loop`` when the probe first waits on it there
    probe = asyncio.run_coroutine_threadsafe(_probe(watch, stop), loop)
    try:
        yield watch
    finally:
        loop.call_soon_threadsafe(stop.set)
        probe.result(timeout=10)
