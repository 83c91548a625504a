"""A sweep's result: usable capacity, peaks, the cliff ratio, and the decision rule's verdict sentence."""

from __future__ import annotations

import json

import pytest
from capacity_kit import step

from cliffwatch.domain.capacity.capacity import CapacityResult, StepStats, StepVerdict, num, pct, summarize


def cliff_sweep() -> list[StepStats]:
    """Tokens/s still climbing when p99 e2e crosses 4 s at 14 req/s; the token peak is at 21 req/s."""
    return [
        step(10.0, offered=2000, tokens_per_s=1000.0, p99_e2e_ms=2000.0),
        step(13.2, offered=5000, on_time=4990, tokens_per_s=1300.0, p99_e2e_ms=3000.0),
        step(14.0, offered=2000, on_time=1700, tokens_per_s=1455.0, p99_e2e_ms=4500.0),
        step(21.0, offered=2000, on_time=200, tokens_per_s=1500.0, p99_e2e_ms=9000.0),
        step(28.0, offered=2000, on_time=100, tokens_per_s=1400.0, p99_e2e_ms=12000.0),
    ]


def result_of(steps: list[StepStats], **overrides: object) -> CapacityResult:
    options: dict[str, object] = {"target": 0.99, "e2e_slo_ms": 4000.0, "finished_because": "bracketed within 5 %"}
    return summarize(steps, **{**options, **overrides})  # type: ignore[arg-type]


def test_latency_crossing_while_tokens_hold_up_is_capacity_constrained_and_sized_at_the_completion_point() -> None:
    result = result_of(cliff_sweep())

    assert result.constrained is True
    assert result.verdict == (
        "p99 e2e crossed the 4000 ms SLO at 14 req/s while tokens/s was still 97 % of peak: size for 13.2 req/s "
        "(attainment 99.8 %, 95 % CI 99.6–99.9 %), not the 21 req/s peak"
    )
    assert (result.usable_rps, result.first_bad_rps) == (13.2, 14.0)
    assert (result.peak_tokens_per_s, result.peak_tokens_rate) == (1500.0, 21.0)
    assert result.cliff_ratio == pytest.approx(13.2 / 21)
    assert not result.usable_on_point_estimate
    assert result.evidence["crossing_rate"] == 14.0
    assert result.evidence["signal"] == "p99_e2e"
    assert result.evidence["share_of_peak"] == pytest.approx(0.97)


def test_the_usable_interval_is_the_pooled_wilson_interval_at_the_usable_rate() -> None:
    result = result_of(cliff_sweep())

    assert result.usable is not None
    assert result.usable_interval == result.usable.pooled.interval
    assert result.usable_interval is not None
    assert result.usable_interval.low <= 0.998 <= result.usable_interval.high


def test_throughput_already_falling_at_the_crossing_is_throughput_bound() -> None:
    steps = [
        step(10.0, tokens_per_s=1500.0, p99_e2e_ms=2000.0),
        step(12.0, on_time=120, tokens_per_s=930.0, p99_e2e_ms=6000.0),
    ]

    result = result_of(steps)

    assert result.constrained is False
    assert result.verdict == (
        "tokens/s had already fallen to 62 % of peak when p99 e2e crossed the 4000 ms SLO at 12 req/s: tokens and "
        "completions fell together; size for 10 req/s (attainment 100.0 %, 95 % CI 98.1–100.0 %, on the point "
        "estimate)"
    )
    assert result.usable_on_point_estimate


def test_a_timeout_share_over_the_budget_is_a_crossing_too() -> None:
    steps = [step(10.0, offered=2000), step(20.0, offered=2000, on_time=1900, timeout=100)]

    result = result_of(steps)

    assert result.evidence["signal"] == "timeouts"
    assert result.verdict.startswith("timeouts reached 5.0 % (budget 1 %) at 20 req/s while tokens/s was still")


def test_without_a_crossing_the_rule_cannot_apply() -> None:
    result = result_of([step(10.0, offered=2000), step(20.0, offered=2000)], finished_because="no cliff")

    assert result.constrained is None
    assert result.verdict == (
        "no cliff up to 20 req/s: p99 e2e stayed within the 4000 ms SLO and timeouts within 1 %; size for 20 req/s "
        "(attainment 100.0 %, 95 % CI 99.8–100.0 %)"
    )
    assert result.first_bad_rps is None
    assert result.finished_because == "no cliff"


def test_a_ttft_slo_is_a_crossing_signal_when_the_scenario_has_one() -> None:
    # B1's measured case: 68.8 % on time at 16 req/s, all late on the 500-ms TTFT SLO, p99 e2e under 1 s.
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0, p99_e2e_ms=600.0),
        step(16.0, offered=2000, on_time=1376, tokens_per_s=990.0, p99_e2e_ms=871.0, p99_ttft_ms=720.0,
             late_by={"ttft": 624}),
    ]  # fmt: skip

    result = result_of(steps, e2e_slo_ms=1000.0, ttft_slo_ms=500.0)

    assert result.verdict == (
        "p99 TTFT crossed the 500 ms TTFT SLO at 16 req/s while tokens/s was still 99 % of peak: size for 10 req/s "
        "(attainment 100.0 %, 95 % CI 99.8–100.0 %)"
    )
    assert result.evidence["signal"] == "p99_ttft"
    assert (result.evidence["p99_ttft_ms"], result.evidence["ttft_slo_ms"]) == (720.0, 500.0)
    assert result.constrained is True


def test_a_bad_rate_below_every_signal_names_the_bound_its_late_requests_broke() -> None:
    # Late on the TPOT bound, which no percentile signal watches: p99 TTFT and e2e are both within their SLOs.
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0, p99_e2e_ms=600.0),
        step(16.0, offered=2000, on_time=1376, tokens_per_s=990.0, p99_e2e_ms=871.0, p99_ttft_ms=420.0,
             late_by={"tpot": 624}),
    ]  # fmt: skip

    result = result_of(steps, e2e_slo_ms=1000.0, ttft_slo_ms=500.0)

    assert result.verdict == (
        "attainment fell to 68.8 % at 16 req/s (31.2 % late on the TPOT SLO) while tokens/s was still 99 % of "
        "peak: size for 10 req/s (attainment 100.0 %, 95 % CI 99.8–100.0 %)"
    )
    assert result.evidence["signal"] == "attainment"
    assert result.evidence["crossing_rate"] == 16.0
    assert result.evidence["attainment"] == pytest.approx(0.688)
    assert result.evidence["failures"] == {"late": pytest.approx(0.312)}
    assert result.evidence["late_by"] == {"tpot": 624}


def test_a_rate_bad_by_shedding_below_every_latency_signal_is_the_cliff_not_no_cliff() -> None:
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0),
        step(20.0, offered=2000, on_time=1880, shed=100, error=4, tokens_per_s=1880.0),
        step(30.0, offered=2000, on_time=1000, tokens_per_s=1900.0, p99_e2e_ms=9000.0),
    ]

    result = result_of(steps, finished_because="bracketed within 5 %")

    assert result.first_bad_rps == 20.0
    assert result.verdict == (
        "attainment fell to 94.0 % at 20 req/s (5.0 % shed, 0.8 % late, 0.2 % failed with errors) while tokens/s "
        "was still 99 % of peak: size for 10 req/s (attainment 100.0 %, 95 % CI 99.8–100.0 %), not the 30 req/s "
        "peak"
    )
    assert "no cliff" not in result.verdict
    assert result.evidence["failures"] == {
        "shed": pytest.approx(0.05),
        "late": pytest.approx(0.008),
        "error": pytest.approx(0.002),
    }


def test_a_rate_bad_by_redirects_names_them_in_the_verdict() -> None:
    """A target that redirects part of the load away fails the rate, and the sentence says redirected."""
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0),
        step(20.0, offered=2000, on_time=1800, redirect=200, tokens_per_s=1800.0),
    ]

    result = result_of(steps, finished_because="bracketed within 5 %")

    assert result.first_bad_rps == 20.0
    assert result.verdict.startswith("attainment fell to 90.0 % at 20 req/s (10.0 % redirected)")
    assert result.evidence["failures"] == {"redirect": pytest.approx(0.1)}


def test_a_rate_bad_by_hollow_answers_names_them_in_the_verdict() -> None:
    """Incomplete answers fail the rate; tokens/s falls with them, and the sentence says what they were."""
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0),
        step(20.0, offered=2000, on_time=800, incomplete=1200, tokens_per_s=400.0),
    ]

    result = result_of(steps)

    assert result.verdict.startswith(
        "tokens/s had already fallen to 40 % of peak when attainment fell to 40.0 % at 20 req/s (60.0 % incomplete): "
        "tokens and completions fell together"
    )
    assert result.evidence["failures"] == {"incomplete": pytest.approx(0.6)}


def test_a_latency_crossing_with_hollow_answers_names_them_too() -> None:
    """When p99 e2e crosses first, the incompletes at that rate still appear: a latency verdict alone would
    size for a rate whose answers were partly empty."""
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0),
        step(12.0, offered=2000, on_time=1950, incomplete=50, p99_e2e_ms=5000.0, tokens_per_s=990.0),
    ]

    result = result_of(steps, target=0.95)

    assert result.verdict.startswith("p99 e2e crossed the 4000 ms SLO at 12 req/s (2.5 % incomplete) while tokens/s")
    assert result.evidence["failures"] == {"incomplete": pytest.approx(0.025)}


def test_a_bad_rate_whose_throughput_had_fallen_names_its_failure_in_the_throughput_bound_sentence() -> None:
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0),
        step(12.0, offered=2000, on_time=1000, timeout=10, tokens_per_s=500.0, late_by={"tpot": 990}),
    ]

    result = result_of(steps)

    assert result.verdict == (
        "tokens/s had already fallen to 50 % of peak when attainment fell to 50.0 % at 12 req/s (49.5 % late on the "
        "TPOT SLO, 0.5 % timed out): tokens and completions fell together; size for 10 req/s (attainment 100.0 %, "
        "95 % CI 99.8–100.0 %)"
    )
    assert result.constrained is False


def test_late_requests_that_broke_several_bounds_are_named_by_the_most_common_one() -> None:
    steps = [step(10.0, offered=2000), step(12.0, offered=2000, on_time=1900, late_by={"e2e": 30, "tpot": 80})]

    result = result_of(steps)

    assert "(5.0 % late, mostly on the TPOT SLO)" in result.verdict


def test_late_requests_of_unknown_bound_are_just_late() -> None:
    steps = [step(10.0, offered=2000), step(12.0, offered=2000, on_time=1900)]

    assert "attainment fell to 95.0 % at 12 req/s (5.0 % late) while" in result_of(steps).verdict


def test_a_latency_crossing_below_the_first_bad_rate_is_still_the_crossing() -> None:
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0),
        step(12.0, offered=2000, on_time=1990, tokens_per_s=1100.0, p99_e2e_ms=4100.0),
        step(14.0, offered=2000, on_time=1000, shed=900, tokens_per_s=1050.0),
    ]

    result = result_of(steps)

    assert result.verdict.startswith("p99 e2e crossed the 4000 ms SLO at 12 req/s while tokens/s was still 100 %")
    assert result.evidence["signal"] == "p99_e2e"


def test_without_a_crossing_the_ttft_slo_is_named_among_what_held() -> None:
    result = result_of([step(10.0, offered=2000), step(20.0, offered=2000)], ttft_slo_ms=1000.0)

    assert result.verdict.startswith(
        "no cliff up to 20 req/s: p99 e2e stayed within the 4000 ms SLO, p99 TTFT within the 1000 ms TTFT SLO and "
        "timeouts within 1 %; size for 20 req/s"
    )


def test_a_result_from_before_ttft_and_late_bounds_were_recorded_still_reads() -> None:
    result = result_of(cliff_sweep())
    data = json.loads(json.dumps(result.to_dict()))
    for rate in data["rates"]:
        del rate["pooled"]["p99_ttft_ms"]
    for step_data in data["steps"]:
        del step_data["late_by"]

    again = CapacityResult.from_dict(data)

    assert again.rates[0].pooled.p99_ttft_ms is None
    assert all(not s.late_by for s in again.steps)
    assert again.verdict == result.verdict


def test_when_no_rate_met_the_target_there_is_no_usable_capacity() -> None:
    steps = [step(1.0, offered=2000, on_time=1000, p99_e2e_ms=9000.0)]

    result = result_of(steps)

    assert (result.usable_rps, result.usable_interval, result.cliff_ratio) == (None, None, None)
    assert result.verdict == (
        "p99 e2e crossed the 4000 ms SLO at 1 req/s while tokens/s was still 100 % of peak: no rate met the 99 % "
        "attainment target"
    )


def test_a_generator_limited_rate_caps_usable_capacity_but_is_neither_first_bad_nor_a_peak() -> None:
    steps = [
        step(10.0, offered=2000, tokens_per_s=1000.0),
        step(20.0, offered=2000, tokens_per_s=9999.0, generator_limited=True),
        step(30.0, offered=2000, tokens_per_s=1200.0),
    ]

    result = result_of(steps)

    assert result.usable_rps == 10.0
    assert result.first_bad_rps is None
    assert (result.peak_tokens_per_s, result.peak_tokens_rate) == (1200.0, 30.0)
    assert [r.verdict for r in result.rates] == [StepVerdict.GOOD, StepVerdict.INVALID, StepVerdict.GOOD]


def test_a_sweep_with_no_valid_step_says_so() -> None:
    result = result_of([step(10.0, generator_limited=True)])

    assert result.verdict == "no valid step: the generator could not keep its schedule at any rate measured"
    assert (result.usable_rps, result.peak_tokens_rate, result.peak_tokens_per_s) == (None, None, 0.0)


def test_without_tokens_completions_per_second_stand_in_for_throughput() -> None:
    steps = [
        step(10.0, offered=2000, tokens_per_s=0.0, completions_per_s=10.0),
        step(20.0, offered=2000, on_time=1000, tokens_per_s=0.0, completions_per_s=19.5, p99_e2e_ms=5000.0),
    ]

    result = result_of(steps, unit="clients")

    assert result.peak_tokens_rate is None
    assert result.cliff_ratio is None
    assert result.peak_completions_per_s == 19.5
    assert result.evidence["throughput_metric"] == "completions_per_s"
    assert result.verdict.startswith(
        "p99 e2e crossed the 4000 ms SLO at 20 clients while completions/s was still 100 % of peak: size for 10 clients"
    )


def test_a_rate_left_straddling_when_the_sweep_stopped_is_settled_on_its_point_estimate() -> None:
    result = result_of([step(9.2, offered=400, on_time=398)])

    (rate,) = result.rates
    assert (rate.verdict, rate.on_point_estimate) == (StepVerdict.GOOD, True)


def test_the_result_round_trips_through_json() -> None:
    result = result_of([*cliff_sweep(), step(13.2, 2, offered=400, p99_e2e_ms=None)], confidence=0.9)

    data = json.loads(json.dumps(result.to_dict()))

    assert CapacityResult.from_dict(data) == result
    assert len(data["steps"]) == 6
    assert data["rates"][1]["pooled"]["trials"] == 2


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (13.2456, "13.2"),
        (21.0, "21"),
        (0.078125, "0.0781"),
        (1234.5, "1230"),
        (99.95, "100"),
        (4000.0, "4000"),
        (0.0, "0"),
    ],
)
def test_numbers_read_with_three_significant_digits(value: float, text: str) -> None:
    assert num(value) == text


@pytest.mark.parametrize(("share", "text"), [(0.994, "99.4"), (0.9996, "99.96"), (1.0, "100.0"), (0.05, "5.0")])
def test_shares_read_as_percentages_that_never_round_a_shortfall_up_to_100(share: float, text: str) -> None:
    assert pct(share) == text


def test_a_share_that_missed_its_target_never_reads_as_the_target() -> None:
    assert pct(0.98996, against=0.99) == "98.99"  # not "99.0": the rate failed a 99 % target
    assert pct(0.9904, against=0.99) == "99.0"  # met it
    assert pct(0.97, against=0.99) == "97.0"


def test_a_rate_whose_queue_kept_growing_is_the_cliff_and_the_verdict_says_so() -> None:
    """Every request on time at 3.5 req/s, but its queue grew through the extended step: not sustainable."""
    steps = [
        step(3.0, offered=2000, tokens_per_s=300.0, growing=False),
        step(3.5, 1, offered=2000, tokens_per_s=320.0, growing=True),
        step(3.5, 2, offered=6000, duration_s=30.0, tokens_per_s=320.0, growing=True, extended=True),
    ]
    result = result_of(steps)
    assert (result.usable_rps, result.first_bad_rps) == (3.0, 3.5)
    assert result.evidence["signal"] == "queue_growth"
    assert result.evidence["growth"]["growing"] is True
    assert result.verdict.startswith(
        "the queue kept growing through a 30 s step (the wait grew 60 ms a second, a 6.0 % overload) at 3.5 req/s "
        "while tokens/s was still 100 % of peak: size for 3 req/s"
    )
    [bad] = [r for r in result.rates if r.rate == 3.5]
    assert (bad.verdict, bad.on_growth) == (StepVerdict.BAD, True)


def test_the_verdict_quotes_the_servers_own_queue_at_the_crossing() -> None:
    queue = {"waiting": {"first": 0.0, "last": 183.0, "min": 0.0, "max": 183.0, "mean": 90.0, "slope_per_s": 9.0,
                         "points": 20}}  # fmt: skip
    steps = [*cliff_sweep()[:2], step(14.0, offered=2000, on_time=1700, tokens_per_s=1455.0, p99_e2e_ms=4500.0,
                                      server=queue), *cliff_sweep()[3:]]  # fmt: skip
    result = result_of(steps)
    assert result.verdict.startswith(
        "p99 e2e crossed the 4000 ms SLO at 14 req/s (the server's waiting queue went from 0 to 183) while tokens/s "
        "was still 97 % of peak"
    )
    assert (result.evidence["server_waiting_first"], result.evidence["server_waiting_max"]) == (0.0, 183.0)


def test_a_server_queue_that_did_not_move_at_the_crossing_is_said_to_have_held() -> None:
    queue = {"waiting": {"first": 0.0, "last": 0.0, "min": 0.0, "max": 0.0, "mean": 0.0, "slope_per_s": 0.0,
                         "points": 10}}  # fmt: skip
    steps = [step(1.0, offered=2000, server=queue), step(2.0, offered=2000, on_time=0, error=2000, server=queue)]
    result = result_of(steps)
    assert "(the server's waiting queue held at 0 at most)" in result.verdict
    assert "went from" not in result.verdict
