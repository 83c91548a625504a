"""The floor of a Python load generator on this machine: what asyncio alone costs a request, nothing measured.

Not a peer and not a product: the least a CPython asyncio process can do and still send an open-loop,
constant-rate load over keep-alive HTTP/1.1 — a timer to each send time, a task per request, one write on an
``asyncio.Protocol``, the answer parsed by ``httptools`` (llhttp, as cliffwatch's lean transport parses it), its
latency from the scheduled time kept in a list. No outcome classes, no retries, no histograms, no time series,
no record, no caps, no allowlist. ``bench/peers/compare.py`` runs it as the tool ``asyncio-floor`` so a sitting
shows how much of cliffwatch's CPU a request is Python's and asyncio's own, and how much is what cliffwatch
measures.

    .venv/bin/python bench/peers/floor_client.py URL RATE DURATION_S   # prints {"p99_ms", "errors", "sent"}
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from urllib.parse import urlsplit

import httptools


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[int] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_result(0)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(self.parser.get_status_code())


async def _attack(url: str, rate: float, duration_s: float) -> dict[str, object]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: */*\r\n\r\n".encode()
    loop = asyncio.get_running_loop()
    idle: list[_Connection] = []
    latencies: list[int] = []
    errors = 0

    async def one(due: int) -> None:
        nonlocal errors
        connection = idle.pop() if idle else None
        if connection is None:
            _, connection = await loop.create_connection(_Connection, host, port)
        assert connection.transport is not None
        connection.done = loop.create_future()
        connection.transport.write(request)
        status = await connection.done
        latencies.append(time.perf_counter_ns() - due)
        if status != 200:
            errors += 1
        if not connection.lost:
            idle.append(connection)

    tasks: set[asyncio.Task[None]] = set()
    count = round(rate * duration_s)
    start = time.perf_counter_ns() + 50_000_000
    for i in range(count):
        due = start + round(i * 1e9 / rate)
        while (wait := due - time.perf_counter_ns()) > 0:
            woken: asyncio.Future[None] = loop.create_future()
            loop.call_later(wait / 1e9, woken.set_result, None)
            await woken
        task = asyncio.create_task(one(due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    while tasks:
        await asyncio.wait(list(tasks))
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] / 1e6 if latencies else None
    return {"p99_ms": p99, "errors": errors + count - len(latencies), "sent": count}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_attack(sys.argv[1], float(sys.argv[2]), float(sys.argv[3])))))
