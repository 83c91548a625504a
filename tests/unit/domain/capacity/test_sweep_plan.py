"""The step scenario a sweep runs, and the step statistics read from its measured phase."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from cliffwatch.domain.capacity.capacity_stats import StepStats
from cliffwatch.domain.capacity.sweep_plan import (
    MEASURED,
    WARMUP,
    WindowRecords,
    measured_index,
    short_step_warning,
    step_scenario,
    step_seed,
    step_stats,
    sweep_client_scenario,
    sweep_warnings,
    traffic_mix,
)
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec, variant_policy
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S, Attempt, Outcome, RequestRecord, Slo
from cliffwatch.domain.results.run_metrics import PhaseStats
from cliffwatch.domain.scenario.arrivals import Constant, Mix, Poisson
from cliffwatch.domain.scenario.retry import RetryKind
from cliffwatch.domain.scenario.scenario import PhaseRole, parse_scenario
from cliffwatch.domain.traffic.generator_health import GeneratorReport
from cliffwatch.domain.traffic.plan import PhaseWindow, iter_plan

SCENARIO_DOCUMENT = {
    "name": "plain",
    "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 8}},
    "slo": {"e2e_ms": 2000, "timeout_ms": 4000},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson", "rate": 1}}],
}
SCENARIO = parse_scenario(
    {
        "name": "faulty",
        "seed": 11,
        "target": {"url": "http://127.0.0.1:8000", "via_proxy": "llm", "request": {"model": "m", "max_tokens": 8}},
        "proxies": [{"name": "llm", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:8000"}],
        "slo": {"e2e_ms": 2000, "timeout_ms": 4000},
        "client": {"retry": {"policy": "immediate", "max_retries": 1}},
        "phases": [
            {"name": "base", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson", "rate": 1}},
            {
                "name": "slow",
                "role": "stress",
                "duration_s": 5,
                "arrival": {"process": "poisson", "rate": 3},
                "retry": {"policy": "exponential", "max_retries": 3},
                "faults": [{"proxy": "llm", "type": "latency", "attributes": {"latency": 100}}],
            },
        ],
        "abort": {"baseline_unhealthy": {"min_on_time_ratio": 0.5}},
    }
)
SPEC = parse_sweep_spec({"start": 1, "stop": 8, "step_s": 10, "warmup_s": 3})


def test_a_step_is_a_warm_up_and_a_measured_window_at_the_rate_without_faults_proxies_or_guards() -> None:
    step = step_scenario(SCENARIO, 4.0, SPEC, None)
    assert [(p.name, p.role, p.duration_s) for p in step.phases] == [
        (WARMUP, PhaseRole.BASELINE, 3),
        (MEASURED, PhaseRole.STRESS, 10),
    ]
    assert all(p.arrival == Poisson(rate=4.0) and not p.faults for p in step.phases)
    assert step.proxies == ()
    assert step.target.via_proxy is None
    assert step.abort.baseline is None
    assert step.abort.error_rate is None
    assert (step.target.url, step.slo, step.target.request) == (
        SCENARIO.target.url,
        SCENARIO.slo,
        SCENARIO.target.request,
    )
    assert measured_index(step) == 1


def test_without_warm_up_the_measured_window_is_the_only_phase() -> None:
    spec = parse_sweep_spec({"start": 1, "stop": 8, "warmup_s": 0, "arrival": "constant"})
    step = step_scenario(SCENARIO, 2.0, spec, None)
    assert [p.name for p in step.phases] == [MEASURED]
    assert step.phases[0].arrival == Constant(rate=2.0)
    assert measured_index(step) == 0


def test_as_written_keeps_the_scenarios_stress_retry_policy_and_a_variant_replaces_every_policy() -> None:
    as_written = step_scenario(SCENARIO, 4.0, SPEC, None)
    assert {as_written.retry_for(i).kind for i in range(2)} == {RetryKind.EXPONENTIAL}
    none = step_scenario(SCENARIO, 4.0, SPEC, variant_policy("none"))
    assert {none.retry_for(i).kind for i in range(2)} == {RetryKind.NONE}


def test_each_step_and_trial_has_its_own_deterministic_seed() -> None:
    seeds = {step_seed(SCENARIO, v, r, t) for v in ("none", "as-written") for r in (1.0, 2.0) for t in (1, 2)}
    assert len(seeds) == 8
    assert step_seed(SCENARIO, "none", 1.0, 1) == step_seed(SCENARIO, "none", 1.0, 1)
    first, again = step_scenario(SCENARIO, 4.0, SPEC, None, trial=1), step_scenario(SCENARIO, 4.0, SPEC, None, trial=2)
    assert [r.scheduled_ns for r in iter_plan(first)] != [r.scheduled_ns for r in iter_plan(again)]


def test_a_concurrency_step_has_a_connection_and_an_in_flight_slot_for_every_client() -> None:
    small = parse_scenario({**SCENARIO_DOCUMENT, "client": {"pool_size": 4, "max_in_flight": 6}})
    spec = parse_sweep_spec({"mode": "concurrency", "start": 1, "stop": 64})

    step = step_scenario(small, 24.0, spec, variant_policy("none"))
    assert (step.client.pool_size, step.client.max_in_flight) == (24, 24)
    assert step.client.retry == variant_policy("none")
    assert step_scenario(small, 3.0, spec, None).client == small.client  # room enough already
    shared = sweep_client_scenario(small, spec)
    assert (shared.client.pool_size, shared.client.max_in_flight) == (64, 64)
    assert shared.target == small.target


def test_a_rate_step_keeps_the_clients_own_pool() -> None:
    small = parse_scenario({**SCENARIO_DOCUMENT, "client": {"pool_size": 4}})
    spec = parse_sweep_spec({"start": 1, "stop": 64})

    assert step_scenario(small, 40.0, spec, None).client.pool_size == 4
    assert sweep_client_scenario(small, spec) is small


def test_a_step_needs_a_positive_rate() -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        step_scenario(SCENARIO, 0.0, SPEC, None)


def test_step_stats_reads_counts_rates_and_percentiles_from_the_measured_phase() -> None:
    window = PhaseWindow(index=1, name=MEASURED, role=PhaseRole.STRESS, start_ns=3 * NS_PER_S, end_ns=13 * NS_PER_S)
    phase = PhaseStats(window=window)
    phase.offered = 40
    phase.outcomes = Counter(
        {Outcome.ON_TIME: 30, Outcome.LATE: 4, Outcome.SHED: 3, Outcome.TIMEOUT: 2, Outcome.NOT_SENT: 1}
    )
    phase.fast_shed = 2
    phase.attempts = 45
    phase.completions = 33
    phase.output_tokens = 2_000.0
    e2e = Histogram()
    for value in range(1, 101):
        e2e.add(float(value))
    phase.latency["e2e"] = e2e
    report = GeneratorReport(lag={}, max_stall_ms=0.0, cpu_busy=0.1, overflow=0, limited=True, reasons=("lagging",))
    stats = step_stats(phase, report, rate=4.0, trial=2)
    assert (stats.rate, stats.trial, stats.duration_s, stats.offered) == (4.0, 2, 10.0, 40)
    assert (stats.on_time, stats.late, stats.shed, stats.fast_shed, stats.timeout, stats.error, stats.not_sent) == (
        30, 4, 3, 2, 2, 0, 1,
    )  # fmt: skip
    assert stats.sent_rate == pytest.approx(3.9)
    assert stats.goodput_rps == pytest.approx(3.0)
    assert stats.completions_per_s == pytest.approx(3.3)
    assert stats.tokens_per_s == pytest.approx(200.0)
    assert stats.amplification == pytest.approx(45 / 39)
    assert stats.e2e_ms["p50"] == pytest.approx(50, rel=0.02)
    assert stats.e2e_ms["p99"] == pytest.approx(99, rel=0.02)
    assert stats.ttft_ms == {"p50": None, "p90": None, "p99": None}
    assert stats.generator_limited
    assert stats.generator_reasons == ("lagging",)


def _record(phase: int, outcome: Outcome, *, end_ms: float, first_token_ms: float) -> RequestRecord:
    attempt = Attempt(
        number=1, sent_ns=0, end_ns=round(end_ms * NS_PER_MS), first_token_ns=round(first_token_ms * NS_PER_MS)
    )
    return RequestRecord(
        id=0, phase=phase, scheduled_ns=0, prompt_tokens=1, max_tokens=1, attempts=(attempt,), outcome=outcome
    )


async def test_late_bounds_counts_the_measured_windows_late_requests_by_the_bound_they_broke() -> None:
    late = WindowRecords(1, [Slo(e2e_ms=1000, timeout_ms=2000, ttft_ms=200)])
    late.add(_record(1, Outcome.LATE, end_ms=500, first_token_ms=300))  # TTFT
    late.add(_record(1, Outcome.LATE, end_ms=1500, first_token_ms=300))  # both
    late.add(_record(0, Outcome.LATE, end_ms=1500, first_token_ms=300))  # warm-up: not counted
    late.add(_record(1, Outcome.ON_TIME, end_ms=500, first_token_ms=100))
    await late.flush()

    assert late.counts == {"ttft": 2, "e2e": 1}
    window = PhaseWindow(index=1, name=MEASURED, role=PhaseRole.STRESS, start_ns=0, end_ns=NS_PER_S)
    phase = PhaseStats(window=window, offered=3, outcomes=Counter({Outcome.LATE: 2, Outcome.ON_TIME: 1}))
    report = GeneratorReport(lag={}, max_stall_ms=0.0, cpu_busy=0.1, overflow=0, limited=False, reasons=())
    assert step_stats(phase, report, rate=3.0, trial=1, late_by=late.counts).late_by == {"ttft": 2, "e2e": 1}


def with_slo(**slo: float) -> Any:
    return parse_scenario({**SCENARIO_DOCUMENT, "slo": {"timeout_ms": 20_000, **slo}})


def test_a_step_shorter_than_ten_times_the_tightest_latency_bound_is_warned_about() -> None:
    spec = parse_sweep_spec({"start": 1, "stop": 8, "step_s": 2, "warmup_s": 1})

    assert short_step_warning(with_slo(e2e_ms=1000), spec) == (
        "steps of 3 s (warm-up + window) are shorter than 10 × the 1000 ms e2e SLO (10 s): a rate up to about 33 % "
        "above the target's saturation can still pass, because its queue grows too slowly to break the SLO within a "
        "step. Make --warmup-seconds + --step-seconds at least 10 s to find the cliff within about 10 % "
        '(docs/sweep.md, "Step length")'
    )
    # queue wait adds to TTFT as much as to e2e, so a tighter TTFT bound is the one that counts
    warning = short_step_warning(with_slo(e2e_ms=4000, ttft_ms=500), spec)
    assert warning is not None
    assert "10 × the 500 ms TTFT SLO (5 s)" in warning


@pytest.mark.parametrize(
    ("slo", "sweep"),
    [
        ({"e2e_ms": 1000}, {"step_s": 6, "warmup_s": 4}),  # exactly 10 × the SLO
        ({"e2e_ms": 4000, "ttft_ms": 1000}, {}),  # burst-storm's SLO with the default 4 + 10 s
        ({"e2e_ms": 1000}, {"mode": "concurrency", "step_s": 2, "warmup_s": 0}),  # closed loop: no queue ahead
    ],
)
def test_long_enough_steps_and_concurrency_sweeps_are_not_warned_about(
    slo: dict[str, float], sweep: dict[str, Any]
) -> None:
    assert short_step_warning(with_slo(**slo), parse_sweep_spec({"start": 1, "stop": 8, **sweep})) is None


def test_a_sweeps_warnings_are_the_short_step_warning_or_none() -> None:
    short = parse_sweep_spec({"start": 1, "stop": 8, "step_s": 2, "warmup_s": 1})
    long_enough = parse_sweep_spec({"start": 1, "stop": 8, "step_s": 6, "warmup_s": 4})
    scenario = with_slo(e2e_ms=1000)
    assert sweep_warnings(scenario, short) == (short_step_warning(scenario, short),)
    assert sweep_warnings(scenario, long_enough) == ()


TENANTS = parse_scenario({
    **SCENARIO_DOCUMENT,
    "classes": {"chat": {"slo": {"ttft_ms": 300}}, "batch": {"slo": {"e2e_ms": 20_000, "timeout_ms": 30_000}}},
    "phases": [
        {"name": "calm", "role": "baseline", "duration_s": 10,
         "arrival": {"chat": {"process": "poisson", "rate": 3}, "batch": {"process": "constant", "rate": 1}}},
        {"name": "burst", "role": "stress", "duration_s": 10,
         "arrival": {"process": "poisson", "rate": 8, "share": {"chat": 1, "batch": 3}}},
    ],
})  # fmt: skip


def test_a_step_deals_its_rate_out_to_the_classes_as_the_scenario_mixes_them() -> None:
    """Over both phases chat sends 30 + 20 requests and batch 10 + 60: the step's rate is shared 50:70."""
    assert dict(traffic_mix(TENANTS)) == pytest.approx({"chat": 50 / 120, "batch": 70 / 120})
    step = step_scenario(TENANTS, 6.0, SPEC, None)
    for phase in step.phases:
        assert isinstance(phase.arrival, Mix)
        assert phase.arrival.whole == Poisson(rate=6.0)
        assert phase.arrival.class_rate("batch", 10) == pytest.approx(6.0 * 70 / 120)
    sent = Counter(r.klass for r in iter_plan(step) if r.phase == measured_index(step))
    assert sent[0] + sent[1] > 0
    assert sent[1] / (sent[0] + sent[1]) == pytest.approx(70 / 120, abs=0.12)


def test_the_tightest_bound_of_any_class_decides_the_short_step_warning() -> None:
    warning = short_step_warning(TENANTS, parse_sweep_spec({"start": 1, "stop": 8, "step_s": 1, "warmup_s": 1}))
    assert warning is not None
    assert "10 × the 300 ms chat class's TTFT SLO (3 s)" in warning


async def test_late_requests_are_counted_by_the_bound_of_their_own_class() -> None:
    late = WindowRecords(1, [Slo(e2e_ms=1000, timeout_ms=2000, ttft_ms=200), Slo(e2e_ms=9000, timeout_ms=9000)])
    record = _record(1, Outcome.LATE, end_ms=1500, first_token_ms=300)
    late.add(record)
    late.add(
        RequestRecord(
            **{
                **record.__dict__,
                "klass": 1,
                "attempts": (
                    Attempt(number=1, sent_ns=0, end_ns=round(9500 * NS_PER_MS), first_token_ns=round(300 * NS_PER_MS)),
                ),
            }
        )
    )
    assert late.counts == {"ttft": 1, "e2e": 2}


def test_the_step_keeps_each_classs_share_and_refuses_classes_that_do_not_add_up() -> None:
    window = PhaseWindow(index=1, name=MEASURED, role=PhaseRole.STRESS, start_ns=0, end_ns=NS_PER_S)
    whole = PhaseStats(window=window, offered=5, outcomes=Counter({Outcome.LATE: 2, Outcome.ON_TIME: 3}))
    chat = PhaseStats(window=window, offered=2, outcomes=Counter({Outcome.LATE: 2}))
    batch = PhaseStats(window=window, offered=3, outcomes=Counter({Outcome.ON_TIME: 3}))
    report = GeneratorReport(lag={}, max_stall_ms=0.0, cpu_busy=0.1, overflow=0, limited=False, reasons=())
    stats = step_stats(whole, report, rate=5.0, trial=1, classes=[("chat", chat), ("batch", batch)])
    assert stats.classes["chat"].attainment == 0.0
    assert stats.classes["batch"].attainment == 1.0
    assert StepStats.from_dict(stats.to_dict()) == stats
    with pytest.raises(ValueError, match="do not add up"):
        step_stats(whole, report, rate=5.0, trial=1, classes=[("chat", chat)])
