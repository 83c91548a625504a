"""The ``loop_watch`` test kit measures event-loop blocks: it sees a block of the loop, and little otherwise."""

from __future__ import annotations

import asyncio
import threading
import time

from loop_watch import watch_loop, watching


def hold_loop(seconds: float) -> None:
    """What a blocking call (a parser, a regex, a synchronous client) does to the loop that makes it."""
    time.sleep(seconds)


async def test_a_block_of_the_loop_is_measured() -> None:
    """A synchronous 150 ms sleep inside the watched block is reported as a block of at least that long."""
    async with watch_loop() as watch:
        await asyncio.sleep(0.01)
        hold_loop(0.15)
    assert 145 <= watch.longest_ms < 1_000
    assert "worst: 1" in watch.report()


async def test_a_block_just_before_the_end_is_still_counted() -> None:
    """The probe takes one more reading after the block, so a block that ends the block is not missed."""
    async with watch_loop() as watch:
        hold_loop(0.12)
    assert watch.longest_ms >= 115


async def test_awaiting_without_blocking_shows_no_long_block() -> None:
    """Awaiting (timers, a thread) leaves the loop free: the probe sees only its own jitter."""
    async with watch_loop() as watch:
        await asyncio.to_thread(time.sleep, 0.1)
        await asyncio.sleep(0.05)
    assert watch.wakes > 20
    assert watch.longest_ms < 50, watch.report()


def test_a_loop_in_another_thread_is_watched_from_this_one() -> None:
    """``watching`` probes a loop served from another thread: a 150 ms block scheduled on it is seen there."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with watching(loop) as watch:
            time.sleep(0.05)
            loop.call_soon_threadsafe(hold_loop, 0.15)
            time.sleep(0.3)
        assert 145 <= watch.longest_ms < 1_000
        assert watch.wakes > 10
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
