"""What on-time work costs: a run's phases and a sweep's usable rate priced by target.cost."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cliffwatch.domain.results.cost import priced, usable_cost
from cliffwatch.domain.scenario.cost_spec import CostSpec

SPEC = CostSpec(per_hour=12.5)


def test_an_hour_is_priced_per_thousand_on_time_requests_and_per_million_on_time_tokens() -> None:
    price = priced(SPEC, seconds=1800, on_time=12_500, on_time_output_tokens=2_500_000)
    assert price.cost == 6.25
    assert price.per_1000_on_time == pytest.approx(0.5)
    assert price.per_million_on_time_tokens == pytest.approx(2.5)
    assert price.sentence() == "$0.50 per 1,000 on-time requests ($2.50 per million on-time output tokens)"


def test_nothing_on_time_has_no_price_rather_than_an_infinite_one() -> None:
    price = priced(SPEC, seconds=60, on_time=0, on_time_output_tokens=0)
    assert price.per_1000_on_time is None
    assert price.to_dict()["per_1000_on_time"] is None
    assert price.sentence() == "$0.21 for nothing on time"


@dataclass(frozen=True)
class Step:
    rate: float
    goodput_rps: float
    tokens_per_s: float = 0.0
    completions_per_s: float = 0.0
    duration_s: float = 10.0
    recheck: bool = False


def test_a_sweep_is_priced_at_its_usable_rate_from_the_steps_measured_there() -> None:
    steps = [Step(rate=4.0, goodput_rps=4.0, tokens_per_s=400, completions_per_s=4),
             Step(rate=5.75, goodput_rps=5.7, tokens_per_s=580, completions_per_s=5.8),
             Step(rate=5.75, goodput_rps=5.8, tokens_per_s=580, completions_per_s=5.8, duration_s=30),
             Step(rate=5.75, goodput_rps=1.0, recheck=True)]  # fmt: skip
    cost = usable_cost(SPEC, 5.75, steps)
    assert cost is not None
    goodput = (5.7 * 10 + 5.8 * 30) / 40  # pooled by window length; the recheck left out
    assert cost["hour"]["per_1000_on_time"] == pytest.approx(12.5 / (goodput * 3.6), rel=1e-3)
    assert cost["sentence"].startswith("at 5.75 usable: $0.60 per 1,000 on-time requests")
    assert usable_cost(SPEC, None, steps) is None
