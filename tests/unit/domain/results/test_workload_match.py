"""workload_mismatch: a run whose prompts the server counted far from the sizes asked, or that nobody could
size, says so; the output shortfall per phase is reported beside it."""

from __future__ import annotations

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_S
from cliffwatch.domain.results.run_metrics import PhaseStats
from cliffwatch.domain.results.workload_match import output_shortfall_summary, workload_mismatch
from cliffwatch.domain.scenario.scenario import PhaseRole
from cliffwatch.domain.traffic.plan import PhaseWindow
from cliffwatch.domain.workload.prompt_sizing import PromptSizing, PromptSource

WINDOW = PhaseWindow(index=0, name="only", role=PhaseRole.BASELINE, start_ns=0, end_ns=10 * NS_PER_S)
CALIBRATED = PromptSizing(source=PromptSource.CALIBRATED)


def phase(*signed_errors: float) -> PhaseStats:
    stats = PhaseStats(window=WINDOW)
    for error in signed_errors:
        stats.prompt_error.add(abs(error))
        stats.prompt_error_signed += error
    return stats


def test_prompts_within_ten_percent_on_average_are_the_workload_asked_for() -> None:
    assert workload_mismatch(CALIBRATED, [phase(9.0, -9.0, 10.0)]) is None
    assert workload_mismatch(CALIBRATED, [phase()]) is None  # no answer carried a count: nothing says otherwise


def test_prompts_more_than_ten_percent_off_on_average_are_another_workload() -> None:
    reason = workload_mismatch(CALIBRATED, [phase(5.0, 5.0), phase(30.0, 30.0)])  # pooled over phases: 17.5 %
    assert reason is not None
    assert "17.5 % off the sizes asked" in reason
    assert "4 answers; mostly longer" in reason
    shorter = workload_mismatch(CALIBRATED, [phase(-20.0, -20.0)])
    assert shorter is not None
    assert "mostly shorter" in shorter


def test_a_failed_sizing_is_a_mismatch_whatever_the_counts_say() -> None:
    failed = PromptSizing(source=PromptSource.WORDS, failure="calibration failed: 1 of 4 probes answered")
    reason = workload_mismatch(failed, [phase(0.0, 0.0)])
    assert reason is not None
    assert reason.startswith("calibration failed: 1 of 4 probes answered")
    assert "nobody measured them" in reason


def test_the_output_shortfall_says_how_many_answers_ended_early_and_by_how_much() -> None:
    shortfall = Histogram()
    for value in (0.0, 0.0, 50.0, 100.0):
        shortfall.add(value)
    summary = output_shortfall_summary(shortfall)
    assert summary is not None
    assert summary["answers"] == 4
    assert summary["mean_pct"] == 37.5
    assert summary["short_share"] == 0.5
    assert output_shortfall_summary(Histogram()) is None
