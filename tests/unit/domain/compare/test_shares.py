"""Two shares compared: the two-proportion test's p-value and the spread what could be detected is told from."""

from __future__ import annotations

import pytest

from cliffwatch.domain.compare.shares import compare_shares


def test_a_clear_drop_has_the_pooled_tests_p_value() -> None:
    found = compare_shares(90, 100, 75, 100)
    assert found.difference == pytest.approx(-0.15)
    assert found.p_value == pytest.approx(0.00525, abs=2e-4)  # z = -2.79 by the pooled test


def test_the_same_share_has_p_one_and_small_samples_a_wide_spread() -> None:
    assert compare_shares(95, 100, 95, 100).p_value == pytest.approx(1.0)
    few, many = compare_shares(9, 10, 7, 10), compare_shares(900, 1000, 700, 1000)
    assert few.p_value > 0.2  # 90 % against 70 % of ten requests each is not evidence
    assert many.p_value < 1e-6
    assert few.spread > 5 * many.spread


def test_two_perfect_runs_differ_in_nothing_and_still_bound_what_they_could_detect() -> None:
    perfect = compare_shares(200, 200, 200, 200)
    assert perfect.p_value == 1.0
    assert 0 < perfect.spread < 0.05
    with pytest.raises(ValueError, match="requests offered"):
        compare_shares(0, 0, 1, 1)
    with pytest.raises(ValueError, match="between 0 and"):
        compare_shares(5, 4, 1, 1)
