"""Does aiohttp's ``read_bufsize`` matter for how cliffwatch reads streams (vllm-project/vllm#39963)?

A loopback aiohttp server sends 32 concurrent SSE streams of forty 200-KB events; the client reads them the way
``HttpExecutor`` does (``iter_any``), with the default 64-KB buffer and with 4 MB, twice each (the first pass
warms up). Reported in docs/performance.md.

    .venv/bin/python bench/read_buffer.py
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

EVENT = b'data: {"x":"' + b"a" * 200_000 + b'"}\n\n'
EVENTS = 40
STREAMS = 32


async def stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(EVENTS):
        await response.write(EVENT)
    await response.write(b"data: [DONE]\n\n")
    return response


async def read_all(session: aiohttp.ClientSession, url: str) -> int:
    received = 0
    async with session.get(url) as response:
        async for data in response.content.iter_any():
            received += len(data)
    return received


async def main() -> None:
    app = web.Application()
    app.router.add_get("/s", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        for bufsize in (2**16, 2**22, 2**16, 2**22):
            async with aiohttp.ClientSession(read_bufsize=bufsize) as session:
                began = time.perf_counter()
                sizes = await asyncio.gather(*[read_all(session, f"http://127.0.0.1:{port}/s") for _ in range(STREAMS)])
                took = time.perf_counter() - began
            print(f"read_bufsize {bufsize:>9,}: {STREAMS} streams of {EVENTS * len(EVENT) / 1e6:.1f} MB in "
                  f"{took:.2f} s, {sum(sizes) / took / 1e6:,.0f} MB/s")  # fmt: skip
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
