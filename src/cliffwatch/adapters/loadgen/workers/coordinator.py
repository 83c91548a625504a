"""The ``LoadGenerator`` of a run with ``client.workers``: worker processes send, this process coordinates.

The coordinator keeps what must be one for the run: the clock (every worker sends from the same
``start_ns`` on the machine's monotonic clock), the plan (dealt round-robin, ``domain.shards``, shipped about
``LOOKAHEAD_S`` ahead of its time), stops (every worker is told at once), live counters (summed from the
workers' batches) and the records (each worker's, in order, handed to the run's listener as they arrive, so
phases, abort guards, progress, aggregation and the store work as with one process). Faults, leases and the
store stay with the run, which owns this generator.

A worker that dies (or fails, or fences itself) takes its share with it: every request it was given and did
not report, and every later one dealt to it, is ``not_sent`` with the reason, and the verdict says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import structlog

from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.loadgen.workers.spec import BEAT_INTERVAL_S, WorkerSpec
from cliffwatch.adapters.loadgen.workers.wire import WireBroken, pack, plan_row, planned, receive, recorded
from cliffwatch.domain.errors import WorkersFailed
from cliffwatch.domain.generator_health import (
    GeneratorLimits,
    GeneratorMeasures,
    GeneratorReport,
    WorkerShare,
    judge_measures,
)
from cliffwatch.domain.outcomes import NS_PER_S
from cliffwatch.domain.plan import PlannedRequest
from cliffwatch.domain.ports import Clock, GeneratorListener, LiveCounters
from cliffwatch.domain.prompt_sizing import PromptSizing
from cliffwatch.domain.rate_limit import RateLimit
from cliffwatch.domain.shards import lost_reason, merged_measures

log = structlog.get_logger(__name__)

LOOKAHEAD_S = 1.0  # the plan reaches a worker this far ahead of its time
BATCH_ROWS = 256  # planned requests shipped in one message at most
START_TIMEOUT_S = 120.0  # a worker imports, loads a tokenizer or dataset, opens its client: then it is ready
END_TIMEOUT_S = 30.0  # after its last record, a worker has this long to exit before it is killed
WORKER_MODULE = "cliffwatch.adapters.loadgen.workers.worker_process"


@dataclass(kw_only=True)
class Worker:
    """A worker process as its coordinator sees it: its stream, what it was given and what it reported."""

    index: int
    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    open: dict[int, PlannedRequest] = field(default_factory=dict)  # given or started, not yet reported
    planned: int = 0
    finished: int = 0
    live: tuple[int, int, float] = (0, 0, 0.0)
    measures: GeneratorMeasures | None = None
    failure: str | None = None
    lost: int = 0

    @property
    def gone(self) -> bool:
        return self.failure is not None or self.writer.is_closing()

    def send(self, message: tuple[Any, ...]) -> None:
        if not self.gone:
            self.writer.write(pack(message))


class ShardedGenerator:
    """Implements ``LoadGenerator`` over ``count`` worker processes. ``executor`` is the coordinator's own
    client: it makes the preflight (and settles the prompts), never the load; ``specs`` gives each worker's
    spec from it. Use as an async context manager: leaving it ends every worker still running."""

    def __init__(
        self,
        executor: HttpExecutor,
        clock: Clock,
        specs: Callable[[HttpExecutor], list[WorkerSpec]],
        *,
        limits: GeneratorLimits | None = None,
        cap: RateLimit | None = None,
    ) -> None:
        self.executor = executor
        self.clock = clock
        self.specs = specs
        self.limits = limits or GeneratorLimits()
        self.cap = cap
        self._workers: list[Worker] = []
        self._stop: tuple[str, bool] | None = None
        self._stopped = asyncio.Event()

    async def __aenter__(self) -> ShardedGenerator:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._end_all()

    async def preflight(self) -> PromptSizing:
        sizing = await self.executor.preflight()
        if not self._workers:
            await self._start(self.specs(self.executor))
        return sizing

    @property
    def worker_pids(self) -> tuple[int, ...]:
        return tuple(w.process.pid for w in self._workers)

    def live(self) -> LiveCounters:
        return LiveCounters(
            dispatched=sum(w.live[0] for w in self._workers),
            in_flight=sum(w.live[1] for w in self._workers),
            tokens=sum(w.live[2] for w in self._workers),
        )

    def stop(self, reason: str, *, cancel_in_flight: bool = False) -> None:
        if self._stop is None or (cancel_in_flight and not self._stop[1]):
            self._stop = (reason if self._stop is None else self._stop[0], cancel_in_flight)
            self._stopped.set()
            for worker in self._workers:
                worker.send(("stop", self._stop[0], cancel_in_flight))

    async def run(
        self, plan: Iterable[PlannedRequest], *, start_ns: int, listener: GeneratorListener
    ) -> GeneratorReport:
        if not self._workers:
            await self._start(self.specs(self.executor))
        for worker in self._workers:
            worker.send(("go", start_ns))
        readers = [asyncio.create_task(self._read(w, listener)) for w in self._workers]
        beats = asyncio.create_task(self._beat())
        try:
            await self._deal(plan, start_ns, listener)
            await asyncio.gather(*readers)
        finally:
            beats.cancel()
            for task in readers:
                task.cancel()
            await asyncio.gather(beats, *readers, return_exceptions=True)
        await self._end_all()
        measures = merged_measures([w.measures for w in self._workers if w.measures is not None])
        shares = tuple(self._share(w) for w in self._workers)
        return judge_measures(measures, limits=self.limits, cap_limit=self.cap, workers=shares)

    async def _start(self, specs: list[WorkerSpec]) -> None:
        try:
            for spec in specs:
                self._workers.append(await spawn_worker(spec))
            for worker in self._workers:
                await self._ready(worker)
        except BaseException:
            await self._end_all()
            raise

    async def _ready(self, worker: Worker) -> None:
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                message = await receive(worker.reader)
        except TimeoutError as exc:
            raise WorkersFailed(f"worker {worker.index + 1} was not ready within {START_TIMEOUT_S:g}s") from exc
        except WireBroken as exc:
            code = await _exit_code(worker.process)
            raise WorkersFailed(f"worker {worker.index + 1} exited (code {code}) before it was ready") from exc
        if message[0] == "failed":
            raise WorkersFailed(f"worker {worker.index + 1}: {message[1]}")
        if message[0] != "ready":
            raise WorkersFailed(f"worker {worker.index + 1} said {message[0]!r} instead of ready")

    async def _deal(self, plan: Iterable[PlannedRequest], start_ns: int, listener: GeneratorListener) -> None:
        """Deals the plan round-robin, each worker's rows shipped in batches about ``LOOKAHEAD_S`` ahead."""
        workers, count = self._workers, len(self._workers)
        rows: list[list[tuple[Any, ...]]] = [[] for _ in workers]
        lookahead_ns = round(LOOKAHEAD_S * NS_PER_S)
        for number, request in enumerate(plan):
            if self._stop is not None:
                listener.finished(request.not_sent(self._stop[0]))
                continue
            worker = workers[number % count]
            if worker.failure is not None:
                worker.lost += 1
                listener.finished(request.not_sent(lost_reason(worker.index, count, worker.failure)))
                continue
            worker.open[request.id] = request
            worker.planned += 1
            rows[worker.index].append(plan_row(request))
            if len(rows[worker.index]) >= BATCH_ROWS:
                worker.send(("plan", rows[worker.index]))
                rows[worker.index] = []
            ahead_ns = start_ns + request.scheduled_ns - self.clock.now_ns() - lookahead_ns
            if ahead_ns > 0:
                self._ship(rows)
                await self._drain()
                with contextlib.suppress(TimeoutError):  # not ``wait_for``: it may swallow a cancel (3.11)
                    async with asyncio.timeout(ahead_ns / NS_PER_S):
                        await self._stopped.wait()
        self._ship(rows)
        for worker in workers:
            worker.send(("end",))
        await self._drain()

    def _ship(self, rows: list[list[tuple[Any, ...]]]) -> None:
        for worker in self._workers:
            if rows[worker.index]:
                worker.send(("plan", rows[worker.index]))
                rows[worker.index] = []

    async def _drain(self) -> None:
        for worker in self._workers:
            if not worker.gone:
                with contextlib.suppress(ConnectionError):
                    await worker.writer.drain()

    async def _read(self, worker: Worker, listener: GeneratorListener) -> None:
        """Hands a worker's records to the run as they come, until it is done or gone."""
        try:
            while True:
                message = await receive(worker.reader)
                if message[0] == "batch":
                    _, dispatched, finished, counters = message
                    for row, at_ns in dispatched:
                        request = planned(row)
                        worker.open.setdefault(request.id, request)  # a conversation's later turn
                        listener.dispatched(request, at_ns)
                    for row in finished:
                        record = recorded(row)
                        worker.open.pop(record.id, None)
                        worker.finished += 1
                        listener.finished(record)
                    if counters is not None:
                        worker.live = counters
                elif message[0] == "done":
                    worker.measures = message[1]
                    return
                elif message[0] == "failed":
                    raise WireBroken(str(message[1]))
        except (WireBroken, ConnectionError) as exc:
            code = await _exit_code(worker.process)
            worker.failure = f"died (exit code {code})" if code is not None else f"failed ({exc})"
            log.error("generator worker lost", worker=worker.index + 1, reason=worker.failure)
            reason = lost_reason(worker.index, len(self._workers), worker.failure)
            for request in list(worker.open.values()):
                listener.finished(request.not_sent(reason))
            worker.lost += len(worker.open)
            worker.open.clear()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(BEAT_INTERVAL_S)
            for worker in self._workers:
                worker.send(("beat",))

    def _share(self, worker: Worker) -> WorkerShare:
        m = worker.measures
        return WorkerShare(
            index=worker.index, pid=worker.process.pid, planned=worker.planned, dispatched=worker.live[0],
            finished=worker.finished, lost=worker.lost, cpu_busy=None if m is None else m.cpu_busy,
            max_stall_ms=None if m is None else m.max_stall_ms,
            gc_max_pause_ms=None if m is None or m.collector is None else m.collector.max_pause_ms,
            failure=worker.failure,
        )  # fmt: skip

    async def _end_all(self) -> None:
        """Every worker closed and gone: given ``END_TIMEOUT_S`` to finish on its own, then killed."""
        for worker in self._workers:
            if not worker.writer.is_closing():
                worker.writer.close()
        for worker in self._workers:
            try:
                async with asyncio.timeout(END_TIMEOUT_S):
                    await worker.process.wait()
            except TimeoutError:
                log.warning("generator worker did not exit: killed", worker=worker.index + 1)
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
                await worker.process.wait()


async def spawn_worker(spec: WorkerSpec) -> Worker:
    """A worker process started and sent its spec (not yet ready: it says so when it is)."""
    mine, theirs = socket.socketpair()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", WORKER_MODULE, str(theirs.fileno()), pass_fds=(theirs.fileno(),),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, env={**os.environ},
        )  # fmt: skip
    except OSError as exc:
        mine.close()
        raise WorkersFailed(f"could not start {sys.executable}: {exc}") from exc
    finally:
        theirs.close()
    reader, writer = await asyncio.open_connection(sock=mine)
    worker = Worker(index=spec.index, process=process, reader=reader, writer=writer)
    worker.send(("spec", spec))
    return worker


async def _exit_code(process: asyncio.subprocess.Process) -> int | None:
    """The worker's exit code once it has gone (a moment's wait: the stream ends just before the process)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(2.0):
            return await process.wait()
    return None
