"""Request-shape distributions: their YAML forms, their errors, and what sampling them gives."""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cliffwatch.domain.scenario.distributions import Choice, Distribution, Fixed, LogNormal, Uniform, parse_distribution
from cliffwatch.domain.validation import Problems


def _samples(distribution: Distribution, *, seed: int, n: int = 100) -> list[int]:
    rng = random.Random(seed)
    return [distribution.sample(rng) for _ in range(n)]


def _parse(value: object, *, minimum: int = 1) -> tuple[Distribution | None, list[str]]:
    problems = Problems()
    result = parse_distribution(value, "d", problems, minimum=minimum)
    return result, [str(p) for p in problems.items]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (128, Fixed(value=128)),
        (128.0, Fixed(value=128)),
        ({"dist": "fixed", "value": 7}, Fixed(value=7)),
        ({"dist": "uniform", "min": 10, "max": 20}, Uniform(low=10, high=20)),
        ({"dist": "uniform", "min": 5, "max": 5}, Uniform(low=5, high=5)),
        ({"dist": "lognormal", "median": 200, "sigma": 0.5}, LogNormal(median=200, sigma=0.5, low=1, high=1_000_000)),
        (
            {"dist": "lognormal", "median": 200, "sigma": 1, "min": 16, "max": 4096},
            LogNormal(median=200, sigma=1, low=16, high=4096),
        ),
        ({"dist": "choice", "values": [1, 2, 3]}, Choice(values=(1, 2, 3), weights=(1.0, 1.0, 1.0))),
        ({"dist": "choice", "values": [64, 512], "weights": [0.9, 0.1]}, Choice(values=(64, 512), weights=(0.9, 0.1))),
        ({"dist": "choice", "values": [1, 2], "weights": [0, 3]}, Choice(values=(1, 2), weights=(0.0, 3.0))),
    ],
)
def test_each_yaml_form_parses_into_its_distribution(value: object, expected: Distribution) -> None:
    assert _parse(value) == (expected, [])


def test_the_minimum_applies_to_every_form() -> None:
    assert _parse(0, minimum=0) == (Fixed(value=0), [])
    assert _parse(0) == (None, ["d: must be >= 1"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, ["d: must be >= 1"]),
        (1.5, ["d: must be a whole number, got 1.5"]),
        ("128", ["d: must be a number, got a string"]),
        (True, ["d: must be a number, got a boolean"]),
        (None, ["d: must be a number, got null"]),
        ([1, 2], ["d: must be a number, got a list"]),
        ({"value": 3}, ["d.dist: is required"]),
        ({"dist": "normal", "mean": 3}, ["d.dist: must be one of fixed, uniform, lognormal, choice; got 'normal'"]),
        ({"dist": "fixed"}, ["d.value: is required"]),
        ({"dist": "fixed", "value": 3, "max": 4}, ["d.max: unknown key"]),
        ({"dist": "uniform", "min": 20, "max": 10}, ["d.max: must be >= min (20)"]),
        ({"dist": "uniform", "min": 0, "max": 10}, ["d.min: must be >= 1"]),
        ({"dist": "uniform", "max": 10}, ["d.min: is required"]),
        ({"dist": "lognormal", "median": 100}, ["d.sigma: is required"]),
        ({"dist": "lognormal", "median": 100, "sigma": 0}, ["d.sigma: must be > 0"]),
        ({"dist": "lognormal", "median": 100, "sigma": 6}, ["d.sigma: must be <= 5"]),
        ({"dist": "lognormal", "median": 0.5, "sigma": 1}, ["d.median: must be >= 1"]),
        ({"dist": "lognormal", "median": 100, "sigma": 1, "min": 50, "max": 10}, ["d.max: must be >= min (50)"]),
        ({"dist": "choice", "values": []}, ["d.values: must not be empty"]),
        ({"dist": "choice", "values": [1, 0]}, ["d.values[1]: must be >= 1"]),
        (
            {"dist": "choice", "values": [1, 2], "weights": [1]},
            ["d.weights: must have one weight per value (2), got 1"],
        ),
        ({"dist": "choice", "values": [1, 2], "weights": [0, 0]}, ["d.weights: must not all be zero"]),
        ({"dist": "choice", "values": [1, 2], "weights": [1, -1]}, ["d.weights[1]: must be >= 0"]),
        ({"dist": "choice", "values": [1, 2], "weights": None}, ["d.weights: must be a list, got null"]),
        ({"dist": "choice", "values": [1, 2], "weights": 3}, ["d.weights: must be a list, got a number"]),
        (
            {"dist": "choice", "values": [1, 2], "weights": [1e308, 1e308]},
            ["d.weights: must add up to a finite number"],
        ),
    ],
)
def test_an_invalid_distribution_is_reported_once_with_its_path(value: object, expected: list[str]) -> None:
    assert _parse(value)[1] == expected


_distributions = st.one_of(
    st.builds(Fixed, value=st.integers(1, 10_000)),
    st.tuples(st.integers(1, 10_000), st.integers(0, 10_000)).map(lambda t: Uniform(low=t[0], high=t[0] + t[1])),
    st.builds(
        lambda median, sigma, low, span: LogNormal(median=median, sigma=sigma, low=low, high=low + span),
        median=st.floats(1, 1e307),
        sigma=st.floats(0.01, 5),
        low=st.integers(1, 1000),
        span=st.integers(0, 10**6),
    ),
    st.lists(st.tuples(st.integers(1, 10_000), st.floats(0.01, 100)), min_size=1, max_size=5).map(
        lambda pairs: Choice(values=tuple(v for v, _ in pairs), weights=tuple(w for _, w in pairs))
    ),
)


def _bounds(distribution: Distribution) -> tuple[int, int]:
    if isinstance(distribution, Fixed):
        return distribution.value, distribution.value
    if isinstance(distribution, Choice):
        return min(distribution.values), max(distribution.values)
    return distribution.low, distribution.high


@settings(max_examples=200, deadline=None)
@given(distribution=_distributions, seed=st.integers(0, 2**32))
def test_samples_are_whole_numbers_within_the_distributions_bounds(distribution: Distribution, seed: int) -> None:
    rng = random.Random(seed)
    low, high = _bounds(distribution)

    samples = [distribution.sample(rng) for _ in range(50)]

    assert all(isinstance(s, int) and low <= s <= high for s in samples)
    if isinstance(distribution, Choice):
        assert set(samples) <= set(distribution.values)


def test_a_lognormal_with_a_huge_median_and_wide_sigma_samples_without_overflowing() -> None:
    distribution = LogNormal(median=1e307, sigma=5, low=1, high=4096)
    rng = random.Random(1)

    assert {distribution.sample(rng) for _ in range(1000)} <= set(range(1, 4097))


def test_choice_weights_are_respected() -> None:
    distribution = Choice(values=(1, 2, 3), weights=(1, 0, 3))
    rng = random.Random(2)
    n = 20_000

    counts = Counter(distribution.sample(rng) for _ in range(n))

    assert counts[2] == 0
    # share of 3 is binomial(n, 0.75): standard error sqrt(0.75 × 0.25 / n) ≈ 0.003
    assert abs(counts[3] / n - 0.75) < 5 * math.sqrt(0.75 * 0.25 / n)


def test_a_uniform_distribution_reaches_both_ends_evenly() -> None:
    rng = random.Random(3)
    n = 20_000

    counts = Counter(Uniform(low=1, high=4).sample(rng) for _ in range(n))

    assert set(counts) == {1, 2, 3, 4}
    assert all(abs(c / n - 0.25) < 5 * math.sqrt(0.25 * 0.75 / n) for c in counts.values())


def test_a_lognormal_samples_around_its_median() -> None:
    rng = random.Random(4)
    distribution = LogNormal(median=200, sigma=0.5, low=1, high=1_000_000)

    samples = [distribution.sample(rng) for _ in range(20_000)]

    # the sample median's standard error is about 1.25 × sigma / sqrt(n) in log space, i.e. ≈ 0.4 %
    assert statistics.median(samples) == pytest.approx(200, rel=0.03)


def test_a_lognormal_clamps_to_its_bounds() -> None:
    rng = random.Random(5)
    distribution = LogNormal(median=100, sigma=3, low=50, high=150)

    samples = {distribution.sample(rng) for _ in range(2000)}

    assert min(samples) == 50
    assert max(samples) == 150


@pytest.mark.parametrize(
    "distribution",
    [
        Uniform(low=1, high=1000),
        LogNormal(median=100, sigma=1, low=1, high=10_000),
        Choice(values=(1, 2, 3), weights=(1, 1, 1)),
    ],
)
def test_the_same_seed_gives_the_same_samples_and_another_seed_others(distribution: Distribution) -> None:
    assert _samples(distribution, seed=9) == _samples(distribution, seed=9)
    assert _samples(distribution, seed=9) != _samples(distribution, seed=10)


@pytest.mark.parametrize(
    ("distribution", "mean"),
    [
        (Fixed(value=5), 5),
        (Uniform(low=10, high=20), 15),
        (LogNormal(median=100, sigma=1, low=1, high=10**6), 100 * math.exp(0.5)),
        (Choice(values=(10, 20), weights=(3, 1)), 12.5),
    ],
)
def test_the_declared_mean_is_the_distributions_mean(distribution: Distribution, mean: float) -> None:
    assert distribution.mean == pytest.approx(mean)


@pytest.mark.parametrize(
    ("distribution", "text"),
    [
        (Fixed(value=5), "5"),
        (Uniform(low=1, high=9), "uniform 1..9"),
        (LogNormal(median=100, sigma=0.5, low=1, high=9), "lognormal median 100 sigma 0.5"),
        (Choice(values=(1, 2), weights=(3, 1)), "choice 1×3, 2×1"),
    ],
)
def test_describe_names_the_distribution_and_its_parameters(distribution: Distribution, text: str) -> None:
    assert distribution.describe() == text


@pytest.mark.parametrize(
    ("distribution", "largest"),
    [
        (Fixed(value=128), 128),
        (Uniform(low=10, high=20), 20),
        (LogNormal(median=200, sigma=1, low=16, high=4096), 4096),
        (Choice(values=(64, 2048, 512), weights=(1, 1, 1)), 2048),
        (Choice(values=(64, 2048, 512), weights=(1, 0, 1)), 512),  # a value of weight 0 is never drawn
    ],
)
def test_the_largest_value_bounds_every_sample(distribution: Distribution, largest: int) -> None:
    """``largest`` is what caps judge: no sample is ever above it, and it is reachable."""
    assert distribution.largest == largest
    samples = _samples(distribution, seed=3, n=2_000)
    assert max(samples) <= largest


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (101, "d: must be <= 100"),
        ({"dist": "uniform", "min": 1, "max": 101}, "d.max: must be <= 100"),
        ({"dist": "lognormal", "median": 50, "sigma": 1, "max": 101}, "d.max: must be <= 100"),
        ({"dist": "choice", "values": [1, 101]}, "d.values[1]: must be <= 100"),
    ],
)
def test_a_maximum_bounds_every_form(value: object, problem: str) -> None:
    problems = Problems()
    assert parse_distribution(value, "d", problems, maximum=100) is None
    assert [str(p) for p in problems.items] == [problem]


def test_a_lognormal_without_max_is_clamped_at_the_maximum() -> None:
    problems = Problems()
    parsed = parse_distribution({"dist": "lognormal", "median": 50, "sigma": 1}, "d", problems, maximum=100)
    assert parsed == LogNormal(median=50, sigma=1, low=1, high=100)
