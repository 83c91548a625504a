"""HttpStepRunner on a scripted executor: a step's statistics, and a stop that arrives during its pre-flight."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from cliffwatch.adapters.loadgen.step_drain import IDLE_PROBES
from cliffwatch.adapters.loadgen.sweep_steps import HttpStepRunner
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepSpec
from cliffwatch.domain.outcomes import Attempt
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing
from cliffwatch.services.memory import CollectingObserver
from cliffwatch.services.ports import StepRunner
from cliffwatch.services.sweep import SweepService

SCENARIO = parse_scenario(
    {
        "name": "steps",
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 1000, "ttft_ms": 40, "timeout_ms": 2000},
        "client": {"retry": {"policy": "none"}},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "poisson", "rate": 1}}],
    }
)


class Executor:
    """Answers every attempt after ``service_s`` with its first token at the end; ``hang`` holds the
    pre-flight check until cancelled (a target that accepts connections but never answers)."""

    def __init__(self, clock: MonotonicClock, *, service_s: float = 0.02, hang: bool = False) -> None:
        self.clock = clock
        self.service_s = service_s
        self.hang = hang
        self.in_flight = 0
        self.capped_hops = 0
        self.tokens = 0.0
        self.attempts = 0
        self.checking = asyncio.Event()

    async def preflight(self) -> PromptSizing:
        self.checking.set()
        if self.hang:
            await asyncio.Event().wait()
        return WORDS_SIZING

    def end_conversation(self, conversation: int) -> None:
        return None

    def next_prompts(self) -> None:
        self.prompt_rounds = getattr(self, "prompt_rounds", 0) + 1

    async def attempt(
        self, request: PlannedRequest, number: int, timeout_s: float, *, origin_ns: int, deadline_bound: bool
    ) -> Attempt:
        self.attempts += 1
        sent = self.clock.now_ns() - origin_ns
        self.in_flight += 1
        try:
            await asyncio.sleep(self.service_s)
        finally:
            self.in_flight -= 1
        end = self.clock.now_ns() - origin_ns
        return Attempt(number=number, sent_ns=sent, end_ns=end, first_token_ns=end, output_tokens=8)


def runner(executor: Executor, spec: SweepSpec) -> HttpStepRunner:
    return HttpStepRunner(
        scenario=SCENARIO,
        spec=spec,
        variant="as-written",
        retry=None,
        executor=executor,
        clock=executor.clock,
        observer=CollectingObserver(),
        target_url="http://127.0.0.1:9",
        sweep_id="s1",
    )


async def test_a_step_reports_its_window_with_late_requests_by_the_bound_they_broke() -> None:
    executor = Executor(MonotonicClock(), service_s=0.06)  # every answer misses the 40-ms TTFT bound
    spec = SweepSpec(start=1, stop=2, step_s=1, warmup_s=0.5, cooldown_s=0)

    step = await runner(executor, spec).run_step(10.0, trial=1)

    assert step.offered > 0
    assert step.late == step.offered
    assert step.late_by == {"ttft": step.late}
    p99_ttft = step.ttft_ms["p99"]
    assert p99_ttft is not None
    assert p99_ttft > 40
    assert executor.prompt_rounds == 1  # each step asks for prompts no earlier step sent


async def test_a_poisson_step_is_read_beside_the_sweeps_reference_slot_and_a_constant_one_is_not() -> None:
    executor = Executor(MonotonicClock(), service_s=0.05)
    spec = SweepSpec(start=1, stop=2, step_s=1, warmup_s=0.5, cooldown_s=0)
    steps = runner(executor, spec)

    first = await steps.run_step(8.0, trial=1)
    second = await steps.run_step(12.0, trial=1)

    assert first.reference is not None
    assert second.reference is not None
    assert (first.reference.requests, first.reference.missed) == (first.offered, first.offered)  # late on TTFT
    # at most each answer's 50 ms and the client's time around it; less where answers overlapped (the scripted
    # executor serves every request at once: no single slot)
    assert 0.01 < first.reference.busy_s < 0.06
    assert second.reference.service_s == first.reference.busy_s  # the first step's, for the whole variant
    assert second.reference.budget_s == 1.0 - second.reference.service_s  # the e2e SLO less one service
    constant = await runner(executor, SweepSpec(start=1, stop=2, step_s=1, warmup_s=0.5, cooldown_s=0,
                                                arrival=SweepArrival.CONSTANT)).run_step(8.0, trial=1)  # fmt: skip
    assert constant.reference is None
    counted = await runner(executor, SweepSpec(start=1, stop=2, step_s=1, warmup_s=0.5, cooldown_s=0,
                                               luck_correction=False)).run_step(8.0, trial=1)  # fmt: skip
    assert counted.reference is None  # --no-luck-correction: judged on the counted attainment alone


async def test_a_stop_during_a_steps_preflight_cuts_the_step_at_once_and_it_is_not_counted() -> None:
    executor = Executor(MonotonicClock(), hang=True)
    spec = SweepSpec(start=1, stop=2, step_s=10, warmup_s=2, cooldown_s=1)
    step_runner = runner(executor, spec)

    @asynccontextmanager
    async def runner_for(variant: str) -> AsyncIterator[StepRunner]:
        yield step_runner

    service = SweepService(scenario=SCENARIO, spec=spec, runner_for=runner_for, observer=CollectingObserver())
    sweep = asyncio.create_task(service.run())
    await asyncio.wait_for(executor.checking.wait(), timeout=5)
    started = time.monotonic()
    service.interrupt()
    reports = await asyncio.wait_for(sweep, timeout=5)

    assert time.monotonic() - started < 1.0  # not the step's 12 s, nor its cool-down
    assert reports == []  # the cut step was discarded: no step, so no result
    # only the drain's idle reference went out, before the step: nothing of the step, and no probe after the stop
    assert executor.attempts == IDLE_PROBES
