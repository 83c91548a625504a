"""Admission modes over HTTP: an unbounded queue, a queue limit answering 429, a queue deadline answering 503."""

from __future__ import annotations

import asyncio
import time

from cliffwatch.domain.scenario.target_model import Admission, TargetModel

SLOW = {"max_batch": 1, "decode_base_ms": 10.0, "decode_per_seq_ms": 0.0, "prefill_base_ms": 0.0}


async def post(target, max_tokens: int, *, stream: bool = False) -> tuple[int, dict[str, str], object]:
    body = {"prompt": "hello", "max_tokens": max_tokens, "stream": stream}
    async with target.client.post("/v1/completions", json=body) as response:
        payload = await response.json() if response.content_type == "application/json" else await response.text()
        return response.status, dict(response.headers), payload


async def test_without_admission_control_every_request_queues_and_is_served(start_target) -> None:
    target = await start_target(TargetModel(**SLOW, admission=Admission.NONE, max_queue=1))
    results = await asyncio.gather(*(post(target, 3) for _ in range(8)))
    assert [status for status, _, _ in results] == [200] * 8
    metrics = await target.metrics()
    assert metrics['cliffwatch_target_requests_total{result="completed"}'] == 8


async def test_queue_limit_answers_429_with_retry_after_once_the_queue_is_full(start_target) -> None:
    model = TargetModel(**SLOW, admission=Admission.QUEUE_LIMIT, max_queue=2, retry_after_s=1.2)
    target = await start_target(model)
    engine = target.engine
    running = asyncio.create_task(post(target, 20))
    await target.wait_until(lambda: engine.stats().running == 1, what="the first request to run")
    queued = [asyncio.create_task(post(target, 2)) for _ in range(2)]
    await target.wait_until(lambda: engine.stats().waiting == 2, what="two queued requests")
    for stream in (False, True):
        status, headers, body = await post(target, 2, stream=stream)
        assert status == 429
        assert headers["Retry-After"] == "2"
        assert isinstance(body, dict)
        assert body["error"]["code"] == "queue_full"
    # The requests that fitted under the limit are served.
    assert [status for status, _, _ in await asyncio.gather(running, *queued)] == [200, 200, 200]
    metrics = await target.metrics()
    assert metrics['cliffwatch_target_requests_total{result="rejected_429"}'] == 2
    assert metrics['cliffwatch_target_requests_total{result="completed"}'] == 3


async def test_deadline_answers_503_to_a_request_that_waited_too_long_without_waiting_for_the_step(
    start_target,
) -> None:
    model = TargetModel(**SLOW, admission=Admission.DEADLINE, max_queue_wait_ms=100.0)
    target = await start_target(model)
    engine = target.engine
    running = asyncio.create_task(post(target, 150))  # 1.5 s of decoding
    await target.wait_until(lambda: engine.stats().running == 1, what="the first request to run")
    started = time.perf_counter()
    status, _, body = await post(target, 2, stream=True)
    waited = time.perf_counter() - started
    assert status == 503
    assert isinstance(body, dict)
    assert body["error"]["code"] == "queue_timeout"
    # Dropped when its 100 ms ran out, not when the running request finished 1.5 s later (the margin is
    # for a loaded machine).
    assert 0.095 <= waited < 1.0
    assert (await running)[0] == 200
    # A request that finds a free slot is served.
    assert (await post(target, 2))[0] == 200
    metrics = await target.metrics()
    assert metrics['cliffwatch_target_requests_total{result="dropped_deadline_503"}'] == 1
    assert metrics['cliffwatch_target_requests_total{result="completed"}'] == 2


async def test_interrupt_when_full_ends_the_running_stream_with_done_and_no_finish_reason(start_target) -> None:
    """The hollow answer of llama-cpp-python's interrupt_requests (tests/fixtures/sse, the interrupted stream):
    the role chunk, the tokens so far, then [DONE] with no finish_reason; the newcomer is served whole."""
    target = await start_target(TargetModel(**SLOW, interrupt_when_full=True))
    engine = target.engine
    body = {"model": "sim-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
    first = asyncio.create_task(target.stream("/v1/chat/completions", body))
    await target.wait_until(lambda: engine.stats().generation_tokens_total >= 2, what="the first stream's tokens")
    second = await target.stream("/v1/chat/completions", {**body, "max_tokens": 3})
    cut = await first
    assert cut.status == 200
    assert cut.events[-1] == "[DONE]"
    assert cut.chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in cut.chunks)
    assert 2 <= len(cut.chunks) - 1 < 50
    assert second.chunks[-1]["choices"][0]["finish_reason"] == "length"
    metrics = await target.metrics()
    assert metrics['cliffwatch_target_requests_total{result="interrupted"}'] == 1
