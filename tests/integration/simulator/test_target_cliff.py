"""The cliff: past capacity the target keeps producing tokens at its peak rate while goodput collapses.

An open-loop load (sends on a fixed schedule, never waiting for answers) first stays under the
saturation rate, then bursts to several times it. Clients give up after ``GIVE_UP_S``, as real ones do.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from cliffwatch.domain.scenario.target_model import TargetModel

MODEL = TargetModel(
    max_batch=4, decode_base_ms=5.0, decode_per_seq_ms=1.5, prefill_base_ms=1.0, prefill_per_token_ms=0.0
)
OUTPUT_TOKENS = 20
SLO_S = 0.5  # a lone request takes about 0.13 s end to end
GIVE_UP_S = 1.0
GENERATED = "cliffwatch_target_generation_tokens_total"
STEPS = "cliffwatch_target_steps_total"


async def open_loop(target, *, rate: float, duration_s: float) -> list[float | None]:
    """Sends streaming requests at ``rate``/s for ``duration_s``; end-to-end seconds of each, None if failed."""

    async def one() -> float | None:
        started = time.perf_counter()
        body = {"prompt": "x", "max_tokens": OUTPUT_TOKENS, "stream": True}
        try:
            async with asyncio.timeout(GIVE_UP_S):
                async with target.client.post("/v1/completions", json=body) as response:
                    payload = await response.read()
                    if response.status != 200 or not payload.endswith(b"data: [DONE]\n\n"):
                        return None
        except TimeoutError:
            return None
        return time.perf_counter() - started

    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for i in range(round(rate * duration_s)):
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        tasks.append(asyncio.create_task(one()))
    return list(await asyncio.gather(*tasks))


def within_slo(latencies: list[float | None]) -> float:
    return sum(1 for s in latencies if s is not None and s <= SLO_S) / len(latencies)


@pytest.mark.slow
async def test_past_capacity_token_throughput_stays_near_peak_while_requests_within_slo_collapse(
    start_target,
) -> None:
    target = await start_target(MODEL)
    saturation = MODEL.saturation_rps(prompt_tokens=1, output_tokens=OUTPUT_TOKENS)  # about 17.9/s
    peak = MODEL.peak_tokens_per_s()  # about 364 tokens/s

    under = await open_loop(target, rate=0.45 * saturation, duration_s=1.5)

    async def throughput_during_burst() -> tuple[float, float]:
        """Tokens per second of wall time, and tokens per engine step, over two seconds of the burst."""
        await asyncio.sleep(0.5)  # let the batch fill and the queue form
        before, t0 = await target.metrics(), time.perf_counter()
        await asyncio.sleep(2.0)
        after, t1 = await target.metrics(), time.perf_counter()
        tokens = after[GENERATED] - before[GENERATED]
        return tokens / (t1 - t0), tokens / max(1.0, after[STEPS] - before[STEPS])

    measured = asyncio.create_task(throughput_during_burst())
    over = await open_loop(target, rate=3.5 * saturation, duration_s=2.5)
    tokens_per_s, per_step = await measured

    assert within_slo(under) >= 0.9, f"under capacity only {within_slo(under):.0%} met the SLO"
    # The engine's claim: the batch stays full, every step at its peak. Its wall-clock rate also depends on
    # this process's event loop, which the test's own 60 streams a second share on a busy CI machine (294
    # tokens/s against 364 was seen once), so that figure has a looser bound than the batch.
    assert per_step >= 0.95 * MODEL.max_batch, f"{per_step:.2f} tokens a step, the batch is {MODEL.max_batch}"
    assert tokens_per_s >= 0.75 * peak, f"{tokens_per_s:.0f} tokens/s against a peak of {peak:.0f}"
    assert within_slo(over) <= 0.25, f"past capacity {within_slo(over):.0%} still met the SLO"
    # The clients that gave up were aborted, so the engine did not serve a dead queue.
    metrics = await target.metrics()
    assert metrics['cliffwatch_target_requests_total{result="aborted_disconnect"}'] > 0
