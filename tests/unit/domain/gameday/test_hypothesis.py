"""An experiment's hypothesis: parsed with every bad clause named, and judged against a run's result."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from cliffwatch.domain.gameday.hypothesis import Hypothesis, judge, parse_hypothesis
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_MS, Attempt, Outcome, RequestRecord, TokenSource
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.results.scoring import score_run
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, judge_generator
from cliffwatch.domain.traffic.plan import iter_plan, phase_windows
from cliffwatch.domain.validation import Problems, Reader

SCENARIO = parse_scenario({
    "name": "hypothesis", "seed": 5,
    "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
    "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 10}},
    "phases": [
        {"name": "calm", "role": "baseline", "duration_s": 3, "arrival": {"process": "constant", "rate": 4}},
        {"name": "burst", "role": "stress", "duration_s": 2, "arrival": {"process": "constant", "rate": 10}},
    ],
})  # fmt: skip


def result(*, burst_fails: bool = False, **overrides: Any) -> RunResult:
    """A run of SCENARIO whose requests take 200 ms, the burst's failing with HTTP 500 when asked."""
    aggregator = RunAggregator(phase_windows(SCENARIO), e2e_ms=1000, fast_fail_ms=100)
    for request in iter_plan(SCENARIO):
        failed = burst_fails and request.phase == 1
        start = request.scheduled_ns + NS_PER_MS
        attempt = Attempt(number=1, sent_ns=start, end_ns=start + 200 * NS_PER_MS,
                          failure=FailureKind.STATUS if failed else None, status=500 if failed else 200,
                          output_tokens=0 if failed else 10,
                          token_source=TokenSource.NONE if failed else TokenSource.USAGE)  # fmt: skip
        outcome = Outcome.ERROR if failed else Outcome.ON_TIME
        aggregator.add(RequestRecord(id=request.id, phase=request.phase, scheduled_ns=request.scheduled_ns,
                                     prompt_tokens=request.prompt_tokens, max_tokens=request.max_tokens,
                                     attempts=(attempt,), outcome=outcome))  # fmt: skip
    metrics = aggregator.result()
    values: dict[str, Any] = {
        "run_id": "r", "scenario": SCENARIO, "target_url": "http://127.0.0.1:8000", "status": RunStatus.SUCCEEDED,
        "abort_reason": None, "started_at": datetime(2026, 1, 2, tzinfo=UTC),
        "finished_at": datetime(2026, 1, 2, tzinfo=UTC), "duration_s": 5.0, "metrics": metrics,
        "generator": judge_generator(Histogram(), max_stall_ms=3.0, cpu_busy=0.2, overflow=0, limits=GeneratorLimits()),
        "score": score_run(metrics, slo=SCENARIO.slo, spec=SCENARIO.score),
    }  # fmt: skip
    values.update(overrides)
    return RunResult(**values)


def parsed(expect: dict[str, Any]) -> tuple[Hypothesis | None, dict[str, str]]:
    problems = Problems()
    hypothesis = parse_hypothesis(Reader(expect, "experiments[0].expect", problems))
    return hypothesis, {p.path: p.message for p in problems.items}


def test_a_hypothesis_reads_its_clauses() -> None:
    hypothesis, problems = parsed({"score_at_least": 60, "passes": True, "no_hidden_overload": True})
    assert problems == {}
    assert hypothesis == Hypothesis(score_at_least=60, passes=True, absent=("hidden_overload",))
    assert hypothesis.describe() == "score at least 60, the run passes, no hidden_overload"


@pytest.mark.parametrize(
    ("expect", "path", "message"),
    [
        ({"score_at_least": 120}, "experiments[0].expect.score_at_least", "must be <= 100"),
        ({"no_such_thing": True}, "experiments[0].expect.no_such_thing", "names no verdict"),
        ({"no_capped": False}, "experiments[0].expect.no_capped", "may only be true"),
        ({"score": 60}, "experiments[0].expect.score", "unknown key"),
    ],
)
def test_a_bad_clause_is_named(expect: dict[str, Any], path: str, message: str) -> None:
    hypothesis, problems = parsed(expect)
    assert hypothesis is None
    assert message in problems[path]


def test_a_healthy_run_holds_every_clause() -> None:
    judgement = judge(Hypothesis(score_at_least=90, passes=True, absent=("generator_limited",)), result())
    assert judgement.held
    assert judgement.summary() == "held"


def test_a_score_below_the_bar_breaks_the_hypothesis_saying_by_how_much() -> None:
    run = result(burst_fails=True)
    assert run.score.value is not None
    judgement = judge(Hypothesis(score_at_least=90), run)
    assert not judgement.held
    assert judgement.broken_because == (f"score {run.score.value:.1f} < 90",)


def test_a_verdict_that_must_be_absent_breaks_it_with_the_verdicts_own_words() -> None:
    limited = judge_generator(Histogram(), max_stall_ms=400.0, cpu_busy=0.2, overflow=2, limits=GeneratorLimits())
    judgement = judge(Hypothesis(absent=("generator_limited",)), result(generator=limited))
    assert not judgement.held
    (reason,) = judgement.broken_because
    assert reason.startswith("generator_limited: the load generator could not keep its schedule")


def test_a_run_that_did_not_end_on_its_own_breaks_any_hypothesis() -> None:
    stopped = dataclasses.replace(result(), status=RunStatus.ABORTED, abort_reason="emergency stop")
    judgement = judge(Hypothesis(), stopped)
    assert judgement.broken_because[0] == "the run aborted: emergency stop"
