"""An experiment's hypothesis: parsed with every bad clause named, and judged against a run's result."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cliffwatch.domain.gameday.hypothesis import Hypothesis, judge, parse_hypothesis
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, judge_generator
from cliffwatch.domain.validation import Problems, Reader
from run_results_kit import result


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
