"""The capacity truth test's bounded server behaves as its numbers say: ``maxconn`` at once, a queue, 503 after it."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from haproxy_testkit import bounded_server


async def timed_gets(url: str, count: int) -> list[tuple[int, float]]:
    """``count`` simultaneous GETs: each one's status and seconds from the common start."""
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()

        async def one() -> tuple[int, float]:
            async with session.get(url) as response:
                await response.read()
                return response.status, time.monotonic() - started

        return sorted(await asyncio.gather(*(one() for _ in range(count))), key=lambda r: r[1])


async def test_at_most_maxconn_requests_reach_the_backend_and_the_rest_queue_in_haproxy() -> None:
    with bounded_server(maxconn=2, service_s=0.2, queue_timeout_s=2.0) as server:
        results = await timed_gets(server.url, 4)

    assert [status for status, _ in results] == [200] * 4
    first, second = [s for _, s in results[:2]], [s for _, s in results[2:]]
    assert all(0.19 <= s < 0.3 for s in first), results
    assert all(0.39 <= s < 0.55 for s in second), results


async def test_requests_queued_longer_than_the_queue_timeout_get_a_slow_503() -> None:
    with bounded_server(maxconn=2, service_s=0.2, queue_timeout_s=0.3) as server:
        results = await timed_gets(server.url, 10)

    # Two served at once, two more when they finish (after 0.2 s of queueing); six time out in the queue.
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] * 4 + [503] * 6, results
    refused = [s for status, s in results if status == 503]
    assert all(0.29 <= s < 0.45 for s in refused), results
    assert server.capacity_rps == 10
