"""Two latency percentiles compared by the exact bootstrap of their histograms."""

from __future__ import annotations

import random

import pytest

from cliffwatch.domain.compare.quantiles import answers_needed, compare_quantiles
from cliffwatch.domain.histogram import Histogram


def lognormal(mu: float, n: int, seed: int) -> Histogram:
    rng, histogram = random.Random(seed), Histogram()
    for _ in range(n):
        histogram.add(rng.lognormvariate(mu, 0.5))
    return histogram


def test_same_distributions_are_called_different_at_about_the_tests_level() -> None:
    """Under no difference, p < 0.05 about 5 % of the time: the test is neither blind nor trigger-happy."""
    rng = random.Random(1)
    p_values = [compare_quantiles(lognormal(5, 1000, i), lognormal(5, 1000, 500 + i), 0.5, rng=rng, resamples=500)
                for i in range(120)]  # fmt: skip
    assert all(p is not None for p in p_values)
    share = sum(1 for p in p_values if p is not None and p.p_value < 0.05) / len(p_values)
    assert share < 0.12


def test_a_ten_percent_slower_median_is_found_with_its_interval() -> None:
    a, b = lognormal(5, 3000, 1), lognormal(5.1, 3000, 2)  # medians e^5 = 148 ms and e^5.1 = 164 ms
    found = compare_quantiles(a, b, 0.5, rng=random.Random(3))
    assert found is not None
    assert found.difference == pytest.approx(b.quantile(0.5) - a.quantile(0.5))  # type: ignore[operator]
    assert found.p_value < 1e-4
    assert found.interval is not None
    assert 0 < found.interval.low < found.difference < found.interval.high


def test_the_spread_shrinks_with_more_answers() -> None:
    small = compare_quantiles(lognormal(5, 200, 1), lognormal(5, 200, 2), 0.5, rng=random.Random(0))
    large = compare_quantiles(lognormal(5, 5000, 1), lognormal(5, 5000, 2), 0.5, rng=random.Random(0))
    assert small is not None
    assert large is not None
    assert large.spread < small.spread / 3  # √25 = 5 in theory


def test_a_percentile_near_the_edge_needs_enough_answers_beyond_it() -> None:
    assert answers_needed(0.5) == 10
    assert answers_needed(0.99) == 500
    few = lognormal(5, 499, 1)
    assert compare_quantiles(few, lognormal(5, 5000, 2), 0.99, rng=random.Random(0)) is None
    assert compare_quantiles(few, lognormal(5, 5000, 2), 0.5, rng=random.Random(0)) is not None


def test_one_value_each_is_certain_of_its_difference() -> None:
    a, b = Histogram(), Histogram()
    for _ in range(20):
        a.add(100.0)
        b.add(120.0)
    found = compare_quantiles(a, b, 0.5, rng=random.Random(0))
    assert found is not None
    assert found.spread == 0
    assert found.p_value == 0.0
    with pytest.raises(ValueError, match="percentile"):
        compare_quantiles(a, b, 1.0, rng=random.Random(0))
