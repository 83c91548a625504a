"""A run's outcomes on their way to the store: buffered, written in the background, retried through outages.

The runner hands records to the sink on the generator's hot path and asks for a flush every tick, and a
whole batch is written as soon as it is full; neither may wait for the database, or a database that stalls
(a SQLite file locked past its busy timeout, a PostgreSQL restarting) would stall the phases, the fault
switching and the abort guards with it. So ``flush`` and a full batch only wake a writer task, which writes
what was waiting then (and any whole batch filled since) in batches, in order, and keeps a batch that
failed at the head of the buffer, retrying with backoff: an outage shorter than the lease loses no outcome
(``add_outcomes`` is idempotent per request id, so a batch whose commit was answered by an error is safely
written again).

The buffer is bounded. When it would overflow the run is told once (``on_overflow``; the worker stops the
run, saying why), and records beyond the bound are counted as ``dropped`` rather than kept: the run's own
aggregates still count them, only their per-request rows are missing, and the run's end says how many.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Callable

import structlog

from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.ports import RunStore

log = structlog.get_logger(__name__)

BATCH = 100
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 2.0
OutcomeCounter = Callable[[str, Counter[str]], None]


class BufferedStoreSink:
    """Implements ``RecordSink`` over a ``RunStore``: at most ``capacity`` records wait for the database."""

    def __init__(self, store: RunStore, run_id: str, *, capacity: int, count: OutcomeCounter | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"an outcome buffer holds at least one record, got {capacity}")
        self.store = store
        self.run_id = run_id
        self.capacity = capacity
        self.count = count
        self.on_overflow: Callable[[str], None] | None = None
        self.stored = 0
        self.dropped = 0
        self.failures = 0  # batches that failed and were retried
        self.last_error: str | None = None
        self.broken: str | None = None  # why outcomes stopped being written, when it was not an outage
        self._buffer: deque[RequestRecord] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        self._overflowed = False
        self._asked = 0  # records handed over before the last flush: ``stored`` reaches it, then a part-batch waits
        self._closed = False

    @property
    def pending(self) -> int:
        """Records handed over and not yet stored."""
        return len(self._buffer)

    def add(self, record: RequestRecord) -> None:
        """Takes a record on the event loop's thread (the generator's listener calls it) and never waits."""
        if self.broken is not None:
            self.dropped += 1
            return
        if len(self._buffer) >= self.capacity:
            self.dropped += 1
            if not self._overflowed:
                self._overflowed = True
                reason = (
                    f"stopped: {len(self._buffer):,} outcomes are waiting for the database, the most the outcome "
                    f"buffer holds (CLIFFWATCH_OUTCOME_BUFFER); last error: {self.last_error or 'none'}"
                )
                log.error("outcome buffer full: stopping the run", run_id=self.run_id, reason=reason)
                if self.on_overflow is not None:
                    self.on_overflow(reason)
            return
        self._buffer.append(record)
        self._idle.clear()
        if len(self._buffer) % BATCH == 0 and not self._closed:
            # A whole batch goes now, not at the next tick: a second's outcomes kept for the tick outlived
            # the collector's young generation (10,000 objects: a RequestRecord is three), so a service run
            # at 3,000 req/s made a young collection every two seconds and promoted what it walked, where
            # `cliffwatch run` made none. Only whole batches: the transactions are as many either way.
            self._wake_writer()

    async def flush(self) -> None:
        """Wakes the writer to write everything handed over so far; returns at once, whatever the database is
        doing (see ``drain``)."""
        self._asked = self.stored + len(self._buffer)
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name=f"outcomes-{self.run_id}")
        self._wake.set()

    async def drain(self) -> None:
        """Waits until every record handed over is stored, retrying through failures for as long as it takes
        (cancel to give up)."""
        await self.flush()
        await self._idle.wait()

    async def close(self) -> None:
        """Stops the writer; records not yet stored stay in ``pending``, and a full batch no longer starts it."""
        self._closed = True
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
            self._writer = None

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._write_due(self._asked - self.stored)
            if not self._buffer:
                self._idle.set()
            if self.broken is not None:
                return

    async def _write_due(self, due: int) -> None:
        """Writes the ``due`` records that were waiting when a flush asked, in batches of ``BATCH``, and any
        whole batch that filled meanwhile (or woke it). A part-batch that arrived after the flush waits for the
        next one, or for its batch to fill: written as it came, a busy run's outcomes went in a transaction of
        a few records each, hundreds a second, and the transactions cost more than the rows."""
        delay = RETRY_FIRST_S
        while due > 0 or len(self._buffer) >= BATCH:
            batch = [self._buffer[i] for i in range(min(BATCH, len(self._buffer)))]
            try:
                await self.store.add_outcomes(self.run_id, batch)
            except StoreUnavailable as exc:
                self.failures += 1
                if self.last_error is None:
                    log.warning("could not store outcomes: keeping them and retrying", run_id=self.run_id,
                                pending=len(self._buffer), error=str(exc))  # fmt: skip
                self.last_error = str(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            except Exception as exc:  # not an outage: retrying would fail alike, so the rest stays unstored
                log.exception("storing outcomes failed: the rest of the run's outcomes are not stored",
                              run_id=self.run_id)  # fmt: skip
                self.broken = f"{type(exc).__name__}: {exc}"
                self._idle.set()
                return
            for _ in batch:
                self._buffer.popleft()
            due -= len(batch)
            self.stored += len(batch)
            if self.failures and self.last_error is not None:
                log.info("outcomes stored again", run_id=self.run_id, pending=len(self._buffer))
                self.last_error = None
            delay = RETRY_FIRST_S
            if self.count is not None:
                self.count(self.run_id, Counter(r.outcome.value for r in batch))
            await asyncio.sleep(0)  # the generator's turn before the next batch, whatever the store awaited
