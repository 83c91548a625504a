"""The worker processes of one run or sweep: started once, told apart, kept alive by a heartbeat, ended.

A pool lives as long as what owns it (a run, or a whole sweep whose steps reuse it: a step does not pay a
second of start-up per worker). Its workers start at the first preflight, once the coordinator's own client
has settled the prompts they must all send; from then on the pool beats every ``BEAT_INTERVAL_S`` until it
is closed, so a worker waiting between a sweep's steps does not take the quiet for a lost coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import structlog

from cliffwatch.adapters.distributed.spec import BEAT_INTERVAL_S, WorkerSpec, this_boot
from cliffwatch.adapters.distributed.wire import WireBroken, pack, receive
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.errors import WorkersFailed
from cliffwatch.domain.ports import Clock
from cliffwatch.domain.traffic.clock_agreement import SAME_CLOCK, ClockAgreement, ClockSample, agreement
from cliffwatch.domain.traffic.rate_limit import RateLimit
from cliffwatch.domain.workload.prompt_sizing import PromptSizing

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 120.0  # a worker imports, loads a tokenizer or dataset, opens its client: then it is ready
END_TIMEOUT_S = 30.0  # once its stream is closed, a worker has this long to exit before it is killed
WORKER_MODULE = "cliffwatch.adapters.distributed.worker_process"
CLOCK_ROUNDS = 8  # round trips to a worker on another machine; the shortest one measures its clock


class WorkerProcess(Protocol):
    """The process behind a worker, however it was started (``spawn_worker`` here, a Ray actor elsewhere)."""

    def gone(self) -> bool:
        """It has ended (nothing reads its stream between runs, so this is how a death between them shows)."""
        ...

    async def ended(self, timeout_s: float) -> str | None:
        """How it ended (``exit code -9``), waiting up to ``timeout_s``; None: it is still running."""
        ...

    async def kill(self) -> None:
        """Ends it now, and waits until it has."""
        ...


class LocalProcess:
    """A worker process this one started."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    def gone(self) -> bool:
        return self.process.returncode is not None

    async def ended(self, timeout_s: float) -> str | None:
        try:
            async with asyncio.timeout(timeout_s):
                return f"exit code {await self.process.wait()}"
        except TimeoutError:
            return None

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        await self.process.wait()


@dataclass(kw_only=True)
class GeneratorWorker:
    """A worker process as its coordinator sees it: its stream both ways, where it runs, its clock against the
    coordinator's, and why it ended if it did."""

    index: int
    process: WorkerProcess
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    remote: bool = False  # placed by a cluster (Ray): it names the node it runs on
    pid: int | None = None  # as it said when it was ready
    niceness: int | None = None  # the nice value it sends at, as it said when it was ready
    node: str | None = None  # the node it runs on (a remote worker's)
    clock: ClockAgreement = SAME_CLOCK
    failure: str | None = None  # it died, failed or fenced itself: it sends nothing more, in any later step

    def send(self, message: tuple[Any, ...]) -> None:
        if self.failure is None and not self.writer.is_closing():
            self.writer.write(pack(message))

    async def drain(self) -> None:
        if self.failure is None and not self.writer.is_closing():
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()

    async def lost(self, error: Exception) -> str:
        """Marks it gone (its stream ended or broke) and says why: how it ended once it has."""
        how = await self.process.ended(2.0)  # the stream ends just before the process does
        self.failure = f"died ({how})" if how is not None else f"failed ({error})"
        log.error("generator worker lost", worker=self.index + 1, node=self.node, reason=self.failure)
        return self.failure


class Launcher(Protocol):
    """Starts a pool's workers and hands each its spec: processes on this machine, or Ray actors."""

    async def launch(self, specs: list[WorkerSpec]) -> list[GeneratorWorker]: ...

    async def close(self) -> None:
        """Frees what the workers held (their processes are ended by the pool first)."""
        ...


class LocalLauncher:
    """Worker processes on this machine, children of this one."""

    async def launch(self, specs: list[WorkerSpec]) -> list[GeneratorWorker]:
        workers: list[GeneratorWorker] = []
        try:
            for spec in specs:
                workers.append(await spawn_worker(spec))
        except BaseException:
            for worker in workers:
                worker.writer.close()
                await worker.process.kill()
            raise
        return workers

    async def close(self) -> None:
        return None


class WorkerPool:
    """The workers sending for one run or sweep, one for each spec ``specs`` gives. ``executor``: the
    coordinator's own client, which makes the preflight (and settles the prompts), never the load; ``specs``
    makes each worker's spec from it."""

    def __init__(
        self,
        executor: HttpExecutor,
        specs: Callable[[HttpExecutor], list[WorkerSpec]],
        *,
        cap: RateLimit | None = None,
        launcher: Launcher | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.executor = executor
        self.specs = specs
        self.cap = cap  # the run's whole attempt cap (each worker holds its share)
        self.launcher: Launcher = launcher or LocalLauncher()
        self.clock = clock or MonotonicClock()  # the run's: the one its start is given in
        self.workers: list[GeneratorWorker] = []
        self._beats: asyncio.Task[None] | None = None

    async def __aenter__(self) -> WorkerPool:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(w.pid for w in self.workers if w.pid is not None)

    async def preflight(self) -> PromptSizing:
        """The coordinator's preflight; the workers start after the first, with the prompts it settled."""
        sizing = await self.executor.preflight()
        await self.start()
        return sizing

    async def start(self) -> None:
        """Starts the workers (once) and waits until each is ready; raises ``WorkersFailed`` saying why not.
        Started, it finds those that died since their last run (nobody reads a stream between runs)."""
        if self.workers:
            for worker in self.workers:
                if worker.failure is None and (worker.writer.is_closing() or worker.process.gone()):
                    await worker.lost(WireBroken("its stream ended between runs"))
            return
        try:
            self.workers = await self.launcher.launch(self.specs(self.executor))
            for worker in self.workers:
                await _ready(worker)
            for worker in self.workers:
                if not worker.clock.same_clock:
                    worker.clock = await self.agree_clock(worker)
        except BaseException:
            await self.close()
            raise
        self._beats = asyncio.create_task(self._beat())

    async def close(self) -> None:
        """Every worker told there is nothing more (its stream closed) and gone: given ``END_TIMEOUT_S`` to
        finish on its own, then killed."""
        if self._beats is not None:
            self._beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beats
        for worker in self.workers:
            if not worker.writer.is_closing():
                worker.writer.close()
        for worker in self.workers:
            if await worker.process.ended(END_TIMEOUT_S) is None:
                log.warning("generator worker did not exit: killed", worker=worker.index + 1, node=worker.node)
                await worker.process.kill()
        await self.launcher.close()

    async def agree_clock(self, worker: GeneratorWorker) -> ClockAgreement:
        """The worker's clock against the run's (``agree_clock``)."""
        return await agree_clock(worker, self.clock)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(BEAT_INTERVAL_S)
            for worker in self.workers:
                worker.send(("beat",))


async def spawn_worker(spec: WorkerSpec) -> GeneratorWorker:
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
    worker = GeneratorWorker(index=spec.index, process=LocalProcess(process), reader=reader, writer=writer)
    await hand_spec(worker, spec)
    return worker


async def hand_spec(worker: GeneratorWorker, spec: WorkerSpec) -> None:
    """Sends a started worker its spec; one that cannot travel ends the worker and fails the run before any load."""
    try:
        worker.send(("spec", spec))
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        worker.writer.close()
        await worker.process.kill()
        raise WorkersFailed(f"the run's set-up cannot be handed to a worker process: {exc}") from exc


async def agree_clock(worker: GeneratorWorker, clock: Clock) -> ClockAgreement:
    """The worker's clock against ``clock`` by ``CLOCK_ROUNDS`` round trips (``domain.traffic.clock_agreement``); only
    while nothing else reads its stream (before its first run, or after it said it was done)."""
    samples = []
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            for _ in range(CLOCK_ROUNDS):
                sent_ns = clock.now_ns()
                worker.send(("ping", sent_ns))
                await worker.drain()
                while (message := await receive(worker.reader))[0] != "pong" or message[1] != sent_ns:
                    pass  # something it sent before it read the ping: not the answer
                received_ns = clock.now_ns()
                samples.append(ClockSample(
                    sent_ns=sent_ns, their_ns=message[2], received_ns=received_ns,
                    our_wall_ns=time.time_ns() - (received_ns - sent_ns) // 2, their_wall_ns=message[3],
                ))  # fmt: skip
    except TimeoutError as exc:
        raise WorkersFailed(f"worker {worker.index + 1} did not answer its clock check") from exc
    except (WireBroken, ConnectionError) as exc:
        raise WorkersFailed(f"worker {worker.index + 1} {await worker.lost(exc)} during its clock check") from exc
    return agreement(samples)


async def _ready(worker: GeneratorWorker) -> None:
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            message = await receive(worker.reader)
    except TimeoutError as exc:
        raise WorkersFailed(f"worker {worker.index + 1} was not ready within {START_TIMEOUT_S:g}s") from exc
    except WireBroken as exc:
        reason = await worker.lost(exc)
        raise WorkersFailed(f"worker {worker.index + 1} {reason} before it was ready") from exc
    if message[0] == "failed":
        raise WorkersFailed(f"worker {worker.index + 1}: {message[1]}")
    if message[0] != "ready":
        raise WorkersFailed(f"worker {worker.index + 1} said {message[0]!r} instead of ready")
    if len(message) != 5:  # a worker of another cliffwatch version (a Ray node not upgraded with this one)
        raise WorkersFailed(f"worker {worker.index + 1} said ready in {len(message)} fields, not 5: another version?")
    _, worker.pid, boot, node, worker.niceness = message
    if worker.remote:
        worker.node = node
    if boot is None or boot != this_boot():  # another machine (or one that cannot tell): its own clock
        worker.clock = ClockAgreement(same_clock=False)  # measured by the pool once every worker is ready
