"""A worker's first words: ``ready`` with its pid, boot, node and the priority it sends at; a worker that
speaks another version of the protocol is refused before any load."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from cliffwatch.adapters.distributed.pool import GeneratorWorker, WorkerProcess, _ready
from cliffwatch.adapters.distributed.spec import this_boot
from cliffwatch.adapters.distributed.wire import pack
from cliffwatch.domain.errors import WorkersFailed


def saying(*message: Any) -> GeneratorWorker:
    reader = asyncio.StreamReader()
    reader.feed_data(pack(message))
    reader.feed_eof()
    return GeneratorWorker(
        index=1, process=cast(WorkerProcess, None), reader=reader, writer=cast(asyncio.StreamWriter, None)
    )


async def test_a_ready_worker_says_its_pid_and_the_priority_it_sends_at() -> None:
    worker = saying("ready", 4242, this_boot(), "here", 15)
    await _ready(worker)
    assert (worker.pid, worker.niceness) == (4242, 15)
    assert worker.clock.same_clock  # the same boot: the same monotonic clock


async def test_a_worker_of_another_version_is_refused_before_any_load() -> None:
    with pytest.raises(WorkersFailed, match="worker 2 said ready in 4 fields, not 5"):
        await _ready(saying("ready", 4242, this_boot(), "here"))
