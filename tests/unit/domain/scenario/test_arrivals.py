"""Arrival processes: parsing, and the statistics of the send plans they produce.

The statistical tests use fixed seeds, so they are deterministic; their tolerances are several standard
errors wide (worked out in each test), so they would not pass by luck with a wrong process either.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cliffwatch.domain.scenario.arrivals import (
    Arrival,
    Constant,
    Gamma,
    Poisson,
    RateStep,
    Spike,
    Steps,
    parse_arrival,
    plan_offsets,
)
from cliffwatch.domain.validation import Problems


def _plan(arrival: Arrival, duration_s: float, seed: int = 1) -> list[float]:
    return list(plan_offsets(arrival, duration_s, random.Random(seed)))


def _gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]


def _cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values)


def _count(offsets: list[float], start: float, end: float) -> int:
    return sum(1 for o in offsets if start <= o < end)


_RANDOM_PROCESSES: list[Arrival] = [
    Poisson(rate=20),
    Gamma(rate=20, burstiness=0.5),
    Steps(steps=(RateStep(rate=5, duration_s=50), RateStep(rate=30, duration_s=50))),
    Spike(base_rate=5, burst_rate=50, burst_s=2, period_s=10, offset_s=1),
]


# -- determinism and shape -------------------------------------------------------------------------


@pytest.mark.parametrize("arrival", _RANDOM_PROCESSES, ids=lambda a: a.describe())
def test_the_same_seed_gives_the_same_plan(arrival: Arrival) -> None:
    assert _plan(arrival, 100, seed=5) == _plan(arrival, 100, seed=5)


@pytest.mark.parametrize("arrival", _RANDOM_PROCESSES, ids=lambda a: a.describe())
def test_a_different_seed_gives_a_different_plan(arrival: Arrival) -> None:
    assert _plan(arrival, 100, seed=5) != _plan(arrival, 100, seed=6)


_rates = st.floats(min_value=0.1, max_value=40)
_arrivals = st.one_of(
    st.builds(Constant, rate=_rates),
    st.builds(Poisson, rate=_rates),
    st.builds(Gamma, rate=_rates, burstiness=st.floats(min_value=0.05, max_value=20)),
    st.builds(
        Spike,
        base_rate=st.floats(min_value=0, max_value=20),
        burst_rate=_rates,
        burst_s=st.floats(min_value=0.1, max_value=2),
        period_s=st.floats(min_value=2.5, max_value=10),
        offset_s=st.floats(min_value=0, max_value=20),
    ),
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=40), st.floats(min_value=0.5, max_value=10)), min_size=1, max_size=4
    ).map(lambda steps: Steps(steps=tuple(RateStep(rate=r, duration_s=d) for r, d in steps))),
)


@settings(max_examples=200, deadline=None)
@given(arrival=_arrivals, duration_s=st.floats(min_value=0.5, max_value=30), seed=st.integers(0, 2**32))
def test_offsets_are_in_increasing_order_within_the_phase(arrival: Arrival, duration_s: float, seed: int) -> None:
    offsets = _plan(arrival, duration_s, seed)

    assert offsets == sorted(offsets)
    assert all(0 <= o < duration_s for o in offsets)


def test_a_constant_process_sends_exactly_evenly_spaced_from_the_phase_start() -> None:
    offsets = _plan(Constant(rate=4), 2.5)

    assert offsets == pytest.approx([i * 0.25 for i in range(10)], rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(("rate", "duration_s", "count"), [(3, 1, 3), (4, 2.5, 10), (0.5, 10, 5), (10, 0.05, 1)])
def test_a_constant_process_sends_ceil_rate_times_duration_requests(rate: float, duration_s: float, count: int) -> None:
    assert len(_plan(Constant(rate=rate), duration_s)) == count


@pytest.mark.parametrize(
    "arrival",
    [Poisson(rate=5e-324), Gamma(rate=5e-324, burstiness=0.01), Gamma(rate=5e-324, burstiness=100)],
    ids=lambda a: a.describe(),
)
def test_a_vanishingly_small_rate_plans_nothing_rather_than_failing(arrival: Arrival) -> None:
    assert _plan(arrival, 86_400) == []


# -- mean rates ------------------------------------------------------------------------------------


def test_a_poisson_process_keeps_its_mean_rate() -> None:
    rate, duration = 50.0, 2000.0
    expected = rate * duration  # 100 000, standard deviation sqrt(100 000) ≈ 316

    count = len(_plan(Poisson(rate=rate), duration, seed=11))

    assert abs(count - expected) < 5 * math.sqrt(expected)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 4.0])
def test_a_gamma_process_keeps_its_mean_rate_whatever_its_burstiness(burstiness: float) -> None:
    rate, duration = 50.0, 2000.0
    expected = rate * duration
    # a renewal process's count has variance ≈ expected × CV², and CV² = 1 / burstiness
    tolerance = 5 * math.sqrt(expected / burstiness)

    count = len(_plan(Gamma(rate=rate, burstiness=burstiness), duration, seed=12))

    assert abs(count - expected) < tolerance


def test_a_step_process_follows_each_steps_rate_and_sends_nothing_in_a_zero_step() -> None:
    arrival = Steps(
        steps=(RateStep(rate=10, duration_s=100), RateStep(rate=0, duration_s=50), RateStep(rate=40, duration_s=100))
    )

    offsets = _plan(arrival, 250, seed=13)

    assert abs(_count(offsets, 0, 100) - 1000) < 5 * math.sqrt(1000)
    assert _count(offsets, 100, 150) == 0
    assert abs(_count(offsets, 150, 250) - 4000) < 5 * math.sqrt(4000)


def test_a_spike_process_sends_at_the_burst_rate_inside_bursts_and_the_base_rate_outside() -> None:
    arrival = Spike(base_rate=2, burst_rate=50, burst_s=5, period_s=20, offset_s=5)
    duration = 2000.0
    bursts = list(arrival.bursts(duration))
    inside_s = sum(end - start for start, end in bursts)  # 100 bursts of 5 s

    offsets = _plan(arrival, duration, seed=14)
    inside = sum(_count(offsets, start, end) for start, end in bursts)
    outside = len(offsets) - inside

    assert inside_s == 500
    assert abs(inside - 50 * inside_s) < 5 * math.sqrt(50 * inside_s)
    assert abs(outside - 2 * (duration - inside_s)) < 5 * math.sqrt(2 * (duration - inside_s))


def test_a_spike_with_no_base_rate_sends_only_inside_bursts() -> None:
    arrival = Spike(base_rate=0, burst_rate=30, burst_s=1, period_s=10, offset_s=3)

    offsets = _plan(arrival, 100, seed=15)

    assert offsets
    assert all(3 <= o % 10 < 4 for o in offsets)


def test_spike_bursts_repeat_every_period_from_the_offset_and_are_clipped_at_the_phase_end() -> None:
    arrival = Spike(base_rate=1, burst_rate=10, burst_s=4, period_s=10, offset_s=2)

    assert list(arrival.bursts(33)) == [(2, 6), (12, 16), (22, 26), (32, 33)]


# -- shape of the gaps -----------------------------------------------------------------------------


def test_poisson_gaps_have_a_coefficient_of_variation_of_one() -> None:
    # for ~100 000 exponential gaps the CV's standard error is about 0.3 %
    assert _cv(_gaps(_plan(Poisson(rate=50), 2000, seed=21))) == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize(("burstiness", "cv"), [(0.25, 2.0), (0.5, math.sqrt(2)), (1.0, 1.0), (4.0, 0.5)])
def test_gamma_gaps_have_a_coefficient_of_variation_of_one_over_root_burstiness(burstiness: float, cv: float) -> None:
    # the CV's standard error is below 1 % here (≈ sqrt((2 + 6/k) / n) / 2 for n ≈ 100 000 gaps of shape k)
    gaps = _gaps(_plan(Gamma(rate=50, burstiness=burstiness), 2000, seed=22))

    assert _cv(gaps) == pytest.approx(cv, rel=0.05)
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.03)


def test_lower_burstiness_means_burstier_arrivals() -> None:
    cvs = [_cv(_gaps(_plan(Gamma(rate=20, burstiness=k), 1000, seed=23))) for k in (0.25, 1.0, 4.0)]

    assert cvs == sorted(cvs, reverse=True)


# -- mean and peak rates as declared ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arrival", "duration_s", "mean", "peak"),
    [
        (Constant(rate=4), 10, 4, 4),
        (Poisson(rate=7), 10, 7, 7),
        (Gamma(rate=3, burstiness=0.5), 10, 3, 3),
        (
            Steps(
                steps=(
                    RateStep(rate=10, duration_s=30),
                    RateStep(rate=0, duration_s=10),
                    RateStep(rate=20, duration_s=60),
                )
            ),
            100,
            15,
            20,
        ),
        # bursts at 5, 25, 45, 65, 85: 25 s at 50/s, 75 s at 2/s
        (Spike(base_rate=2, burst_rate=50, burst_s=5, period_s=20, offset_s=5), 100, 14, 50),
        # the last burst is cut short by the phase end: 2 s of 10 s at 40/s, the rest at 0
        (Spike(base_rate=0, burst_rate=40, burst_s=10, period_s=100, offset_s=8), 10, 8, 40),
    ],
)
def test_mean_and_peak_rates_follow_from_the_declaration(
    arrival: Arrival, duration_s: float, mean: float, peak: float
) -> None:
    assert arrival.mean_rate(duration_s) == pytest.approx(mean)
    assert arrival.peak_rate() == peak


# -- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"process": "constant", "rate": 5}, Constant(rate=5)),
        ({"process": "poisson", "rate": 0.5}, Poisson(rate=0.5)),
        ({"process": "gamma", "rate": 5, "burstiness": 0.25}, Gamma(rate=5, burstiness=0.25)),
        (
            {"process": "step", "steps": [{"rate": 0, "duration_s": 4}, {"rate": 8, "duration_s": 6}]},
            Steps(steps=(RateStep(rate=0, duration_s=4), RateStep(rate=8, duration_s=6))),
        ),
        (
            {"process": "spike", "base_rate": 1, "burst_rate": 20, "burst_s": 2, "period_s": 5},
            Spike(base_rate=1, burst_rate=20, burst_s=2, period_s=5, offset_s=0),
        ),
        (
            {"process": "spike", "base_rate": 0, "burst_rate": 20, "burst_s": 0.05, "period_s": 0.1, "offset_s": 9.9},
            Spike(base_rate=0, burst_rate=20, burst_s=0.05, period_s=0.1, offset_s=9.9),
        ),
    ],
)
def test_each_process_parses_from_its_yaml_form(document: dict[str, Any], expected: Arrival) -> None:
    problems = Problems()

    assert parse_arrival(document, "a", problems, duration_s=10) == expected
    assert not problems


def test_steps_that_add_up_to_the_duration_within_rounding_are_accepted() -> None:
    problems = Problems()
    document = {"process": "step", "steps": [{"rate": 1, "duration_s": 0.1}] * 10}

    assert parse_arrival(document, "a", problems, duration_s=1.0) is not None
    assert not problems


def test_without_a_known_duration_the_steps_are_not_checked_against_it() -> None:
    problems = Problems()

    assert parse_arrival({"process": "step", "steps": [{"rate": 1, "duration_s": 3}]}, "a", problems, duration_s=None)
    assert not problems


_GAMMA = {"process": "gamma", "rate": 5}
_SPIKE = {"process": "spike", "base_rate": 1, "burst_rate": 20, "burst_s": 2, "period_s": 5}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("poisson", ["a: must be a mapping, got a string"]),
        ({"rate": 1}, ["a.process: is required"]),
        (
            {"process": "linear", "rate": 1},
            ["a.process: must be one of constant, poisson, gamma, step, spike, trace; got 'linear'"],
        ),
        ({"process": "constant"}, ["a.rate: is required"]),
        ({"process": "poisson", "rate": -1}, ["a.rate: must be > 0"]),
        ({"process": "constant", "rate": 1, "burstiness": 2}, ["a.burstiness: unknown key"]),
        ({**_GAMMA, "burstiness": 0}, ["a.burstiness: must be >= 0.01"]),
        ({**_GAMMA, "burstiness": 1e-300}, ["a.burstiness: must be >= 0.01"]),
        ({**_GAMMA, "burstiness": 101}, ["a.burstiness: must be <= 100"]),
        ({"process": "step", "steps": []}, ["a.steps: must not be empty"]),
        (
            {"process": "step", "steps": [{"rate": 1, "duration_s": 4}]},
            ["a.steps: durations must add up to the phase's duration_s (10), got 4"],
        ),
        (
            {"process": "step", "steps": [{"rate": 0, "duration_s": 10}]},
            ["a.steps: at least one step must have rate > 0"],
        ),
        (
            {"process": "step", "steps": [{"rate": -1, "duration_s": 5}, 5]},
            ["a.steps[0].rate: must be >= 0", "a.steps[1]: must be a mapping, got a number"],
        ),
        ({"process": "step", "steps": [{"rate": 1, "duration_s": 0}]}, ["a.steps[0].duration_s: must be > 0"]),
        ({**_SPIKE, "burst_s": 5}, ["a.burst_s: must be shorter than period_s (5)"]),
        ({**_SPIKE, "offset_s": 10}, ["a.offset_s: must be inside the phase (< duration_s 10)"]),
        ({**_SPIKE, "burst_rate": 0}, ["a.burst_rate: must be > 0"]),
        ({**_SPIKE, "base_rate": -1}, ["a.base_rate: must be >= 0"]),
        ({**_SPIKE, "burst_s": 1e-9, "period_s": 1e-8}, ["a.period_s: must be >= 0.1"]),
    ],
)
def test_an_invalid_arrival_is_reported_with_its_path(document: object, expected: list[str]) -> None:
    problems = Problems()

    parse_arrival(document, "a", problems, duration_s=10)

    assert [str(p) for p in problems.items] == expected
