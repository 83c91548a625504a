"""The peer: a minimal open-loop generator written directly on aiohttp, the yardstick for cliffwatch's.

It does what an open-loop generator cannot do without: sleep until each scheduled time, start the request
in its own task, read the answer to its end. It keeps only the schedule lag and the latency of each request.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time

import aiohttp

from cliffwatch.adapters.loadgen.prompts import prompt_text
from fidelity_figures import NS_PER_S, Config, Samples

START_LEAD_S = 0.05  # the schedule starts a moment after set-up, as in the runner
TIMER_MAX_S = 1.5  # the timer floor is cheap and steady: a shorter pass keeps the whole run short
POOL_SIZE = 2_000  # connections per generator: never the limit at these rates and latencies
PROMPT_WORDS = 64


async def run_peer(config: Config, base_url: str, rate: float) -> Samples:
    """The peer at ``rate``: a warm-up pass, then the measured one, on one session."""
    connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=2.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if config.warmup_s > 0:
            await _peer_pass(session, config, base_url, rate, config.warmup_s)
        gc.collect()
        return await _peer_pass(session, config, base_url, rate, config.duration_s)


async def _peer_pass(
    session: aiohttp.ClientSession, config: Config, base_url: str, rate: float, duration_s: float
) -> Samples:
    if config.mode == "sse":
        method, url = "POST", base_url + "/v1/chat/completions"
        body: bytes | None = _sse_body(0, config.chunks)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    else:
        method, url, body, headers = "GET", base_url + "/", None, {}
    samples = Samples()
    lags, latencies = samples.lag_ns, samples.latency_ns
    tasks: set[asyncio.Task[None]] = set()

    async def one(offset: int) -> None:
        sent = time.perf_counter_ns() - start
        lags.append(sent - offset)
        samples.last_sent_ns = max(samples.last_sent_ns, sent)
        try:
            async with session.request(method, url, data=body, headers=headers) as response:
                async for _ in response.content.iter_any():
                    pass
                ok = response.status == 200
        except (aiohttp.ClientError, OSError):
            ok = False
        if ok:
            latencies.append(time.perf_counter_ns() - start - sent)
        else:
            samples.failed += 1

    cpu_start = time.process_time()
    start = time.perf_counter_ns() + round(START_LEAD_S * NS_PER_S)
    offsets = _constant_offsets_ns(rate, duration_s)
    for offset in offsets:
        at = start + offset
        delay = at - time.perf_counter_ns()
        if delay > 0:
            await asyncio.sleep(delay / NS_PER_S)
        task = asyncio.create_task(one(offset))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    while tasks:
        await asyncio.wait(list(tasks))
    samples.cpu_s = time.process_time() - cpu_start
    samples.wall_s = (time.perf_counter_ns() - start) / NS_PER_S + START_LEAD_S
    samples.planned = len(offsets)
    samples.last_scheduled_ns = offsets[-1] if offsets else 0
    return samples


async def run_timer_floor(config: Config, base_url: str, rate: float) -> Samples:
    """The floor under both generators: the same schedule kept by ``asyncio.sleep`` alone, no requests.

    Its lag is what the event loop and the machine add (asyncio rounds selector timeouts up to whole
    milliseconds; a virtual CPU takes time to wake), so no asyncio generator can do better on this machine.
    """
    samples = Samples()
    cpu_start = time.process_time()
    start = time.perf_counter_ns() + round(START_LEAD_S * NS_PER_S)
    offsets = _constant_offsets_ns(rate, min(config.duration_s, TIMER_MAX_S))
    for offset in offsets:
        delay = start + offset - time.perf_counter_ns()
        if delay > 0:
            await asyncio.sleep(delay / NS_PER_S)
        woke = time.perf_counter_ns() - start
        samples.lag_ns.append(woke - offset)
        samples.last_sent_ns = woke
    samples.cpu_s = time.process_time() - cpu_start
    samples.wall_s = (time.perf_counter_ns() - start) / NS_PER_S + START_LEAD_S
    samples.planned = len(offsets)
    samples.last_scheduled_ns = offsets[-1] if offsets else 0
    return samples


def _constant_offsets_ns(rate: float, duration_s: float) -> list[int]:
    """The same send offsets as cliffwatch's constant arrival process (``domain/scenario/arrivals.py``)."""
    gap = 1.0 / rate
    offsets, index = [], 0
    while (offset := index * gap) < duration_s:
        offsets.append(round(offset * NS_PER_S))
        index += 1
    return offsets


def _sse_body(request_id: int, max_tokens: int) -> bytes:
    """A request body the size of cliffwatch's (built once by the peer, per request by cliffwatch)."""
    document = {
        "model": "bench",
        "max_tokens": max_tokens,
        "stream": True,
        "messages": [{"role": "user", "content": prompt_text(request_id, PROMPT_WORDS)}],
    }
    return json.dumps(document).encode()
