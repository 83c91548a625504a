from __future__ import annotations

from dataclasses import replace

from cliffwatch.domain.capacity.capacity_result import summarize
from cliffwatch.domain.capacity.capacity_stats import Interval, StepStats
from cliffwatch.domain.capacity.drift import Disagreement, DriftReading, TargetDrift
from cliffwatch.domain.capacity.found_capacity import CapacityResult
from cliffwatch.domain.ci.checks import CheckStatus, CiReport
from cliffwatch.domain.ci.sweep_checks import sweep_suites
from cliffwatch.domain.results.result import RunStatus


def step(rate: float, *, on_time_share: float, limited: bool = False) -> StepStats:
    """A 20-s step at ``rate`` whose requests not on time were late."""
    offered = round(rate * 20)
    on_time = round(offered * on_time_share)
    return StepStats(
        rate=rate, trial=1, duration_s=20.0, offered=offered, on_time=on_time, late=offered - on_time, shed=0,
        fast_shed=0, timeout=0, error=0, not_sent=0, sent_rate=rate, goodput_rps=on_time / 20,
        completions_per_s=rate, tokens_per_s=rate * 100, amplification=1.0,
        ttft_ms={"p50": 100.0, "p90": 200.0, "p99": 300.0}, itl_ms={"p50": 10.0, "p90": 20.0, "p99": 30.0},
        e2e_ms={"p50": 500.0, "p90": 800.0, "p99": 900.0 if on_time_share > 0.99 else 5000.0},
        generator_limited=limited, generator_reasons=("event loop stalled 400 ms",) if limited else (),
    )  # fmt: skip


def capacity(*steps: StepStats) -> CapacityResult:
    return summarize(steps, target=0.99, e2e_slo_ms=1000.0, finished_because="bracketed within 5 %")


def reading(trial: int, index: int, on_time: int) -> DriftReading:
    return DriftReading(rate=4.0, trial=trial, step_index=index, started_s=None, offered=80, on_time=on_time,
                        interval=Interval(low=on_time / 80 - 0.05, high=min(on_time / 80 + 0.05, 1.0)),
                        median_e2e_ms=500.0)  # fmt: skip


def suites_of(*variants: tuple[str, CapacityResult], mismatch: str | None = None,
              status: RunStatus = RunStatus.SUCCEEDED) -> CiReport:  # fmt: skip
    suites = sweep_suites(scenario="s", status=status, reason=None if status is RunStatus.SUCCEEDED else "stopped",
                          duration_s=100.0, workload_mismatch=mismatch, variants=variants)  # fmt: skip
    return CiReport(name="sweep", suites=suites)


def test_a_sweep_that_found_capacity_passes_a_suite_for_itself_and_one_a_variant() -> None:
    found = capacity(step(2.0, on_time_share=1.0), step(4.0, on_time_share=1.0), step(8.0, on_time_share=0.5))
    report = suites_of(("as-written", found), ("no-retry", found))
    assert [s.name for s in report.suites] == ["s sweep", "s sweep (as-written)", "s sweep (no-retry)"]
    assert [c.name for c in report.suites[1].checks] == [
        "usable capacity found", "generator kept its schedule", "target speed steady",
    ]  # fmt: skip
    assert not report.failed
    assert report.annotations() == []
    assert "usable capacity 4 req/s" in report.suites[1].checks[0].detail


def test_no_usable_capacity_fails_with_the_sweeps_verdict() -> None:
    none = capacity(step(2.0, on_time_share=0.5), step(4.0, on_time_share=0.3))
    check = suites_of(("as-written", none)).suites[1].checks[0]
    assert (check.status, check.kind, check.message) == (CheckStatus.FAILED, "no_usable_capacity", none.verdict)


def test_generator_limited_steps_fail_their_variant_naming_the_rate_and_the_reason() -> None:
    limited = capacity(step(2.0, on_time_share=1.0), step(4.0, on_time_share=1.0, limited=True))
    check = suites_of(("as-written", limited)).suites[1].checks[1]
    assert check.status is CheckStatus.FAILED
    assert check.kind == "generator_limited"
    assert "4 req/s (trial 1): event loop stalled 400 ms" in check.message


def test_a_workload_mismatch_and_an_unfinished_sweep_fail_the_sweeps_own_suite() -> None:
    report = suites_of(mismatch="the calibration failed", status=RunStatus.INTERRUPTED)
    checks = {c.name: c for c in report.suites[0].checks}
    assert checks["sweep completed"].status is CheckStatus.FAILED
    assert checks["sweep completed"].message == "stopped"
    assert checks["workload as asked"].kind == "workload_mismatch"
    assert checks["workload as asked"].message.endswith(": the calibration failed")


def test_drift_warns_without_failing() -> None:
    found = capacity(step(2.0, on_time_share=1.0), step(4.0, on_time_share=1.0), step(8.0, on_time_share=0.5))
    drift = TargetDrift(confidence=0.999, disagreements=(Disagreement(earlier=reading(1, 1, 80),
                                                                      later=reading(2, 3, 40)),))  # fmt: skip
    report = suites_of(("as-written", replace(found, target_drift=drift)))
    assert not report.failed
    [annotation] = report.annotations()
    assert (annotation.level, annotation.title) == ("warning", "s sweep (as-written): target speed steady")
    assert "trials at 4 req/s disagreed (-50.0 points on time)" in annotation.message
