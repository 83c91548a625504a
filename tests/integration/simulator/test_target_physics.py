"""Batching physics seen by real clients: step times, throughput against concurrency, and queueing.

Wall-clock assertions have generous margins: the server can never be faster than its model, but a busy
2-core machine can make it slower.
"""

from __future__ import annotations

import asyncio
import time

from cliffwatch.domain.scenario.target_model import TargetModel


def chat(words: int, max_tokens: int) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": "w " * words}], "max_tokens": max_tokens}


async def test_a_lone_request_takes_its_prefill_plus_max_tokens_single_sequence_steps(start_target) -> None:
    model = TargetModel(decode_base_ms=10.0, decode_per_seq_ms=1.5, prefill_base_ms=4.0, prefill_per_token_ms=0.5)
    target = await start_target(model)
    result = await target.stream("/v1/chat/completions", chat(words=40, max_tokens=20))
    expected_s = (model.prefill_ms(40) + 20 * model.step_ms(1)) / 1000  # 0.254 s
    expected_ttft_s = (model.prefill_ms(40) + model.step_ms(1)) / 1000  # 0.0355 s
    assert result.first_token_s is not None
    assert 0.95 * expected_ttft_s <= result.first_token_s <= expected_ttft_s + 0.06
    assert 0.95 * expected_s <= result.total_s <= 1.3 * expected_s + 0.05


async def test_aggregate_tokens_per_second_grow_with_concurrency_while_each_request_slows(start_target) -> None:
    model = TargetModel(max_batch=8, decode_base_ms=10.0, decode_per_seq_ms=2.0, prefill_base_ms=0.0)
    target = await start_target(model)

    async def measure(concurrency: int) -> tuple[float, float]:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(target.stream("/v1/completions", {"prompt": "x", "max_tokens": 30}) for _ in range(concurrency))
        )
        elapsed = time.perf_counter() - started
        per_request = [29 / (r.total_s - (r.first_token_s or 0.0)) for r in results]
        return concurrency * 30 / elapsed, sum(per_request) / len(per_request)

    alone_total, alone_each = await measure(1)
    crowd_total, crowd_each = await measure(6)
    # Model: 83 tokens/s alone; with 6 sequences 273 tokens/s in all but 45 tokens/s each.
    assert crowd_total > 2.0 * alone_total
    assert crowd_each < 0.75 * alone_each
    assert alone_each <= 1000 / model.step_ms(1) * 1.05


async def test_requests_beyond_max_batch_wait_for_a_slot_and_the_batch_never_exceeds_it(start_target) -> None:
    model = TargetModel(max_batch=2, decode_base_ms=10.0, decode_per_seq_ms=0.0, prefill_base_ms=0.0)
    target = await start_target(model)
    largest_batch = 0
    largest_queue = 0
    sampling = True

    async def sample() -> None:
        nonlocal largest_batch, largest_queue
        while sampling:
            stats = target.engine.stats()
            largest_batch = max(largest_batch, stats.running)
            largest_queue = max(largest_queue, stats.waiting)
            await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample())
    results = await asyncio.gather(
        *(target.stream("/v1/completions", {"prompt": "x", "max_tokens": 15}) for _ in range(5))
    )
    sampling = False
    await sampler
    ttfts = sorted(r.first_token_s or 0.0 for r in results)
    # Two start at once (one 10 ms step to the first token); the rest wait for a whole 150 ms request
    # to finish, the last for two (margins allow for sends spread out by a busy machine).
    assert ttfts[1] < 0.08
    assert all(t > 0.1 for t in ttfts[2:])
    assert ttfts[4] > 0.25
    assert largest_batch == 2
    assert largest_queue >= 3
