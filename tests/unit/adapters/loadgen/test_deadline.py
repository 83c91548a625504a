"""``Deadline`` decides as ``asyncio.timeout`` does: its own cancellation becomes TimeoutError, no other."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager

import pytest

from cliffwatch.adapters.loadgen.deadline import Deadline

Limit = AbstractContextManager[object] | AbstractAsyncContextManager[object]


async def test_time_up_is_a_timeout_error_and_the_task_is_left_uncancelled() -> None:
    started = time.perf_counter()
    with pytest.raises(TimeoutError), Deadline(0.05) as deadline:
        await asyncio.sleep(5)
    assert deadline.expired
    assert 0.04 <= time.perf_counter() - started < 1.0
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # the task goes on: nothing more is pending against it


async def test_work_that_ends_in_time_is_untouched_and_its_timer_gone() -> None:
    with Deadline(5) as deadline:
        await asyncio.sleep(0.01)
    assert not deadline.expired
    await asyncio.sleep(0.02)  # a timer left behind would cancel this task here


async def test_zero_or_less_expires_at_the_first_await() -> None:
    with pytest.raises(TimeoutError), Deadline(0):
        await asyncio.sleep(1)


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def guarded() -> None:
        with Deadline(5):
            await asyncio.sleep(5)

    task = asyncio.create_task(guarded())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_outside_cancellation_racing_the_deadline_is_not_swallowed() -> None:
    async def guarded(
        limit: Callable[[], AbstractContextManager[object] | AbstractAsyncContextManager[object]],
    ) -> None:
        made = limit()
        if isinstance(made, AbstractAsyncContextManager):
            async with made:
                await asyncio.sleep(5)
        else:
            with made:
                await asyncio.sleep(5)

    for limit in (lambda: asyncio.timeout(0), lambda: Deadline(0)):  # the same answer as asyncio's own
        task = asyncio.create_task(guarded(limit))
        await asyncio.sleep(0)  # it entered its limit, whose expiry is queued behind this task's turn
        task.cancel()  # someone else asks first
        with pytest.raises(asyncio.CancelledError):
            await task


def test_outside_a_task_it_refuses() -> None:
    with pytest.raises(RuntimeError):  # no task, and here no loop either
        Deadline(1).__enter__()
