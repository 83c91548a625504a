"""An in-memory ``StepRunner``: a target with a known, sharp capacity, for sweep tests and dry runs.

Up to ``capacity`` every request of a step is on time; above it only ``capacity / rate`` of them are
(the rest time out), and tokens/s stays at its peak, which is the cliff the sweep is meant to find. Up to
``hidden_above`` (when set, above ``capacity``) the overload hides instead: every request is on time, but
the queue grows inside the step (``StepStats.growth``), as a queue growing too slowly to break the SLO does.
A step takes ``step_delay_s`` of real time (0 by default), so tests can stop a sweep mid-step.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

from cliffwatch.domain.capacity.capacity import StepStats
from cliffwatch.domain.capacity.growth import THRESHOLD, Growth, GrowthSignal, Trend
from cliffwatch.services.ports import StepRunner
from cliffwatch.services.sweep import StepStopped

TOKENS_PER_REQUEST = 64.0


@dataclass(kw_only=True)
class ModelStepRunner:
    """Implements ``StepRunner`` from a capacity model; records every step asked for in ``calls``."""

    capacity: float
    step_s: float = 20.0
    step_delay_s: float = 0.0
    generator_limit: float | None = None  # from this rate up the generator "falls behind"
    hidden_above: float | None = None  # up to this rate above capacity, the queue grows but the SLO holds
    extend_s: float = 60.0  # the window of an extended step
    variant: str = "as-written"
    calls: list[tuple[str, float, int]] = field(default_factory=list)
    extended: list[tuple[float, int]] = field(default_factory=list)  # the steps asked for over the longer window
    stops: list[tuple[str, bool]] = field(default_factory=list)
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)

    async def run_step(self, rate: float, *, trial: int, extended: bool = False) -> StepStats:
        if self._stopped.is_set():
            raise StepStopped("stopped")
        self.calls.append((self.variant, rate, trial))
        if extended:
            self.extended.append((rate, trial))
        if self.step_delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.step_delay_s)
        return self.step(rate, trial, extended=extended)

    def stop(self, reason: str, *, aborted: bool) -> None:
        self.stops.append((reason, aborted))
        self._stopped.set()

    def step(self, rate: float, trial: int, *, extended: bool = False) -> StepStats:
        """The step this model measures at ``rate`` (over ``extend_s`` when ``extended``)."""
        window = self.extend_s if extended else self.step_s
        offered = max(1, round(rate * window))
        served = min(rate, self.capacity)
        hidden = self.hidden_above is not None and self.capacity < rate <= self.hidden_above
        on_time = offered if rate <= self.capacity or hidden else round(offered * self.capacity / rate)
        limited = self.generator_limit is not None and rate >= self.generator_limit
        overload = max(0.0, (rate - self.capacity) / self.capacity)
        growing = overload > THRESHOLD
        trend = Trend(signal=GrowthSignal.LATENCY_TREND, slope=overload, overload=overload, t_stat=math.inf,
                      rise=overload * window, emptied=not growing, points=10, growing=growing)  # fmt: skip
        return StepStats(
            rate=rate,
            trial=trial,
            duration_s=window,
            offered=offered,
            on_time=on_time,
            late=0,
            shed=0,
            fast_shed=0,
            timeout=offered - on_time,
            error=0,
            not_sent=0,
            sent_rate=offered / window,
            goodput_rps=on_time / window,
            completions_per_s=served,
            tokens_per_s=served * TOKENS_PER_REQUEST,
            amplification=1.0,
            ttft_ms={"p50": 50.0, "p90": 80.0, "p99": 100.0},
            itl_ms={"p50": 20.0, "p90": 25.0, "p99": 30.0},
            e2e_ms={"p50": 1_000.0, "p90": 1_500.0, "p99": 2_000.0 if rate <= self.capacity or hidden else 60_000.0},
            generator_limited=limited,
            generator_reasons=("p99 schedule lag 50.0 ms > 10 ms",) if limited else (),
            growth=Growth(latency=trend, queue=None),
            extended=extended,
        )


def model_runners(
    capacities: dict[str, float],
    *,
    step_s: float = 20.0,
    step_delay_s: float = 0.0,
    generator_limit: float | None = None,
    hidden_above: float | None = None,
) -> tuple[Callable[[str], AbstractAsyncContextManager[StepRunner]], dict[str, ModelStepRunner]]:
    """A ``runner_for`` giving each variant a ``ModelStepRunner`` with its own capacity, and the runners."""
    runners: dict[str, ModelStepRunner] = {}

    @asynccontextmanager
    async def runner_for(variant: str) -> AsyncIterator[StepRunner]:
        runner = ModelStepRunner(
            capacity=capacities[variant],
            variant=variant,
            step_s=step_s,
            step_delay_s=step_delay_s,
            generator_limit=generator_limit,
            hidden_above=hidden_above,
        )
        runners[variant] = runner
        yield runner

    return runner_for, runners
