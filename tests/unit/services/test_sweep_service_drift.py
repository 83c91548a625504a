"""SweepService's recheck and drift: the first rate measured again at the end, each step's start time, and a
target that slows down during the sweep."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from cliffwatch.domain.capacity.capacity import StepStats
from cliffwatch.domain.capacity.sweep_spec import SweepSpec, parse_sweep_spec
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.services.memory import CollectingObserver
from cliffwatch.services.memory_sweep import ModelStepRunner
from cliffwatch.services.ports import StepRunner
from cliffwatch.services.sweep import SweepService

SCENARIO = parse_scenario(
    {
        "name": "drifting",
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 4000, "timeout_ms": 8000},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson", "rate": 1}}],
    }
)
STEP_S = 400.0  # 400 requests at 1 req/s: clearly good in one trial (95 %), and room for 99.9 % intervals to part


class TickingClock:
    """A monotonic clock that moves 15 s every time it is read."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        now, self.ns = self.ns, self.ns + 15_000_000_000
        return now

    async def sleep(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(kw_only=True)
class SlowingRunner(ModelStepRunner):
    """A target whose capacity falls to ``slow_capacity`` from its ``slow_from``-th step on (counting from 1)."""

    slow_from: int | None = None
    slow_capacity: float = 0.5

    async def run_step(self, rate: float, *, trial: int, extended: bool = False) -> StepStats:
        if self.slow_from is not None and len(self.calls) + 1 >= self.slow_from:
            self.capacity = self.slow_capacity
        return await super().run_step(rate, trial=trial, extended=extended)


def sweep(spec: SweepSpec, runner: SlowingRunner) -> tuple[SweepService, CollectingObserver]:
    @asynccontextmanager
    async def runner_for(variant: str) -> AsyncIterator[StepRunner]:
        yield runner

    observer = CollectingObserver()
    service = SweepService(scenario=SCENARIO, spec=spec, runner_for=runner_for, observer=observer,
                           clock=TickingClock())  # fmt: skip
    return service, observer


# 1, 6, 11, 16 req/s against a target serving 20: no cliff, then the recheck at 1
RANGE = {"start": 1, "stop": 16, "coarse_steps": 4}


async def test_a_sweep_with_the_recheck_ends_at_its_first_rate_labelled_as_the_recheck_and_timed() -> None:
    runner = SlowingRunner(capacity=20.0, step_s=STEP_S)
    service, observer = sweep(parse_sweep_spec({**RANGE, "recheck": True}), runner)

    [report] = await service.run()

    steps = report.result.steps
    assert [(s.rate, s.trial, s.recheck) for s in steps] == [
        (1.0, 1, False), (6.0, 1, False), (11.0, 1, False), (16.0, 1, False), (1.0, 2, True)]  # fmt: skip
    assert runner.calls[-1] == ("as-written", 1.0, 2)
    assert [s.started_s for s in steps] == [15.0, 30.0, 45.0, 60.0, 75.0]  # the clock is read once at the start
    assert report.result.finished_because == "no cliff found up to 16 req/s"
    assert any("measuring its first rate, 1 req/s, again" in note for note in observer.notes)
    assert report.result.target_drift is None
    assert report.result.usable_rps == 16.0


async def test_without_the_recheck_the_search_alone_is_measured() -> None:
    runner = SlowingRunner(capacity=20.0, step_s=STEP_S)
    service, _ = sweep(parse_sweep_spec(RANGE), runner)

    [report] = await service.run()

    assert [s.rate for s in report.result.steps] == [1.0, 6.0, 11.0, 16.0]
    assert not any(s.recheck for s in report.result.steps)


async def test_a_target_that_slowed_down_before_the_recheck_is_reported_as_drifting_and_sized_at_its_slowest() -> None:
    runner = SlowingRunner(capacity=20.0, step_s=STEP_S, slow_from=5, slow_capacity=0.5)
    service, _ = sweep(parse_sweep_spec({**RANGE, "recheck": True}), runner)

    [report] = await service.run()

    result = report.result
    assert result.target_drift is not None
    (pair,) = result.target_drift.disagreements
    assert (pair.rate, pair.earlier.trial, pair.later.trial, pair.later.recheck) == (1.0, 1, 2, True)
    assert (pair.earlier.started_s, pair.later.started_s) == (15.0, 75.0)
    assert pair.share_change == -0.5
    assert result.verdict.startswith(
        "the target's speed drifted during the sweep (1 req/s: 100.0 % on time at 15 s, 50.0 % at 75 s in the "
        "end-of-sweep recheck): its usable capacity is its slowest period's"
    )
    # At its slowest even the first rate failed: no rate is shown usable, where pooling would have said 16.
    assert result.usable_rps is None
    assert "no rate met the 99 % attainment target" in result.verdict
