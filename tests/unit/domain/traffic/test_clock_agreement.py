"""A worker's clock on another machine, measured by round trips: the shortest trip sets the offset, half of it
is the uncertainty, and a start that could be off by more than the bound makes the run invalid."""

from __future__ import annotations

import pytest

from cliffwatch.domain.traffic.clock_agreement import (
    SAME_CLOCK,
    ClockAgreement,
    ClockSample,
    agreement,
    skew_ms,
    skew_problem,
)

MS = 1_000_000
THEIRS_AHEAD = 7_000 * MS  # the worker's monotonic clock reads 7 s more than ours at the same instant


def trip(sent_ms: float, out_ms: float, back_ms: float, *, wall_ahead_ms: float = 0.0) -> ClockSample:
    """A round trip that took ``out_ms`` to reach the worker and ``back_ms`` to come back."""
    sent = round(sent_ms * MS)
    there = sent + round(out_ms * MS)
    return ClockSample(
        sent_ns=sent,
        their_ns=there + THEIRS_AHEAD,
        received_ns=there + round(back_ms * MS),
        our_wall_ns=10**18 + sent,
        their_wall_ns=10**18 + sent + round(wall_ahead_ms * MS),
    )


def test_a_symmetric_trip_gives_the_offset_exactly() -> None:
    found = agreement([trip(0, 0.2, 0.2)])
    assert found.offset_ns == THEIRS_AHEAD
    assert found.uncertainty_ns == round(0.2 * MS)
    assert not found.same_clock


def test_the_shortest_trip_wins_and_a_lopsided_one_is_off_by_at_most_half_its_length() -> None:
    found = agreement([trip(0, 9.0, 0.1), trip(20, 0.3, 0.1), trip(40, 0.1, 6.0)])
    assert found.uncertainty_ns == round(0.2 * MS)  # from the 0.4 ms trip
    assert abs(found.offset_ns - THEIRS_AHEAD) == round(0.1 * MS)
    assert abs(found.offset_ns - THEIRS_AHEAD) <= found.uncertainty_ns


def test_the_start_is_sent_in_the_workers_clock() -> None:
    found = agreement([trip(0, 0.1, 0.1)])
    assert found.to_worker(5 * MS) == 5 * MS + THEIRS_AHEAD
    assert SAME_CLOCK.to_worker(5 * MS) == 5 * MS


def test_the_wall_clocks_are_compared_on_the_same_trip() -> None:
    assert agreement([trip(0, 0.1, 0.1, wall_ahead_ms=12.5)]).wall_offset_ns == round(12.5 * MS)


def test_no_trip_is_no_agreement() -> None:
    with pytest.raises(ValueError, match="at least one round trip"):
        agreement([])


def test_one_machine_has_no_skew() -> None:
    assert skew_ms(SAME_CLOCK, None) == 0.0


def test_the_skew_adds_both_uncertainties_and_how_far_the_offset_moved() -> None:
    start = ClockAgreement(offset_ns=THEIRS_AHEAD, uncertainty_ns=round(0.3 * MS), same_clock=False)
    end = ClockAgreement(offset_ns=THEIRS_AHEAD + 2 * MS, uncertainty_ns=round(0.2 * MS), same_clock=False)
    assert skew_ms(start, end) == pytest.approx(2.5)
    assert skew_ms(start, None) == pytest.approx(0.3), "a worker gone by the end: only the start is known"


def test_a_skew_past_the_bound_says_who_and_by_how_much() -> None:
    assert skew_problem("generator worker 2 of 4 on 10.0.0.7", 5.0, bound_ms=5.0) is None
    problem = skew_problem("generator worker 2 of 4 on 10.0.0.7", 12.34, bound_ms=5.0)
    assert problem is not None
    assert problem.startswith("generator worker 2 of 4 on 10.0.0.7: its clock was known only to within 12.3 ms")
    assert "bound 5 ms" in problem
