"""Two on-time shares compared: the two-proportion test's p-value, the intervals, and what could be detected."""

from __future__ import annotations

import pytest

from cliffwatch.domain.compare.shares import Change, compare_shares


def test_a_clear_drop_is_a_regression_with_its_p_value() -> None:
    found = compare_shares(90, 100, 75, 100)
    assert found.difference == pytest.approx(-0.15)
    assert found.p_value == pytest.approx(0.00525, abs=2e-4)  # z = -2.79 by the pooled test
    assert found.change is Change.REGRESSED
    assert found.a_interval.low > found.b_interval.high - 0.1


def test_a_rise_is_an_improvement_and_the_same_share_no_detectable_difference() -> None:
    assert compare_shares(75, 100, 90, 100).change is Change.IMPROVED
    same = compare_shares(95, 100, 95, 100)
    assert same.p_value == pytest.approx(1.0)
    assert same.change is Change.NO_DIFFERENCE


def test_small_samples_say_how_large_a_difference_could_hide_in_them() -> None:
    few = compare_shares(9, 10, 7, 10)
    assert few.change is Change.NO_DIFFERENCE  # 90 % against 70 % of ten requests each is not evidence
    assert few.detectable > 0.4
    many = compare_shares(900, 1000, 700, 1000)
    assert many.change is Change.REGRESSED
    assert many.detectable < 0.1


def test_two_perfect_runs_differ_in_nothing_and_still_bound_what_they_could_detect() -> None:
    perfect = compare_shares(200, 200, 200, 200)
    assert perfect.p_value == 1.0
    assert 0 < perfect.detectable < 0.1
    with pytest.raises(ValueError, match="requests offered"):
        compare_shares(0, 0, 1, 1)
