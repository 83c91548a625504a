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
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import structlog

from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.loadgen.workers.spec import BEAT_INTERVAL_S, WorkerSpec
from cliffwatch.adapters.loadgen.workers.wire import WireBroken, pack, receive
from cliffwatch.domain.errors import WorkersFailed
from cliffwatch.domain.prompt_sizing import PromptSizing
from cliffwatch.domain.rate_limit import RateLimit

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 120.0  # a worker imports, loads a tokenizer or dataset, opens its client: then it is ready
END_TIMEOUT_S = 30.0  # once its stream is closed, a worker has this long to exit before it is killed
WORKER_MODULE = "cliffwatch.adapters.loadgen.workers.worker_process"


@dataclass(kw_only=True)
class Worker:
    """A worker process as its coordinator sees it: its stream both ways, and why it ended if it did."""

    index: int
    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    failure: str | None = None  # it died, failed or fenced itself: it sends nothing more, in any later step

    def send(self, message: tuple[Any, ...]) -> None:
        if self.failure is None and not self.writer.is_closing():
            self.writer.write(pack(message))

    async def drain(self) -> None:
        if self.failure is None and not self.writer.is_closing():
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()

    async def lost(self, error: Exception) -> str:
        """Marks it gone (its stream ended or broke) and says why: its exit code once it has exited."""
        code = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):  # the stream ends just before the process does
                code = await self.process.wait()
        self.failure = f"died (exit code {code})" if code is not None else f"failed ({error})"
        log.error("generator worker lost", worker=self.index + 1, reason=self.failure)
        return self.failure


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
    ) -> None:
        self.executor = executor
        self.specs = specs
        self.cap = cap  # the run's whole attempt cap (each worker holds its share)
        self.workers: list[Worker] = []
        self._beats: asyncio.Task[None] | None = None

    async def __aenter__(self) -> WorkerPool:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(w.process.pid for w in self.workers)

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
                if worker.failure is None and (worker.writer.is_closing() or worker.process.returncode is not None):
                    await worker.lost(WireBroken("its stream ended between runs"))
            return
        try:
            for spec in self.specs(self.executor):
                self.workers.append(await spawn_worker(spec))
            for worker in self.workers:
                await _ready(worker)
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
            try:
                async with asyncio.timeout(END_TIMEOUT_S):
                    await worker.process.wait()
            except TimeoutError:
                log.warning("generator worker did not exit: killed", worker=worker.index + 1)
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
                await worker.process.wait()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(BEAT_INTERVAL_S)
            for worker in self.workers:
                worker.send(("beat",))


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
    try:
        worker.send(("spec", spec))
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        writer.close()
        process.kill()
        await process.wait()
        raise WorkersFailed(f"the run's set-up cannot be handed to a worker process: {exc}") from exc
    return worker


async def _ready(worker: Worker) -> None:
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
