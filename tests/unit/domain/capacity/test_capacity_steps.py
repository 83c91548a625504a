"""A measured step, the Wilson interval, judging a rate on its pooled trials, and settling it."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from capacity_kit import step
from hypothesis import given
from hypothesis import strategies as st

from cliffwatch.domain.capacity.capacity import (
    Interval,
    PooledRate,
    SettledRate,
    StepStats,
    StepVerdict,
    judge,
    pool_rates,
    settle,
    wilson,
)


# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3 (Wilson score,
# no continuity correction), 95 %, to four decimals.
@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_matches_the_published_intervals(successes: int, trials: int, low: float, high: float) -> None:
    interval = wilson(successes, trials)

    assert interval.low == pytest.approx(low, abs=5e-5)
    assert interval.high == pytest.approx(high, abs=5e-5)


def test_wilson_matches_the_closed_form_for_all_successes() -> None:
    # With p = 1 the low end is n / (n + z²).
    z = 1.959963984540054

    assert wilson(40, 40).low == pytest.approx(40 / (40 + z * z))
    assert wilson(40, 40).high == 1.0


@given(n=st.integers(min_value=1, max_value=5000), data=st.data())
def test_wilson_is_symmetric_and_contains_the_point_estimate(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))

    interval, mirror = wilson(k, n), wilson(n - k, n)

    assert interval.low <= k / n <= interval.high
    assert interval.low == pytest.approx(1 - mirror.high, abs=1e-12)


def test_a_wider_confidence_gives_a_wider_interval() -> None:
    narrow, wide = wilson(90, 100, confidence=0.8), wilson(90, 100, confidence=0.99)

    assert wide.low < narrow.low
    assert wide.high > narrow.high


def test_wilson_of_nothing_is_the_whole_unit_interval() -> None:
    assert wilson(0, 0) == Interval(low=0.0, high=1.0)


@pytest.mark.parametrize(("successes", "trials", "confidence"), [(3, 2, 0.95), (-1, 2, 0.95), (1, 2, 1.0)])
def test_wilson_refuses_impossible_counts_and_confidences(successes: int, trials: int, confidence: float) -> None:
    with pytest.raises(ValueError, match=r"must be|need"):
        wilson(successes, trials, confidence=confidence)


def test_an_interval_needs_its_ends_in_order() -> None:
    with pytest.raises(ValueError, match="low <= high"):
        Interval(low=0.6, high=0.5)


def test_a_step_whose_counts_do_not_add_up_is_refused() -> None:
    good = step(10.0)
    fields = {name: getattr(good, name) for name in good.__dataclass_fields__}

    with pytest.raises(ValueError, match="add up to"):
        StepStats(**{**fields, "offered": good.offered + 1})


def test_a_step_round_trips_through_json() -> None:
    original = step(10.0, on_time=150, timeout=20, p99_e2e_ms=None, generator_limited=True)

    again = StepStats.from_dict(json.loads(json.dumps(original.to_dict())))

    assert again == original
    assert original.to_dict()["attainment"] == 0.75
    assert original.timeout_share == 0.1


def test_a_step_keeps_its_late_requests_by_bound_through_json() -> None:
    original = step(10.0, offered=200, on_time=150, late_by={"ttft": 50, "e2e": 12})

    data = json.loads(json.dumps(original.to_dict()))

    assert data["late_by"] == {"ttft": 50, "e2e": 12}
    assert StepStats.from_dict(data) == original
    del data["late_by"]  # a document written before late_by was recorded
    assert StepStats.from_dict(data).late_by == {}


def test_a_step_counts_its_redirects_and_a_step_stored_before_them_reads_as_none() -> None:
    """Redirects are one of the counts that add up to offered, kept through JSON; a document written before
    the class existed has no count for it and reads back as 0."""
    original = step(10.0, offered=200, on_time=150, redirect=30)

    data = json.loads(json.dumps(original.to_dict()))

    assert (original.redirect, original.late, original.share_of("redirect")) == (30, 20, 0.15)
    assert StepStats.from_dict(data) == original
    older = step(10.0, offered=200, on_time=150).to_dict()
    del older["redirect"]
    assert StepStats.from_dict(older).redirect == 0


@pytest.mark.parametrize(
    ("late_by", "message"),
    [({"ttft": 51}, "within 0..late"), ({"e2e": -1}, "within 0..late"), ({"queue": 1}, "unknown bounds: queue")],
)
def test_late_counts_by_bound_must_name_a_bound_and_stay_within_the_late_count(
    late_by: dict[str, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        step(10.0, offered=200, on_time=150, late_by=late_by)


@pytest.mark.parametrize(
    ("on_time", "verdict"),
    [(2000, StepVerdict.GOOD), (1900, StepVerdict.BAD), (1985, StepVerdict.UNSURE)],
)
def test_judge_reads_the_interval_against_the_target(on_time: int, verdict: StepVerdict) -> None:
    assert judge([step(10.0, offered=2000, on_time=on_time)], 0.99) is verdict


def test_judge_pools_the_trials_before_judging() -> None:
    # 398 of 400 alone straddles 99 %; three such trials (1194 of 1200) still do, 1196 of 1200 clear it.
    trials = [step(9.2, 1, offered=400, on_time=398), step(9.2, 2, offered=400, on_time=399)]

    assert judge(trials[:1], 0.99) is StepVerdict.UNSURE
    assert judge([*trials, step(9.2, 3, offered=400, on_time=399)], 0.99) is StepVerdict.GOOD


def test_a_generator_limited_trial_makes_the_rate_invalid() -> None:
    trials = [step(10.0), step(10.0, 2, generator_limited=True)]

    assert judge(trials, 0.99) is StepVerdict.INVALID


@pytest.mark.parametrize(
    ("steps", "target", "message"),
    [([], 0.99, "at least one"), ([step(1.0), step(2.0)], 0.99, "pools one rate"), ([step(1.0)], 1.0, "target")],
)
def test_judge_refuses_what_it_cannot_judge(steps: list[StepStats], target: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        judge(steps, target)


def test_pooling_sums_counts_weights_rates_by_duration_and_keeps_the_worst_p99() -> None:
    steps = [
        step(10.0, 1, duration_s=10, on_time=90, offered=100, tokens_per_s=100.0, p99_e2e_ms=900.0),
        step(10.0, 2, duration_s=30, on_time=300, offered=300, tokens_per_s=200.0, p99_e2e_ms=1500.0),
        step(5.0, 1),
    ]

    low, high = pool_rates(steps, target=0.99)

    assert low.rate == 5.0
    assert (high.offered, high.on_time, len(high.trials)) == (400, 390, 2)
    assert high.tokens_per_s == pytest.approx(175.0)
    assert high.p99_e2e_ms == 1500.0
    assert high.p99_ttft_ms == 300.0
    assert high.interval == wilson(390, 400)
    assert high.attainment == pytest.approx(0.975)


def pooled(*steps: StepStats) -> PooledRate:
    (only,) = pool_rates(steps, target=0.99)
    return only


@pytest.mark.parametrize(("on_time", "verdict"), [(2000, StepVerdict.GOOD), (1900, StepVerdict.BAD)])
def test_a_clear_interval_settles_without_the_point_estimate(on_time: int, verdict: StepVerdict) -> None:
    settled = settle(pooled(step(10.0, offered=2000, on_time=on_time)), target=0.99, max_trials=3)

    assert settled is not None
    assert (settled.verdict, settled.on_point_estimate) == (verdict, False)


def test_a_straddling_rate_is_due_another_trial_when_perfect_trials_could_clear_it() -> None:
    assert settle(pooled(step(9.2, offered=400, on_time=398)), target=0.99, max_trials=3) is None


def test_a_straddling_rate_that_no_trial_could_clear_settles_on_the_point_estimate() -> None:
    # 40 of 40: even 120 of 120 leaves the low end at 97 %.
    settled = settle(pooled(step(2.0, offered=40)), target=0.99, max_trials=3)

    assert settled is not None
    assert (settled.verdict, settled.on_point_estimate) == (StepVerdict.GOOD, True)


def test_a_rate_leaning_bad_is_due_another_trial_when_failures_could_clear_it() -> None:
    assert settle(pooled(step(1.0, offered=20, on_time=19)), target=0.99, max_trials=3) is None


def test_at_max_trials_a_straddling_rate_settles_on_the_point_estimate() -> None:
    trials = [step(9.2, t, offered=400, on_time=398) for t in (1, 2, 3)]

    settled = settle(pooled(*trials), target=0.99, max_trials=3)

    assert settled is not None
    assert (settled.verdict, settled.on_point_estimate) == (StepVerdict.GOOD, True)


def test_a_point_estimate_below_the_target_settles_bad() -> None:
    trials = [step(9.2, 1, offered=400, on_time=395)]

    settled = settle(pooled(*trials), target=0.99, max_trials=1)

    assert settled is not None
    assert (settled.verdict, settled.on_point_estimate) == (StepVerdict.BAD, True)


def test_a_final_settlement_never_asks_for_another_trial() -> None:
    settled = settle(pooled(step(9.2, offered=400, on_time=398)), target=0.99, max_trials=3, final=True)

    assert settled is not None
    assert settled.on_point_estimate


def test_a_rate_where_nothing_was_offered_is_measured_again_and_invalid_only_when_always_empty() -> None:
    """A Poisson window at 0.5 req/s is empty once in 150 steps: it measured nothing, so it must not become the
    ceiling of the search (a sweep once ended at 0.42 req/s on one)."""
    assert settle(pooled(step(0.5, offered=0)), target=0.99, max_trials=3) is None
    empty = [step(0.5, trial, offered=0) for trial in (1, 2, 3)]
    settled = settle(pooled(*empty), target=0.99, max_trials=3)
    assert settled is not None
    assert settled.verdict is StepVerdict.INVALID
    last = settle(pooled(step(0.5, offered=0)), target=0.99, max_trials=3, final=True)
    assert last is not None
    assert last.verdict is StepVerdict.INVALID


def test_a_settled_verdict_is_never_unsure() -> None:
    with pytest.raises(ValueError, match="not settled"):
        SettledRate(rate=1.0, verdict=StepVerdict.UNSURE, on_point_estimate=False, pooled=pooled(step(1.0)))


def test_a_settled_rate_round_trips_through_json_given_its_steps() -> None:
    steps = [step(9.2, 1, offered=400, on_time=398), step(9.2, 2, offered=400, on_time=397, p99_e2e_ms=None)]
    settled = settle(pooled(*steps), target=0.99, max_trials=2)
    assert settled is not None

    again = SettledRate.from_dict(json.loads(json.dumps(settled.to_dict())), steps=steps)

    assert again == settled
    assert not math.isnan(again.pooled.tokens_per_s)


def test_a_pooled_rate_refuses_steps_that_do_not_match_its_trial_count() -> None:
    data = pooled(step(9.2), step(9.2, 2)).to_dict()

    with pytest.raises(ValueError, match="pooled 2 trials"):
        PooledRate.from_dict(data, steps=[step(9.2)])


def test_a_rate_whose_queue_grew_is_due_an_extended_trial_whatever_its_attainment_or_max_trials() -> None:
    grew = step(3.5, offered=2000, growing=True)  # every request on time: the SLO alone would call it good
    assert settle(pooled(grew), target=0.99, max_trials=1) is None


def test_a_queue_still_growing_over_the_extended_window_makes_the_rate_bad() -> None:
    trials = [step(3.5, 1, offered=2000, growing=True), step(3.5, 2, offered=6000, growing=True, extended=True)]
    settled = settle(pooled(*trials), target=0.99, max_trials=3)
    assert settled is not None
    assert (settled.verdict, settled.on_growth, settled.on_point_estimate) == (StepVerdict.BAD, True, False)
    assert settled.growth is not None
    assert settled.growth.growing
    assert SettledRate.from_dict(json.loads(json.dumps(settled.to_dict())), steps=trials) == settled


def test_a_queue_that_stopped_growing_over_the_extended_window_leaves_the_rate_to_its_attainment() -> None:
    trials = [step(3.2, 1, offered=2000, growing=True), step(3.2, 2, offered=6000, growing=False, extended=True)]
    settled = settle(pooled(*trials), target=0.99, max_trials=3)
    assert settled is not None
    assert (settled.verdict, settled.on_growth) == (StepVerdict.GOOD, False)


def test_a_rate_already_bad_by_its_attainment_needs_no_extended_trial() -> None:
    settled = settle(pooled(step(5.0, offered=2000, on_time=1500, growing=True)), target=0.99, max_trials=3)
    assert settled is not None
    assert (settled.verdict, settled.on_growth) == (StepVerdict.BAD, False)


def test_a_growing_queue_the_search_had_no_step_left_to_extend_is_not_called_usable() -> None:
    settled = settle(pooled(step(3.5, offered=2000, growing=True)), target=0.99, max_trials=3, final=True)
    assert settled is not None
    assert (settled.verdict, settled.on_growth) == (StepVerdict.BAD, True)


def test_a_step_keeps_its_growth_reading_and_server_signals_through_json() -> None:
    original = step(3.5, growing=True, extended=True,
                    server={"waiting": {"first": 0.0, "last": 30.0, "min": 0.0, "max": 31.0, "mean": 15.0,
                                        "slope_per_s": 1.0, "points": 30}})  # fmt: skip
    again = StepStats.from_dict(json.loads(json.dumps(original.to_dict())))
    assert again == original
    assert again.growing
    assert again.server["waiting"]["max"] == 31.0
    older = original.to_dict()
    for key in ("growth", "extended", "server"):
        del older[key]
    assert StepStats.from_dict(older).growth is None  # a step stored before the check: not checked


def test_a_step_keeps_when_it_started_and_whether_it_was_the_recheck_and_an_older_step_reads_as_neither() -> None:
    original = replace(step(10.0, trial=2), started_s=312.5, recheck=True)

    data = json.loads(json.dumps(original.to_dict()))

    assert (data["started_s"], data["recheck"]) == (312.5, True)
    assert StepStats.from_dict(data) == original
    del data["started_s"], data["recheck"]
    assert (StepStats.from_dict(data).started_s, StepStats.from_dict(data).recheck) == (None, False)


def test_the_end_of_sweep_recheck_asks_for_no_extended_trial_even_when_its_queue_grew() -> None:
    """The recheck is the drift rule's to read; a queue that grew in it does not reopen the search's rate."""
    first, recheck = step(10.0, trial=1, growing=False), replace(step(10.0, trial=2, growing=True), recheck=True)
    (pooled,) = pool_rates([first, recheck], target=0.99)

    settled = settle(pooled, target=0.99, max_trials=3)

    assert settled is not None
    assert (settled.verdict, settled.on_growth) == (StepVerdict.GOOD, False)
    assert settled.growth == first.growth


def test_a_settled_rate_keeps_the_slower_trial_it_was_judged_on_through_json() -> None:
    trials = [step(4.0, 1, offered=3000), step(4.0, 2, offered=3000, on_time=2950)]
    (pooled,) = pool_rates(trials, target=0.99)
    (slower,) = pool_rates(trials[1:], target=0.99)
    settled = SettledRate(rate=4.0, verdict=StepVerdict.BAD, on_point_estimate=False, pooled=pooled, slowest=slower)

    data = json.loads(json.dumps(settled.to_dict()))

    assert data["slowest"]["trial"] == 2
    assert SettledRate.from_dict(data, steps=trials) == settled
    assert (settled.judged, settled.slowest_trial) == (slower, 2)
    del data["slowest"]  # a document written before the drift rule
    assert SettledRate.from_dict(data, steps=trials).judged == pooled
