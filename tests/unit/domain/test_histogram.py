"""The latency histogram: quantiles within its relative accuracy, exact merges, lossless serialisation."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cliffwatch.domain.histogram import DEFAULT_ACCURACY, Histogram

_ZERO_BUCKET = 1e-3  # values at or below this share one bucket, read back as the minimum


def _histogram(values: list[float], accuracy: float = DEFAULT_ACCURACY) -> Histogram:
    hist = Histogram(accuracy)
    for value in values:
        hist.add(value)
    return hist


def _exact(values: list[float], q: float) -> float:
    """The recorded value at the histogram's rank for q (the lower of two neighbours)."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


_values = st.lists(
    st.one_of(
        st.floats(min_value=0, max_value=1e9, allow_nan=False),
        st.floats(min_value=0, max_value=2e-3),  # around the zero bucket's edge
        st.just(0.0),
    ),
    min_size=1,
    max_size=300,
)
_quantiles = st.sampled_from([0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0])


@settings(max_examples=300, deadline=None)
@given(values=_values, q=_quantiles, accuracy=st.sampled_from([0.01, 0.02, 0.05]))
def test_a_quantile_is_within_the_relative_accuracy_of_the_exact_one(
    values: list[float], q: float, accuracy: float
) -> None:
    estimate = _histogram(values, accuracy).quantile(q)
    exact = _exact(values, q)

    assert estimate is not None
    # relative error within the accuracy (plus float rounding at bucket edges); values in the zero
    # bucket are read back as the minimum, so they are only within the bucket's width
    assert abs(estimate - exact) <= accuracy * exact * (1 + 1e-9) + _ZERO_BUCKET


def test_quantiles_of_a_known_spread_are_within_one_percent() -> None:
    rng = random.Random(1)
    values = [rng.lognormvariate(5, 1.5) for _ in range(20_000)]
    hist = _histogram(values)

    for q in (0.5, 0.9, 0.99, 0.999):
        assert hist.quantile(q) == pytest.approx(_exact(values, q), rel=DEFAULT_ACCURACY)


@given(values=_values)
def test_the_extremes_are_exact(values: list[float]) -> None:
    hist = _histogram(values)

    assert hist.quantile(0) == min(values)
    assert hist.quantile(1) == max(values)
    assert hist.count == len(values)
    assert hist.mean == pytest.approx(math.fsum(values) / len(values))


@settings(max_examples=200, deadline=None)
@given(first=st.lists(st.floats(0, 1e7), max_size=100), second=st.lists(st.floats(0, 1e7), max_size=100))
def test_merging_equals_recording_everything_into_one(first: list[float], second: list[float]) -> None:
    merged = _histogram(first)
    merged.merge(_histogram(second))
    together = _histogram(first + second)

    merged_dict, together_dict = merged.to_dict(), together.to_dict()
    assert merged_dict.pop("total") == pytest.approx(together_dict.pop("total"))
    assert merged_dict == together_dict
    assert [merged.quantile(q) for q in (0.1, 0.5, 0.99)] == [together.quantile(q) for q in (0.1, 0.5, 0.99)]


def test_histograms_of_different_accuracy_cannot_merge() -> None:
    with pytest.raises(ValueError, match="different accuracy"):
        Histogram(0.01).merge(Histogram(0.02))


@given(values=st.lists(st.floats(0, 1e9), max_size=200))
def test_the_dict_form_survives_json_and_reads_back_exactly(values: list[float]) -> None:
    hist = _histogram(values)

    restored = Histogram.from_dict(json.loads(json.dumps(hist.to_dict())))

    assert restored.to_dict() == hist.to_dict()
    assert [restored.quantile(q) for q in (0, 0.5, 0.9, 1)] == [hist.quantile(q) for q in (0, 0.5, 0.9, 1)]
    assert restored.summary() == hist.summary()


def test_an_empty_histogram_has_no_quantiles_mean_or_max() -> None:
    hist = Histogram()

    assert hist.quantile(0.5) is None
    assert hist.quantile(0) is None
    assert hist.mean is None
    assert hist.summary() == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    assert hist.to_dict()["min"] is None
    assert Histogram.from_dict(hist.to_dict()).count == 0


def test_merging_an_empty_histogram_changes_nothing() -> None:
    hist = _histogram([1.0, 2.0, 3.0])
    before = hist.to_dict()

    hist.merge(Histogram())

    assert hist.to_dict() == before


def test_zero_values_are_recorded_and_read_back_as_zero() -> None:
    hist = _histogram([0.0, 0.0, 0.0, 10.0])

    assert hist.count == 4
    assert hist.quantile(0.5) == 0.0
    assert hist.quantile(1) == 10.0


def test_a_summary_rounds_to_microseconds_and_names_percentiles() -> None:
    hist = _histogram([1.23456] * 10)

    assert hist.summary((0.5, 0.999)) == {"count": 10, "mean": 1.235, "p50": 1.235, "p99.9": 1.235, "max": 1.235}


@pytest.mark.parametrize("value", [-1.0, -1e-9, float("nan"), float("inf"), float("-inf")])
def test_negative_and_non_finite_values_are_refused_and_leave_the_histogram_unchanged(value: float) -> None:
    hist = _histogram([5.0])
    before = hist.to_dict()

    with pytest.raises(ValueError, match=">= 0"):
        hist.add(value)

    assert hist.to_dict() == before


@pytest.mark.parametrize("q", [-0.1, 1.5, float("nan")])
def test_a_quantile_outside_zero_to_one_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="quantile must be in"):
        _histogram([1.0]).quantile(q)


@pytest.mark.parametrize("accuracy", [0, 1, -0.1, 1.5])
def test_an_accuracy_outside_zero_to_one_is_refused(accuracy: float) -> None:
    with pytest.raises(ValueError, match="accuracy must be in"):
        Histogram(accuracy)


def test_memory_grows_with_the_value_range_not_the_count() -> None:
    rng = random.Random(2)
    few = _histogram([rng.uniform(1, 1000) for _ in range(50_000)])
    many = _histogram([rng.uniform(1, 1000) for _ in range(500_000)])

    # log(1000) / log(1.001 / 0.999) ≈ 3,454 buckets at most, whatever the count
    assert len(few.to_dict()["bins"]) <= 3_460
    assert len(many.to_dict()["bins"]) <= 3_460


def test_the_default_reads_three_significant_digits() -> None:
    # a 20-ms server's medians 0.2 ms apart: at 1 % both read the same bucket, at 0.1 % they do not
    assert DEFAULT_ACCURACY == 0.001

    def run(median: float, accuracy: float = DEFAULT_ACCURACY) -> Histogram:
        return _histogram([10.0, *[median] * 99, 40.0], accuracy)  # min and max apart: the median is a bucket's

    assert run(21.75).quantile(0.5) == pytest.approx(21.75, rel=0.001)
    assert run(21.55).quantile(0.5) == pytest.approx(21.55, rel=0.001)
    assert run(21.75, 0.01).quantile(0.5) == run(21.55, 0.01).quantile(0.5)
