"""The outcome sink writes in small batches, each its own turn of the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.ports import RunStore
from cliffwatch.services.outcome_sink import BATCH, BufferedStoreSink


class BatchLog:
    """Records each write's size and what else ran on the loop between two writes."""

    def __init__(self) -> None:
        self.events: list[str | int] = []

    async def add_outcomes(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        self.events.append(len(records))


async def test_a_seconds_worth_of_outcomes_is_written_in_batches_of_at_most_batch_with_the_loop_free_between() -> None:
    # One flush of a busy second (1,000 records at 1,000 req/s) written at once held the loop 15-75 ms in a
    # service run at 800 req/s; in batches of BATCH each write is short, and the generator runs in between.
    assert BATCH <= 100
    log = BatchLog()
    sink = BufferedStoreSink(cast(RunStore, log), "run", capacity=10_000)
    for _ in range(2 * BATCH + 30):
        sink.add(cast(Any, object()))

    async def ticker() -> None:
        for _ in range(10):
            log.events.append("tick")
            await asyncio.sleep(0)

    await asyncio.gather(sink.drain(), ticker())
    await sink.close()

    writes = [e for e in log.events if isinstance(e, int)]
    assert writes == [BATCH, BATCH, 30]
    assert sink.stored == 2 * BATCH + 30
    first, last = log.events.index(BATCH), len(log.events) - 1 - log.events[::-1].index(30)
    assert "tick" in log.events[first:last]  # the loop ran other work between the writes


class SlowStore:
    """A store whose every write takes a few turns of the loop, while a run keeps finishing requests."""

    def __init__(self, sink_of: list[BufferedStoreSink]) -> None:
        self.sizes: list[int] = []
        self.sink_of = sink_of

    async def add_outcomes(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        self.sizes.append(len(records))
        for _ in range(3):
            self.sink_of[0].add(cast(Any, object()))  # three more requests finish meanwhile
            await asyncio.sleep(0)


async def test_requests_finishing_while_a_batch_is_written_wait_for_the_next_flush_not_a_transaction_each() -> None:
    # Written as they came, a service run at 1,500 req/s stored its outcomes a few at a time, in hundreds of
    # transactions a second that cost the event loop more than the rows did.
    holder: list[BufferedStoreSink] = []
    store = SlowStore(holder)
    sink = BufferedStoreSink(cast(RunStore, store), "run", capacity=100_000)
    holder.append(sink)
    for _ in range(BATCH + 10):
        sink.add(cast(Any, object()))

    await sink.flush()
    for _ in range(50):
        await asyncio.sleep(0)
    # what waited at the flush, in two transactions (the second also takes what came during the first);
    # the three that came during the second wait for the next flush
    assert store.sizes == [BATCH, 13]
    assert sink.pending == 3

    holder.clear()
    holder.append(BufferedStoreSink(cast(RunStore, BatchLog()), "other", capacity=10))  # no more arrivals
    await sink.drain()  # the run's end: everything, however few
    await sink.close()
    assert store.sizes == [BATCH, 13, 3]
    assert sink.stored == BATCH + 16


async def test_a_full_batch_is_written_without_waiting_for_the_ticks_flush_and_a_part_batch_waits_for_it() -> None:
    # Kept until the once-a-second flush, a busy second's records outlived the collector's young generation:
    # a service run at 3,000 req/s collected every two seconds where `cliffwatch run` never did.
    log = BatchLog()
    sink = BufferedStoreSink(cast(RunStore, log), "run", capacity=10_000)
    for _ in range(2 * BATCH + 7):
        sink.add(cast(Any, object()))
        await asyncio.sleep(0)  # requests finish over several turns of the loop
    for _ in range(10):
        await asyncio.sleep(0)

    assert log.events == [BATCH, BATCH]  # no flush was asked for
    assert sink.pending == 7

    await sink.drain()
    await sink.close()
    assert log.events == [BATCH, BATCH, 7]


async def test_a_full_batch_woken_among_others_finishing_writes_whole_batches_only() -> None:
    # Requests finish several to a turn of the loop: the batch that woke the writer goes, and so does any
    # other that fills while it is written, but not the few that came with it.
    log = BatchLog()
    sink = BufferedStoreSink(cast(RunStore, log), "run", capacity=10_000)
    turns = 2 * BATCH // 3 + 1
    for _ in range(turns):
        for _ in range(3):
            sink.add(cast(Any, object()))
        await asyncio.sleep(0)
    for _ in range(10):
        await asyncio.sleep(0)

    left = 3 * turns - 2 * BATCH
    assert 0 < left < BATCH
    assert log.events == [BATCH, BATCH]
    assert sink.pending == left

    await sink.flush()
    for _ in range(10):
        await asyncio.sleep(0)
    assert log.events == [BATCH, BATCH, left]
    await sink.close()


async def test_after_close_a_full_batch_does_not_start_a_writer_again() -> None:
    log = BatchLog()
    sink = BufferedStoreSink(cast(RunStore, log), "run", capacity=10_000)
    await sink.close()
    for _ in range(BATCH):
        sink.add(cast(Any, object()))
    for _ in range(10):
        await asyncio.sleep(0)
    assert log.events == []
    assert sink.pending == BATCH
