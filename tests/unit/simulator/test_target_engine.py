"""The asyncio engine on a virtual clock: its step loop, schedule, deadlines, cancellation and shutdown."""

from __future__ import annotations

import asyncio

import pytest

from cliffwatch.domain.scenario.target_model import Admission, TargetModel
from cliffwatch.simulator.engine import (
    EngineClosed,
    Generation,
    GenerationAborted,
    QueueDeadlineExceeded,
    SimulatedEngine,
    VirtualClock,
)
from cliffwatch.simulator.sequences import Result

MODEL = TargetModel(max_batch=4, decode_base_ms=10.0, decode_per_seq_ms=2.0, prefill_base_ms=4.0)


class CountingClock(VirtualClock):
    """Counts sleeps and can add a fixed overshoot, or one long stall, to them."""

    def __init__(self, *, overshoot: float = 0.0, stall_at: int | None = None, stall: float = 0.0) -> None:
        super().__init__()
        self.sleeps = 0
        self.overshoot = overshoot
        self.stall_at = stall_at
        self.stall = stall

    async def sleep(self, delay: float) -> None:
        self.sleeps += 1
        extra = self.overshoot + (self.stall if self.sleeps == self.stall_at else 0.0)
        self.time += extra
        await super().sleep(delay)


async def collect(generation: Generation) -> list[str]:
    tokens: list[str] = []
    while batch := await generation.wait_tokens():
        tokens.extend(batch)
    return tokens


async def yield_many(times: int = 50) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def test_an_idle_engine_neither_steps_nor_sleeps() -> None:
    clock = CountingClock()
    async with SimulatedEngine(MODEL, clock=clock) as engine:
        await yield_many()
        assert clock.sleeps == 0
        assert engine.stats().steps_total == 0
        await collect(engine.submit(prompt_tokens=1, max_tokens=3))
        after_work = clock.sleeps
        await yield_many()
        assert clock.sleeps == after_work
        assert engine.stats().steps_total == 3


async def test_a_streaming_generation_receives_every_token_in_order_then_an_empty_batch() -> None:
    async with SimulatedEngine(MODEL, clock=VirtualClock()) as engine:
        generation = engine.submit(prompt_tokens=3, max_tokens=25)
        tokens = await collect(generation)
        assert tokens == generation.request.tokens
        assert len(tokens) == 25
        assert await generation.wait_tokens() == ()


async def test_a_non_streaming_generation_returns_all_tokens_when_it_completes() -> None:
    async with SimulatedEngine(MODEL, clock=VirtualClock()) as engine:
        generation = engine.submit(prompt_tokens=3, max_tokens=9, streaming=False)
        tokens = await generation.result()
        assert list(tokens) == generation.request.tokens
        assert len(tokens) == 9


async def test_a_lone_request_takes_exactly_its_prefill_and_steps_in_engine_time() -> None:
    clock = VirtualClock(start=100.0)
    async with SimulatedEngine(MODEL, clock=clock) as engine:
        generation = engine.submit(prompt_tokens=40, max_tokens=20)
        await collect(generation)
        request = generation.request
        assert request.ended_at is not None
        expected_ms = MODEL.prefill_ms(40) + 20 * MODEL.step_ms(1)
        assert (request.ended_at - request.arrived_at) * 1000 == pytest.approx(expected_ms)


async def test_concurrent_requests_share_steps_so_the_batch_finishes_together() -> None:
    async with SimulatedEngine(MODEL, clock=VirtualClock()) as engine:
        generations = [engine.submit(prompt_tokens=0, max_tokens=30) for _ in range(4)]
        await asyncio.gather(*(collect(g) for g in generations))
        assert engine.stats().steps_total == 30
        assert len({g.request.ended_at for g in generations}) == 1


async def test_steps_keep_an_absolute_schedule_when_every_sleep_overshoots() -> None:
    model = TargetModel(max_batch=1, decode_base_ms=10.0, decode_per_seq_ms=0.0, prefill_base_ms=0.0)
    clock = CountingClock(overshoot=0.002)
    async with SimulatedEngine(model, clock=clock) as engine:
        generation = engine.submit(prompt_tokens=0, max_tokens=100)
        await collect(generation)
    # 2 ms lost per sleep would add up to 0.2 s over 100 steps; an absolute schedule loses only one.
    assert generation.request.ended_at == pytest.approx(1.0)
    assert clock.time == pytest.approx(1.002)


async def test_after_a_long_stall_the_schedule_restarts_instead_of_replaying_steps_instantly() -> None:
    model = TargetModel(max_batch=1, decode_base_ms=10.0, decode_per_seq_ms=0.0, prefill_base_ms=0.0)
    clock = CountingClock(stall_at=3, stall=2.0)
    async with SimulatedEngine(model, clock=clock) as engine:
        generation = engine.submit(prompt_tokens=0, max_tokens=10)
        await collect(generation)
    assert generation.request.ended_at is not None
    # Steps after the stall are paced from when the loop woke up, 10 ms apart, not crammed into 0 s.
    assert generation.request.ended_at == pytest.approx(2.0 + 0.1)


async def test_a_queued_request_is_dropped_at_its_deadline_even_in_the_middle_of_a_long_step() -> None:
    model = TargetModel(
        max_batch=1,
        admission=Admission.DEADLINE,
        max_queue_wait_ms=50.0,
        prefill_base_ms=500.0,
        decode_base_ms=10.0,
    )
    async with SimulatedEngine(model, clock=VirtualClock()) as engine:
        running = engine.submit(prompt_tokens=0, max_tokens=2)
        queued = engine.submit(prompt_tokens=0, max_tokens=2)
        with pytest.raises(QueueDeadlineExceeded) as dropped:
            await queued.wait_tokens()
        assert queued.request.ended_at == pytest.approx(0.05)
        assert dropped.value.limit_s == pytest.approx(0.05)
        assert running.request.first_token_at is None  # still inside its 0.5 s prefill step
        await collect(running)
        assert engine.stats().results[Result.DROPPED_DEADLINE_503] == 1


@pytest.mark.parametrize("start", [0.0, 12_345.678, 98_765.4321, 1e6 + 0.3])
async def test_mid_step_deadline_drops_happen_whatever_the_clock_reading(start: float) -> None:
    model = TargetModel(max_batch=1, admission=Admission.DEADLINE, max_queue_wait_ms=100.0, decode_base_ms=10.0)
    async with SimulatedEngine(model, clock=VirtualClock(start)) as engine:
        running = engine.submit(prompt_tokens=0, max_tokens=40)
        await running.wait_tokens()
        queued = [engine.submit(prompt_tokens=0, max_tokens=1) for _ in range(3)]
        async with asyncio.timeout(5.0):
            for generation in queued:
                with pytest.raises(QueueDeadlineExceeded):
                    await generation.wait_tokens()
            await collect(running)
        assert engine.stats().results[Result.DROPPED_DEADLINE_503] == 3


async def test_cancelling_a_queued_generation_ends_it_and_costs_the_engine_nothing() -> None:
    model = TargetModel(max_batch=1, decode_base_ms=10.0)
    async with SimulatedEngine(model, clock=VirtualClock()) as engine:
        first = engine.submit(prompt_tokens=0, max_tokens=5)
        gone = engine.submit(prompt_tokens=0, max_tokens=500)
        assert engine.cancel(gone)
        assert not engine.cancel(gone)
        with pytest.raises(GenerationAborted):
            await gone.wait_tokens()
        await collect(first)
        stats = engine.stats()
        assert stats.steps_total == 5
        assert stats.results[Result.ABORTED_DISCONNECT] == 1


async def test_cancelling_mid_stream_stops_generation_but_keeps_delivered_tokens() -> None:
    async with SimulatedEngine(MODEL, clock=VirtualClock()) as engine:
        generation = engine.submit(prompt_tokens=0, max_tokens=1000)
        received = list(await generation.wait_tokens())
        assert engine.cancel(generation)
        with pytest.raises(GenerationAborted):
            await generation.wait_tokens()
        await yield_many()
        produced = engine.stats().generation_tokens_total
        assert len(received) <= produced < 1000
        assert engine.stats().running == 0


async def test_closing_ends_every_queued_and_running_generation_and_refuses_new_ones() -> None:
    engine = SimulatedEngine(TargetModel(max_batch=2), clock=VirtualClock())
    engine.start()
    generations = [engine.submit(prompt_tokens=0, max_tokens=10_000) for _ in range(5)]
    await yield_many(5)
    await engine.stop()
    for generation in generations:
        with pytest.raises(GenerationAborted):
            await collect(generation)
    with pytest.raises(EngineClosed):
        engine.submit(prompt_tokens=0, max_tokens=1)
    assert engine.stats().results[Result.ABORTED_SHUTDOWN] == 5


async def test_the_real_loop_clock_paces_steps_at_the_model_speed() -> None:
    model = TargetModel(max_batch=2, decode_base_ms=5.0, decode_per_seq_ms=0.0, prefill_base_ms=0.0)
    async with SimulatedEngine(model) as engine:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await collect(engine.submit(prompt_tokens=0, max_tokens=20))
        elapsed = loop.time() - started
    # 20 steps of 5 ms: never faster than the model, and not much slower on an idle loop.
    assert 0.098 <= elapsed < 0.5
