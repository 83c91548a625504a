"""Clients that go away: queued ones cost the engine nothing, streaming ones are aborted quietly."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from aiohttp import web

from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.simulator.sequences import Result
from cliffwatch.simulator.server import ENGINE, create_app

ONE_AT_A_TIME = TargetModel(max_batch=1, decode_base_ms=10.0, decode_per_seq_ms=0.0, prefill_base_ms=0.0)
ABORTED = 'cliffwatch_target_requests_total{result="aborted_disconnect"}'


def problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]


async def test_clients_that_give_up_while_queued_are_dropped_before_costing_any_step(start_target) -> None:
    target = await start_target(ONE_AT_A_TIME)
    engine = target.engine
    first = asyncio.create_task(target.client.post("/v1/completions", json={"prompt": "a", "max_tokens": 30}))
    await target.wait_until(lambda: engine.stats().running == 1, what="the first request to run")

    queued = [
        asyncio.create_task(
            target.client.post("/v1/completions", json={"prompt": "b c", "max_tokens": 500, "stream": i % 2 == 0})
        )
        for i in range(6)
    ]
    # Give up only once all six are queued: a fixed client timeout could end one before the server saw it.
    await target.wait_until(lambda: engine.stats().waiting == 6, what="six requests to queue")
    for task in queued:
        task.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    await target.wait_until(lambda: engine.stats().waiting == 0, what="the server to notice the disconnects")
    response = await first
    assert response.status == 200
    await response.read()
    metrics = await target.metrics()
    assert metrics[ABORTED] == 6
    assert metrics['cliffwatch_target_requests_total{result="completed"}'] == 1
    # Only the first request was ever prefilled and decoded.
    assert metrics["cliffwatch_target_steps_total"] == 30
    assert metrics["cliffwatch_target_generation_tokens_total"] == 30
    assert metrics["cliffwatch_target_prompt_tokens_total"] == 1


async def test_a_client_vanishing_mid_stream_aborts_its_sequence_without_log_noise(
    start_target, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    target = await start_target(TargetModel(decode_base_ms=5.0, prefill_base_ms=0.0))
    body = {"prompt": "go", "max_tokens": 400, "stream": True}
    response = await target.client.post("/v1/completions", json=body)
    assert response.status == 200
    received = 0
    async for _ in response.content:
        received += 1
        if received == 6:  # three events: each is a data line and a blank line
            break
    response.close()
    engine = target.engine
    await target.wait_until(lambda: engine.stats().running == 0, what="the stream's sequence to end")
    metrics = await target.metrics()
    assert metrics[ABORTED] == 1
    assert 3 <= metrics["cliffwatch_target_generation_tokens_total"] < 100
    # The server keeps serving.
    after = await target.stream("/v1/completions", {"prompt": "again", "max_tokens": 3})
    assert after.events[-1] == "[DONE]"
    assert problems(caplog) == []


async def test_without_handler_cancellation_a_failed_write_aborts_the_stream_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    app = create_app(TargetModel(decode_base_ms=5.0, prefill_base_ms=0.0))
    runner = web.AppRunner(app, handler_cancellation=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        async with aiohttp.ClientSession() as session:
            body = {"prompt": "go", "max_tokens": 400, "stream": True}
            response = await session.post(f"http://{host}:{port}/v1/completions", json=body)
            await response.content.readline()
            response.close()
            engine = app[ENGINE]

            # Nothing cancels the handler here: its next write (5 ms later) finds the socket closed.
            for _ in range(1000):  # at most 5 s
                if not engine.stats().running:
                    break
                await asyncio.sleep(0.005)
            stats = engine.stats()
            assert stats.results[Result.ABORTED_DISCONNECT] == 1
            assert stats.generation_tokens_total < 100
    finally:
        await runner.cleanup()
    assert problems(caplog) == []
