"""The capacity search: which rates it measures, when it repeats, and why it stops."""

from __future__ import annotations

from dataclasses import replace

import pytest
from capacity_kit import FakeTarget, drive, step
from hypothesis import given, settings
from hypothesis import strategies as st

from cliffwatch.domain.capacity.capacity import (
    CapacitySearch,
    NextStep,
    SearchConfig,
    StepVerdict,
    round_sig,
    summarize,
)
from cliffwatch.domain.capacity.capacity_search import confirming_requests
from cliffwatch.domain.capacity.sweep_spec import SweepMode, SweepSpec


def search(**overrides: object) -> CapacitySearch:
    return CapacitySearch(SearchConfig(**{"start": 2.0, "stop": 20.0, **overrides}))  # type: ignore[arg-type]


def bracket(s: CapacitySearch) -> tuple[float | None, float | None]:
    """The highest good rate and the lowest rate that was not good."""
    settled = s.settled()
    good = [r.rate for r in settled if r.verdict is StepVerdict.GOOD]
    failing = [r.rate for r in settled if r.verdict is not StepVerdict.GOOD]
    return max(good, default=None), min(failing, default=None)


def test_a_range_is_walked_in_evenly_spaced_steps_and_ends_without_a_cliff_when_all_are_good() -> None:
    s = search()

    asked = drive(s, FakeTarget(capacity=30))

    assert asked == [(2.0, 1), (5.6, 1), (9.2, 1), (12.8, 1), (16.4, 1), (20.0, 1)]
    assert s.finished_because == "no cliff found up to 20 req/s"


def test_the_coarse_pass_stops_at_the_first_bad_rate_and_bisection_brackets_the_capacity_within_5_percent() -> None:
    s = search()

    asked = drive(s, FakeTarget(capacity=10))

    assert [r for r, _ in asked[:4]] == [2.0, 5.6, 9.2, 12.8]
    assert [r for r, _ in asked[4:]] == [11.0, 10.1, 9.65]
    good, bad = bracket(s)
    assert good is not None
    assert bad is not None
    assert good <= 10 < bad
    assert (bad - good) / bad <= 0.05
    assert s.finished_because == "bracketed within 5 %"


def test_auto_doubles_from_the_start_and_ends_on_max_rate_itself() -> None:
    s = search(start=0.5, stop=None, auto=True, max_rate=100.0)

    asked = drive(s, FakeTarget(capacity=1e6))

    assert [r for r, _ in asked] == [0.5, 1, 2, 4, 8, 16, 32, 64, 100]
    assert s.finished_because == "no cliff found up to 100 req/s"


def test_auto_does_not_repeat_max_rate_when_doubling_lands_on_it() -> None:
    s = search(start=1.0, stop=None, auto=True, max_rate=8.0)

    assert [r for r, _ in drive(s, FakeTarget(capacity=1e6))] == [1, 2, 4, 8]


@settings(max_examples=60, deadline=None)
@given(capacity=st.floats(min_value=0.6, max_value=900.0), resolution=st.sampled_from([0.02, 0.05, 0.1]))
def test_bisection_always_brackets_the_true_capacity_to_the_resolution(capacity: float, resolution: float) -> None:
    s = search(start=0.5, stop=None, auto=True, resolution=resolution, max_steps=200)

    asked = drive(s, FakeTarget(capacity=capacity))

    good, bad = bracket(s)
    assert good is not None
    assert bad is not None
    assert good <= capacity < bad
    assert (bad - good) / bad <= resolution
    assert all(rate == round_sig(rate) for rate, _ in asked)
    assert len({rate for rate, _ in asked}) == len(asked), "no rate is measured twice when every verdict is clear"


@pytest.mark.parametrize(
    ("value", "rounded"), [(13.2456, 13.2), (0.015625, 0.0156), (1234.5, 1230.0), (0.0, 0.0), (99.95, 100.0)]
)
def test_rates_are_rounded_to_three_significant_digits(value: float, rounded: float) -> None:
    assert round_sig(value) == rounded


def test_a_straddling_rate_is_measured_again_and_settled_on_the_point_estimate_when_trials_run_out() -> None:
    # 398 of 400 on time: the interval straddles 99 %; three perfect trials could clear it, so the search repeats.
    target = FakeTarget(capacity=10, per_step=400, attainment=lambda rate, trial: 0.995 if rate == 9.2 else 1.0)
    s = search()

    asked = drive(s, target)

    assert [a for a in asked if a[0] == 9.2] == [(9.2, 1), (9.2, 2), (9.2, 3)]
    (at_92,) = [r for r in s.settled() if r.rate == 9.2]
    assert at_92.verdict is StepVerdict.GOOD
    assert at_92.on_point_estimate


def test_a_rate_no_further_trial_could_settle_is_settled_at_once_on_the_point_estimate() -> None:
    # 40 requests, all on time: even 120 of 120 would not put the interval's low end above 99 %.
    s = search()

    asked = drive(s, FakeTarget(capacity=10, per_step=40))

    usable, _ = bracket(s)
    assert all(len(r.pooled.trials) == 1 for r in s.settled() if r.rate != usable)
    assert all(r.on_point_estimate for r in s.settled() if r.verdict is StepVerdict.GOOD)
    assert asked[-1][0] == usable  # the search ends by confirming the rate it will call usable


def test_the_usable_rate_is_confirmed_over_extended_windows_until_it_has_the_rule_of_threes_requests() -> None:
    """A rate settled on one lucky window must not become the answer: the one the search is about to call
    usable is measured again, over the extended window, until it has had ``max_trials`` trials and the
    3 / (1 − 0.99) = 300 requests with which no failure means fewer than 1 % at 95 % confidence."""
    s = search()
    target = FakeTarget(capacity=10, per_step=40)
    asked = []
    while (nxt := s.next_rate()) is not None:
        asked.append(nxt)
        s.record(target.measure(nxt.rate, nxt.trial))

    usable, _ = bracket(s)
    assert confirming_requests(0.99) == 300
    (settled,) = [r for r in s.settled() if r.rate == usable]
    assert len(settled.pooled.trials) == 8  # 8 × 40 = 320 ≥ 300 (the fake's windows do not grow)
    assert [(a.trial, a.extended) for a in asked if a.rate == usable] == [(1, False)] + [(t, True) for t in range(2, 9)]
    assert settled.verdict is StepVerdict.GOOD


def test_a_confirmation_that_fails_moves_the_bracket_down() -> None:
    """9.65 req/s passed its first window by luck; its confirmation fails, and the search bisects below it."""
    lucky = FakeTarget(capacity=9.2, per_step=40, attainment=lambda rate, trial: (1.0 if rate <= 9.2 or
                       (rate == 9.65 and trial == 1) else 0.5))  # fmt: skip
    s = search()

    drive(s, lucky)

    good, bad = bracket(s)
    assert good is not None
    assert bad is not None
    assert good <= 9.2 < bad <= 9.65
    (at_965,) = [r for r in s.settled() if r.rate == 9.65]
    assert at_965.verdict is StepVerdict.BAD


def test_a_rate_leaning_bad_is_repeated_while_failures_could_clear_it() -> None:
    # 19 of 20 (95 %): its interval reaches 99.1 %; a second trial like it (38 of 40) settles BAD on the interval.
    s = search(start=1.0, stop=2.0, coarse_steps=2)

    asked = drive(s, FakeTarget(capacity=0, per_step=20, attainment=lambda rate, trial: 0.95 if rate == 2 else 1.0))

    assert [a for a in asked if a[0] == 2.0] == [(2.0, 1), (2.0, 2)]
    (at_2,) = [r for r in s.settled() if r.rate == 2.0]
    assert at_2.verdict is StepVerdict.BAD
    assert not at_2.on_point_estimate


def test_a_rate_awaiting_another_trial_is_not_yet_settled() -> None:
    s = search(start=9.2, stop=10.0)
    assert s.next_rate() == NextStep(9.2, 1)

    s.record(step(9.2, offered=400, on_time=398))

    assert s.settled() == ()
    assert s.next_rate() == NextStep(9.2, 2)
    assert s.finished_because == "unfinished after 1 steps"


def test_a_generator_limited_rate_is_a_ceiling_that_is_never_the_first_bad() -> None:
    s = search(start=1.0, stop=None, auto=True)

    asked = drive(s, FakeTarget(capacity=1000, generator_limit=50))

    assert max(r for r, _ in asked) == 64
    good, ceiling = bracket(s)
    assert good is not None
    assert ceiling is not None
    assert good < 50 <= ceiling
    assert all(r.verdict is not StepVerdict.BAD for r in s.settled())
    assert s.finished_because == f"above {good:g} req/s the generator could not keep its schedule"


def test_a_bad_rate_found_below_a_generator_limited_one_brackets_normally() -> None:
    s = search(start=1.0, stop=None, auto=True)

    drive(s, FakeTarget(capacity=40, generator_limit=50))

    assert s.finished_because == "bracketed within 5 %"


def test_when_the_first_rate_is_bad_bisection_goes_down_towards_zero() -> None:
    s = search(start=1.0, stop=10.0)

    asked = drive(s, FakeTarget(capacity=0.1))

    assert [r for r, _ in asked[:5]] == [1.0, 0.5, 0.25, 0.125, 0.0625]
    good, bad = bracket(s)
    assert good is not None
    assert bad is not None
    assert good <= 0.1 < bad
    assert s.finished_because == "bracketed within 5 %"


def test_when_nothing_is_good_down_to_start_over_64_the_search_gives_up() -> None:
    s = search(start=1.0, stop=10.0)

    asked = drive(s, FakeTarget(capacity=0))

    assert [r for r, _ in asked] == [1.0, 0.5, 0.25, 0.125, 0.0625, 0.0312, 0.0156]
    assert s.finished_because == "no rate down to 0.0156 req/s met the target"


def test_when_the_generator_cannot_keep_up_even_at_the_first_rate_the_reason_says_so() -> None:
    s = search(start=1.0, stop=10.0)

    drive(s, FakeTarget(capacity=100, generator_limit=0))

    assert s.finished_because == "the generator could not keep its schedule at any rate down to 0.0156 req/s"


def test_the_search_stops_after_max_steps_measurements() -> None:
    s = search(start=1.0, stop=None, auto=True, max_steps=5)

    asked = drive(s, FakeTarget(capacity=1e6))

    assert len(asked) == 5
    assert s.finished_because == "stopped after 5 steps (max_steps)"
    assert len(s.steps) == 5


def test_max_steps_also_counts_repeated_trials() -> None:
    s = search(start=9.2, stop=10.0, max_steps=2)

    asked = drive(s, FakeTarget(capacity=10, per_step=400, attainment=lambda rate, trial: 0.995))

    assert asked == [(9.2, 1), (9.2, 2)]
    assert s.finished_because == "stopped after 2 steps (max_steps)"
    (settled,) = s.settled()  # due a third trial when stopped: settled on the point estimate once finished
    assert (settled.verdict, settled.on_point_estimate) == (StepVerdict.GOOD, True)


def test_integer_mode_offers_whole_levels_and_brackets_to_adjacent_ones() -> None:
    s = search(start=1.0, stop=64.0, integer=True, unit="clients")

    asked = drive(s, FakeTarget(capacity=20))

    assert [r for r, _ in asked] == [1, 14, 26, 20, 23, 21]
    assert bracket(s) == (20, 21)
    assert s.finished_because == "bracketed within 1 client"


def test_integer_mode_gives_up_below_one_client() -> None:
    s = search(start=1.0, stop=4.0, integer=True, unit="clients")

    asked = drive(s, FakeTarget(capacity=0))

    assert asked == [(1.0, 1)]
    assert s.finished_because == "no rate down to 1 clients met the target"


def test_integer_mode_never_offers_the_same_level_twice_in_a_narrow_range() -> None:
    s = search(start=1.0, stop=3.0, coarse_steps=6, integer=True, unit="clients")

    assert [r for r, _ in drive(s, FakeTarget(capacity=10))] == [1, 2, 3]


def test_asking_twice_before_recording_returns_the_same_step() -> None:
    s = search()

    assert s.next_rate() == s.next_rate() == NextStep(2.0, 1)


@pytest.mark.parametrize(
    ("recorded", "message"),
    [(step(2.5), "expected the step at 2, trial 1"), (step(2.0, trial=2), "expected the step at 2, trial 1")],
)
def test_a_step_for_another_rate_or_trial_is_refused(recorded: object, message: str) -> None:
    s = search()
    s.next_rate()

    with pytest.raises(ValueError, match=message):
        s.record(recorded)  # type: ignore[arg-type]


def test_a_step_nobody_asked_for_is_refused() -> None:
    with pytest.raises(ValueError, match="no step was asked for"):
        search().record(step(2.0))


def test_a_finished_search_asks_for_nothing_more() -> None:
    s = search()
    drive(s, FakeTarget(capacity=30))

    assert s.next_rate() is None
    assert s.next_rate() is None


def test_the_config_follows_a_rate_sweep_spec() -> None:
    spec = SweepSpec(start=1.0, stop=30.0, target=0.95, trials=2, coarse_steps=4, resolution=0.1, max_steps=12)

    config = SearchConfig.from_spec(spec)

    assert config == SearchConfig(
        target=0.95, start=1.0, stop=30.0, coarse_steps=4, resolution=0.1, max_trials=2, max_steps=12
    )


def test_a_concurrency_spec_searches_whole_clients() -> None:
    config = SearchConfig.from_spec(SweepSpec(mode=SweepMode.CONCURRENCY, auto=True))

    assert (config.integer, config.unit, config.start, config.auto) == (True, "clients", 1.0, True)


@pytest.mark.parametrize(
    "overrides",
    [
        {"target": 1.0},
        {"start": 0.0},
        {"stop": None},
        {"stop": 1.0},
        {"auto": True, "stop": None, "max_rate": 2.0},
        {"coarse_steps": 1},
        {"max_trials": 0},
        {"resolution": 0.0},
        {"confidence": 1.0},
    ],
)
def test_inconsistent_configs_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"must be|needs"):
        SearchConfig(**{"start": 2.0, "stop": 20.0, **overrides})  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.floats(min_value=1.0, max_value=50.0),
    per_step=st.integers(min_value=10, max_value=3000),
    near=st.floats(min_value=0.95, max_value=1.0),
    max_trials=st.integers(min_value=1, max_value=4),
)
def test_a_target_near_the_attainment_target_still_ends_the_search_within_its_limits(
    capacity: float, per_step: int, near: float, max_trials: int
) -> None:
    # Attainment hovers around 99 % below capacity, so many rates straddle the target.
    target = FakeTarget(
        capacity=capacity, per_step=per_step, attainment=lambda rate, trial: near if rate <= capacity else 0.5
    )
    s = search(start=1.0, stop=None, auto=True, max_rate=64.0, max_trials=max_trials, max_steps=40)

    asked = drive(s, target)

    assert len(asked) <= 40
    usable, _ = bracket(s)
    assert all(1 <= trial <= max_trials for rate, trial in asked if rate != usable)  # the usable one is confirmed
    for rate, trial in asked:  # trials at a rate are asked in order, one after the other
        assert trial == 1 or (rate, trial - 1) in asked
    assert s.finished
    assert {r.rate for r in s.settled()} == {rate for rate, _ in asked}


def test_a_finished_search_summarizes_to_its_bracket() -> None:
    s = search()
    drive(s, FakeTarget(capacity=10))

    result = summarize(s.steps, target=0.99, e2e_slo_ms=4000.0, finished_because=s.finished_because)

    assert (result.usable_rps, result.first_bad_rps) == bracket(s)
    assert result.rates == s.settled()
    assert result.finished_because == "bracketed within 5 %"


def test_a_search_with_the_recheck_ends_by_measuring_its_first_rate_once_more_over_the_same_window() -> None:
    s = search(recheck=True)

    asked = []
    while (nxt := s.next_rate()) is not None:
        asked.append(nxt)
        s.record(replace(FakeTarget(capacity=30).measure(nxt.rate, nxt.trial), recheck=nxt.recheck))

    assert [(a.rate, a.trial) for a in asked] == [
        (2.0, 1),
        (5.6, 1),
        (9.2, 1),
        (12.8, 1),
        (16.4, 1),
        (20.0, 1),
        (2.0, 2),
    ]
    assert asked[-1] == NextStep(2.0, 2, extended=False, recheck=True)
    assert not any(a.recheck for a in asked[:-1])
    assert s.finished_because == "no cliff found up to 20 req/s"  # the search's reason: the recheck is not a step of it


def test_the_recheck_comes_after_a_search_stopped_by_max_steps_too() -> None:
    s = search(start=1.0, stop=None, auto=True, max_steps=3, recheck=True)

    asked = drive(s, FakeTarget(capacity=30))

    assert asked == [(1.0, 1), (2.0, 1), (4.0, 1), (1.0, 2)]
    assert s.finished_because == "stopped after 3 steps (max_steps)"


@pytest.mark.parametrize(
    ("spec", "recheck"),
    [
        (SweepSpec(auto=True), True),
        (SweepSpec(start=1.0, stop=30.0), False),
        (SweepSpec(auto=True, recheck=False), False),
        (SweepSpec(start=1.0, stop=30.0, recheck=True), True),
        (SweepSpec(mode=SweepMode.CONCURRENCY, auto=True), True),
    ],
)
def test_auto_sweeps_recheck_unless_told_not_to_and_ranges_only_when_asked(spec: SweepSpec, recheck: bool) -> None:
    assert SearchConfig.from_spec(spec).recheck is recheck
