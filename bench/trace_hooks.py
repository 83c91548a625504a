"""What aiohttp's trace hooks cost a request: a bare ``session.get`` loop with cliffwatch's trace config
(``adapters/loadgen/attempt_trace.py``, the hooks that tell an attempt that never left the client from the
target's timeout) and without any, in alternating rounds, against ``bench/arrivals_server`` (Go, pinned to
core 1, answering after 1 ms) — CPU of this process per request. It pins itself to core 0 (on a machine of
two cores or more): run it alone. Reported in docs/performance.md.

    .venv/bin/python bench/trace_hooks.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import aiohttp

from arrivals import arrivals_server
from cliffwatch.adapters.loadgen.attempt_trace import AttemptTrace, attempt_trace_config

REQUESTS = 6_000  # a round
CONCURRENCY = 60
ROUNDS = 6  # each way, the order alternating
CLIENT_CORE = 0


async def cpu_per_request_us(url: str, traced: bool) -> float:
    configs = [attempt_trace_config()] if traced else []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200), trace_configs=configs) as session:

        async def fetch(count: int) -> None:
            for _ in range(count):
                context = {"trace_request_ctx": AttemptTrace()} if traced else {}
                async with session.get(url, **context) as response:
                    await response.read()

        await asyncio.gather(*[fetch(REQUESTS // CONCURRENCY) for _ in range(3)])  # connections opened, warm
        began = time.process_time()
        await asyncio.gather(*[fetch(REQUESTS // CONCURRENCY) for _ in range(CONCURRENCY)])
        return (time.process_time() - began) / REQUESTS * 1e6


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {CLIENT_CORE})  # the server takes core 1 (``arrivals.pinned``)
    measured: dict[bool, list[float]] = {True: [], False: []}
    with arrivals_server(1.0) as server:
        for round_ in range(ROUNDS):
            for traced in (True, False) if round_ % 2 == 0 else (False, True):
                measured[traced].append(asyncio.run(cpu_per_request_us(f"{server.base_url}/load", traced)))
    for traced, figures in measured.items():
        name = "with cliffwatch's trace hooks" if traced else "without trace hooks"
        print(f"{name:>30}: median {statistics.median(figures):6.1f} µs of CPU a request "
              f"(rounds: {', '.join(f'{f:.0f}' for f in figures)})")  # fmt: skip


if __name__ == "__main__":
    main()
