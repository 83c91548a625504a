"""``serve()``: it reports the URL it really bound, serves until cancelled, and shuts down promptly."""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp
import pytest

from cliffwatch.domain.errors import BuiltinTargetFailed
from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.simulator.runner import base_url, serve

MODEL = TargetModel(model="sim", max_batch=1, decode_base_ms=10.0, prefill_base_ms=0.0)


async def start(model: TargetModel = MODEL, *, port: int = 0) -> tuple[asyncio.Task[None], str]:
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(model, host="127.0.0.1", port=port, on_ready=ready.set_result))
    done, _ = await asyncio.wait({task, ready}, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises whatever made serve() fail
    return task, ready.result()


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def until_waiting(session: aiohttp.ClientSession, url: str, *, within_s: float = 5.0) -> None:
    """Until the engine holds a waiting request (its /metrics gauge), polled: a fixed sleep was too short
    for a busy machine to have sent it."""
    deadline = time.perf_counter() + within_s
    while time.perf_counter() < deadline:
        async with session.get(f"{url}/metrics") as response:
            if "cliffwatch_target_waiting_requests 1" in await response.text():
                return
        await asyncio.sleep(0.01)
    pytest.fail(f"no request was waiting within {within_s} s")


async def test_port_zero_reports_the_real_url_and_serves_until_cancelled() -> None:
    task, url = await start()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
    assert not url.endswith(":0")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/health") as response:
            assert response.status == 200
        async with session.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}) as response:
            assert (await response.json())["usage"]["completion_tokens"] == 2
        await stop(task)
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"{url}/health")


async def test_shutting_down_ends_queued_and_streaming_requests_instead_of_draining_them() -> None:
    task, url = await start()
    async with aiohttp.ClientSession() as session:
        streaming = await session.post(
            f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 1000, "stream": True}
        )
        await streaming.content.readline()
        queued = asyncio.create_task(session.post(f"{url}/v1/completions", json={"prompt": "y", "max_tokens": 5}))
        await until_waiting(session, url)  # stopped before the server had it, it was only a reset connection
        started = time.perf_counter()
        await stop(task)
        assert time.perf_counter() - started < 1.5
        rest = await streaming.content.read()
        assert b"[DONE]" not in rest
        response = await queued
        assert response.status == 503
        assert (await response.json())["error"]["code"] == "shutting_down"


async def test_a_port_already_in_use_is_reported_as_a_failed_start() -> None:
    task, url = await start()
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(BuiltinTargetFailed):
        await start(port=port)
    await stop(task)


@pytest.mark.parametrize(
    ("address", "url"),
    [(("127.0.0.1", 8080), "http://127.0.0.1:8080"), (("::1", 9000, 0, 0), "http://[::1]:9000")],
)
def test_base_url_brackets_ipv6_hosts(address: tuple[object, ...], url: str) -> None:
    assert base_url(address) == url
