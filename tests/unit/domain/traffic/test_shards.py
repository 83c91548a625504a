"""Splitting a run's limits between generator workers and putting their measures back together."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.scenario.client_spec import AUTO_WORKERS, ClientSpec
from cliffwatch.domain.scenario.retry import RetryBudget
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.service.caps import Caps, cap_violations
from cliffwatch.domain.traffic.generator_health import (
    CollectorReport,
    GeneratorLimits,
    GeneratorMeasures,
    WorkerShare,
    judge_measures,
)
from cliffwatch.domain.traffic.rate_limit import RateLimit
from cliffwatch.domain.traffic.shards import (
    budget_share,
    cap_share,
    client_share,
    lost_reason,
    merged_measures,
    worker_count,
)


@pytest.mark.parametrize(("asked", "cores", "count"), [(3, 2, 3), (1, 8, 1), (AUTO_WORKERS, 8, 8), (AUTO_WORKERS, 3, 3),
                                                       (AUTO_WORKERS, 2, 2), (AUTO_WORKERS, 1, 0),
                                                       (AUTO_WORKERS, 64, 16)])  # fmt: skip
def test_auto_is_one_worker_a_core_or_none_on_one_core(asked: int, cores: int, count: int) -> None:
    assert worker_count(asked, cores=cores, most=16) == count


def test_each_worker_gets_its_share_of_the_pool_and_of_what_may_be_in_flight_rounded_up() -> None:
    share = client_share(ClientSpec(pool_size=100, max_in_flight=5_000), 3)
    assert (share.pool_size, share.max_in_flight) == (34, 1_667)
    assert client_share(ClientSpec(pool_size=1, max_in_flight=1), 4).pool_size == 1  # never none


def test_the_attempt_caps_shares_add_up_to_the_cap_with_a_burst_of_one_at_least() -> None:
    assert cap_share(RateLimit(rate=1_000, burst=500), 4) == RateLimit(rate=250, burst=125)
    assert cap_share(RateLimit(rate=10, burst=2), 4) == RateLimit(rate=2.5, burst=1)


def test_a_retry_budget_keeps_its_ratio_and_splits_its_reserve() -> None:
    assert budget_share(RetryBudget(ratio=0.1, reserve=10), 4) == RetryBudget(ratio=0.1, reserve=2.5)
    assert budget_share(None, 4) is None


def measures(lags: list[float], **figures: object) -> GeneratorMeasures:
    lag = Histogram()
    for value in lags:
        lag.add(value)
    values: dict[str, object] = {"max_stall_ms": 1.0, "cpu_busy": 0.2, "overflow": 0, "unsent": 0,
                                 "unsent_waiting": 0, "collector": None, **figures}  # fmt: skip
    return GeneratorMeasures(lag=lag, **values)  # type: ignore[arg-type]


def test_merged_measures_pool_the_lags_sum_the_counts_and_keep_the_worst_process() -> None:
    merged = merged_measures([
        measures([1.0] * 99, max_stall_ms=5.0, cpu_busy=0.5, overflow=1, unsent=2, unsent_waiting=1, capped_first=3,
                 collector=CollectorReport(collections=(4, 1, 0), total_ms=6.0, max_pause_ms=3.0, frozen=10)),
        measures([50.0], max_stall_ms=2.0, cpu_busy=0.9, overflow=2, unsent=1, capped_first=1, capped_hops=2,
                 collector=CollectorReport(collections=(1, 0, 1), total_ms=9.0, max_pause_ms=8.0, frozen=20)),
    ])  # fmt: skip
    assert merged.lag.count == 100
    assert merged.lag.max == pytest.approx(50.0, rel=0.002)
    assert (merged.max_stall_ms, merged.cpu_busy) == (5.0, 0.9)
    assert (merged.overflow, merged.unsent, merged.unsent_waiting) == (3, 3, 1)
    assert (merged.capped_first, merged.capped_hops) == (4, 2)
    assert merged.collector == CollectorReport(collections=(5, 1, 1), total_ms=15.0, max_pause_ms=8.0, frozen=30)


def share(index: int, failure: str | None = None, lost: int = 0) -> WorkerShare:
    return WorkerShare(index=index, pid=100 + index, planned=10, dispatched=10 - lost, finished=10 - lost, lost=lost,
                       cpu_busy=0.1, max_stall_ms=1.0, gc_max_pause_ms=0.0, failure=failure)  # fmt: skip


def test_a_worker_below_its_runs_priority_is_named_when_the_run_fell_behind_and_only_then() -> None:
    low = replace(share(1), niceness=15, run_niceness=0)
    behind = judge_measures(measures([40.0] * 10), limits=GeneratorLimits(), cap_limit=None,
                            workers=(replace(share(0), niceness=0, run_niceness=0), low))  # fmt: skip
    assert behind.limited
    assert [r for r in behind.reasons if "nice" in r] == [
        "generator worker 2 of 2 ran at nice 15, below its run's priority (nice 0): whatever else runs there takes "
        "the CPU first (Ray starts its workers at nice 15 unless its cluster is started with RAY_worker_niceness=0)"
    ]
    assert behind.to_dict()["workers"][1]["niceness"] == 15
    kept = judge_measures(measures([1.0] * 10), limits=GeneratorLimits(), cap_limit=None, workers=(share(0), low))
    assert not kept.limited  # it kept its schedule all the same: nothing to explain
    assert kept.reasons == ()


def test_workers_that_finished_leave_the_verdict_to_the_measures() -> None:
    report = judge_measures(measures([1.0] * 10), limits=GeneratorLimits(), cap_limit=None,
                            workers=(share(0), share(1)), coordinator_cpu_busy=0.25)  # fmt: skip
    assert report.to_dict()["coordinator_cpu_busy"] == 0.25
    assert not report.limited
    assert report.reasons == ()
    assert [w["pid"] for w in report.to_dict()["workers"]] == [100, 101]


def test_a_worker_that_died_makes_the_run_limited_saying_which_and_how_much_it_lost() -> None:
    report = judge_measures(measures([1.0] * 10), limits=GeneratorLimits(), cap_limit=None,
                            workers=(share(0), share(1, failure="died (exit code -9)", lost=1_234)))  # fmt: skip
    assert report.limited
    assert report.reasons == ("generator worker 2 of 2 died (exit code -9): 1,234 request(s) lost (not sent)",)
    assert report.to_dict()["workers"][1]["failure"] == "died (exit code -9)"


def test_a_worker_on_another_node_whose_clock_was_not_known_well_enough_invalidates_the_run() -> None:
    on_a = replace(share(0), node="10.0.0.7 (ab12cd34)", clock_skew_ms=0.4, wall_offset_ms=-3.0)
    on_b = replace(share(1), node="10.0.0.8 (ef56ab78)", clock_skew_ms=6.2, wall_offset_ms=40.0)
    report = judge_measures(measures([1.0] * 10), limits=GeneratorLimits(clock_skew_ms=5.0), cap_limit=None,
                            workers=(on_a, on_b))  # fmt: skip
    assert report.limited
    assert report.reasons == (
        "generator worker 2 of 2 on 10.0.0.8 (ef56ab78): its clock was known only to within 6.2 ms of the "
        "coordinator's (bound 5 ms), so its requests may have left off schedule by that much",
    )
    assert report.to_dict()["workers"][1]["wall_clock_offset_ms"] == 40.0


def test_the_result_says_what_each_node_sent() -> None:
    workers = (
        replace(share(0), node="a", clock_skew_ms=0.5, cpu_busy=0.3),
        replace(share(1, failure="died (its Ray actor ended)", lost=4), node="b", clock_skew_ms=1.5),
        replace(share(2), node="a", clock_skew_ms=0.25, max_stall_ms=7.0),
    )
    report = judge_measures(measures([1.0] * 10), limits=GeneratorLimits(), cap_limit=None, workers=workers)
    assert report.to_dict()["nodes"] == [
        {"node": "a", "processes": 2, "planned": 20, "dispatched": 20, "finished": 20, "lost": 0,
         "max_cpu_busy": 0.3, "max_event_loop_stall_ms": 7.0, "clock_skew_ms": 0.5, "failed": 0},
        {"node": "b", "processes": 1, "planned": 10, "dispatched": 6, "finished": 6, "lost": 4,
         "max_cpu_busy": 0.1, "max_event_loop_stall_ms": 1.0, "clock_skew_ms": 1.5, "failed": 1},
    ]  # fmt: skip


def test_workers_on_the_coordinators_machine_list_no_nodes() -> None:
    report = judge_measures(measures([1.0] * 10), limits=GeneratorLimits(), cap_limit=None, workers=(share(0),))
    assert report.to_dict()["nodes"] is None


def test_a_run_in_its_own_process_reports_no_workers() -> None:
    report = judge_measures(measures([1.0]), limits=GeneratorLimits(), cap_limit=RateLimit(rate=5, burst=5))
    assert report.to_dict()["workers"] is None
    assert report.cap is not None
    assert not report.capped


def test_a_lost_requests_reason_names_its_worker() -> None:
    assert lost_reason(1, 3, "died (exit code -9)") == (
        "generator worker 2 of 3 died (exit code -9): its share of the load was lost"
    )


def test_the_caps_refuse_more_worker_processes_than_the_service_starts_and_let_auto_through() -> None:
    def scenario(workers: object) -> Scenario:
        return parse_scenario({
            "name": "w", "target": {"url": "http://127.0.0.1:8000", "api": "http"},
            "slo": {"e2e_ms": 1000, "timeout_ms": 2000}, "client": {"workers": workers},
            "phases": [{"name": "p", "role": "baseline", "duration_s": 1,
                        "arrival": {"process": "constant", "rate": 1}}],
        })  # fmt: skip

    caps = Caps(max_workers=4)
    assert cap_violations(scenario(4), caps) == []
    assert cap_violations(scenario("auto"), caps) == []
    assert [str(p) for p in cap_violations(scenario(5), caps)] == [
        "client.workers: starts 5 worker processes; this service starts at most 4 a run"
    ]
