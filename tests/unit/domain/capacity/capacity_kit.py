"""Scripted capacity-sweep steps for the domain tests: a step builder and a fake target with a true capacity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cliffwatch.domain.capacity.capacity import CapacitySearch, StepStats
from cliffwatch.domain.capacity.growth import THRESHOLD, Growth, GrowthSignal, Trend


def step(
    rate: float,
    trial: int = 1,
    *,
    offered: int | None = None,
    on_time: int | None = None,
    timeout: int = 0,
    shed: int = 0,
    error: int = 0,
    redirect: int = 0,
    incomplete: int = 0,
    duration_s: float = 20.0,
    tokens_per_s: float | None = None,
    completions_per_s: float | None = None,
    p99_e2e_ms: float | None = 1000.0,
    p99_ttft_ms: float | None = 300.0,
    late_by: dict[str, int] | None = None,
    generator_limited: bool = False,
    growing: bool | None = None,
    extended: bool = False,
    server: dict[str, dict[str, float | int | None]] | None = None,
) -> StepStats:
    """A step at ``rate``: ``rate × duration`` requests by default, all on time unless told; the failures that
    are not timeouts, shed, errors, redirects or incompletes are late."""
    offered = round(rate * duration_s) if offered is None else offered
    on_time = offered if on_time is None else on_time
    late = offered - on_time - timeout - shed - error - redirect - incomplete
    completions = (on_time + late) / duration_s if completions_per_s is None else completions_per_s
    return StepStats(
        rate=rate,
        trial=trial,
        duration_s=duration_s,
        offered=offered,
        on_time=on_time,
        late=late,
        shed=shed,
        fast_shed=0,
        timeout=timeout,
        error=error,
        redirect=redirect,
        incomplete=incomplete,
        not_sent=0,
        sent_rate=offered / duration_s,
        goodput_rps=on_time / duration_s,
        completions_per_s=completions,
        tokens_per_s=completions * 100 if tokens_per_s is None else tokens_per_s,
        amplification=1.0 if offered else None,
        ttft_ms={"p50": 100.0, "p90": 200.0, "p99": p99_ttft_ms},
        itl_ms={"p50": 10.0, "p90": 20.0, "p99": 30.0},
        e2e_ms={"p50": 500.0, "p90": 800.0, "p99": p99_e2e_ms},
        generator_limited=generator_limited,
        generator_reasons=("schedule lag p99 12 ms",) if generator_limited else (),
        late_by=late_by or {},
        growth=None if growing is None else growth(0.06 if growing else 0.0),
        extended=extended,
        server=server or {},
    )


def growth(overload: float) -> Growth:
    """A latency trend of ``overload`` (growing above the threshold), as a step's growth reading."""
    growing = overload > THRESHOLD
    trend = Trend(signal=GrowthSignal.LATENCY_TREND, slope=overload, overload=overload, t_stat=9.0,
                  rise=overload * 10, emptied=not growing, points=10, growing=growing)  # fmt: skip
    return Growth(latency=trend, queue=None)


@dataclass
class FakeTarget:
    """A target that meets the SLO for every request up to ``capacity`` and for half of them above it.

    ``generator_limit``: from this rate up the generator falls behind. ``per_step``: requests per step (fixed,
    so the statistics do not depend on the rate); ``attainment``: overrides the shape for scripted cases.
    """

    capacity: float
    per_step: int = 2000
    generator_limit: float = float("inf")
    attainment: Callable[[float, int], float] | None = None

    def measure(self, rate: float, trial: int) -> StepStats:
        share = self.attainment(rate, trial) if self.attainment else (1.0 if rate <= self.capacity else 0.5)
        return step(
            rate,
            trial,
            offered=self.per_step,
            on_time=round(share * self.per_step),
            generator_limited=rate >= self.generator_limit,
        )


def drive(search: CapacitySearch, target: FakeTarget, *, limit: int = 500) -> list[tuple[float, int]]:
    """Runs the search to the end against the fake target; the (rate, trial) pairs it asked for, in order."""
    asked: list[tuple[float, int]] = []
    while (nxt := search.next_rate()) is not None:
        asked.append((nxt.rate, nxt.trial))
        search.record(target.measure(nxt.rate, nxt.trial))
        assert len(asked) < limit, "the search did not end"
    return asked
