"""Isolation: who is a victim (its planned rate held while another's rose), and how much of its goodput survived."""

from __future__ import annotations

import pytest

from cliffwatch.domain.outcomes import NS_PER_MS, Attempt, Outcome, RequestRecord, Slo
from cliffwatch.domain.results.isolation import ClassPlan, class_plans, victim_phases
from cliffwatch.domain.results.metrics import ClassBook, RunAggregator
from cliffwatch.domain.results.scoring import ISOLATION, score_run
from cliffwatch.domain.scenario.guards import ScoreSpec
from cliffwatch.domain.scenario.scenario import PhaseRole, parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan, phase_windows

SLO = Slo(e2e_ms=1000.0, timeout_ms=3000.0)
ROLES = (PhaseRole.BASELINE, PhaseRole.STRESS, PhaseRole.RECOVERY)
DURATIONS = (10.0, 10.0, 10.0)


def plan(name: str, *rates: float) -> ClassPlan:
    return ClassPlan(name=name, slo=SLO, rates=tuple(rates))


def test_a_class_that_held_its_rate_while_another_rose_is_a_victim_there() -> None:
    found = victim_phases([plan("chat", 2, 2, 2), plan("batch", 0.3, 4, 0.3)], ROLES, DURATIONS)
    assert [(v.victim, v.phase, v.rising) for v in found] == [(0, 1, ("batch",))]


def test_no_one_is_a_victim_when_everyone_rose_or_no_one_did() -> None:
    assert victim_phases([plan("a", 1, 5, 1), plan("b", 1, 5, 1)], ROLES, DURATIONS) == []
    assert victim_phases([plan("a", 1, 1, 1), plan("b", 1, 1, 1)], ROLES, DURATIONS) == []
    assert victim_phases([plan("a", 1, 1.05, 1), plan("b", 1, 3, 1)], ROLES, DURATIONS)  # within the tolerance


def test_one_class_or_no_baseline_leaves_isolation_without_a_reference() -> None:
    assert victim_phases([plan("a", 1, 1, 1)], ROLES, DURATIONS) == []
    no_baseline = (PhaseRole.STRESS, PhaseRole.STRESS, PhaseRole.RECOVERY)
    assert victim_phases([plan("a", 1, 1, 1), plan("b", 1, 5, 1)], no_baseline, DURATIONS) == []


def test_a_class_that_sent_nothing_in_the_phase_is_no_victim() -> None:
    assert victim_phases([plan("chat", 2, 0, 2), plan("batch", 0.3, 4, 0.3)], ROLES, DURATIONS) == []


SCENARIO = parse_scenario(
    {
        "name": "shared",
        "seed": 2,
        "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "classes": {"chat": {}, "batch": {"slo": {"e2e_ms": 3000}}},
        "phases": [
            {"name": "calm", "role": "baseline", "duration_s": 10,
             "arrival": {"chat": {"process": "constant", "rate": 4}, "batch": {"process": "constant", "rate": 1}}},
            {"name": "burst", "role": "stress", "duration_s": 10,
             "arrival": {"chat": {"process": "constant", "rate": 4}, "batch": {"process": "constant", "rate": 8}}},
        ],
    }
)  # fmt: skip


def record_of(request: PlannedRequest, *, late: bool) -> RequestRecord:
    start = request.scheduled_ns + NS_PER_MS
    took = 5_000 if late else 100
    attempt = Attempt(number=1, sent_ns=start, end_ns=start + took * NS_PER_MS, status=200, output_tokens=8)
    return RequestRecord(id=request.id, phase=request.phase, scheduled_ns=request.scheduled_ns,
                         prompt_tokens=request.prompt_tokens, max_tokens=request.max_tokens, attempts=(attempt,),
                         outcome=Outcome.LATE if late else Outcome.ON_TIME, klass=request.klass)  # fmt: skip


def test_isolation_is_the_share_of_the_victims_goodput_ratio_that_survived() -> None:
    """The chat class kept its 4 req/s while batch burst to 8: one chat request in four was on time then."""
    books = [ClassBook(name=c.name, e2e_ms=c.slo.e2e_ms, fast_fail_ms=100) for c in SCENARIO.classes]
    aggregator = RunAggregator(phase_windows(SCENARIO), e2e_ms=1000, fast_fail_ms=100, classes=books)
    chat_in_burst = 0
    for request in iter_plan(SCENARIO):
        late = False
        if request.phase == 1 and request.klass == 0:
            late = chat_in_burst % 4 != 0
            chat_in_burst += 1
        aggregator.add(record_of(request, late=late))
    metrics = aggregator.result()
    assert [name for name, _ in metrics.classes] == ["chat", "batch"]
    score = score_run(metrics, slo=SCENARIO.slo, spec=ScoreSpec(), plans=class_plans(SCENARIO))
    isolation = next(c for c in score.components if c.name == ISOLATION)
    assert isolation.value == pytest.approx(0.25)
    assert isolation.summary == ("chat kept 25 % of its goodput ratio in burst while batch rose (10 of 40 on time "
                                 "against 100 % at its baseline).")  # fmt: skip
    assert isolation.evidence["chat@burst.survived"] == pytest.approx(0.25)
    chat, batch = score.classes
    assert next(c for c in chat.components if c.name == ISOLATION).value == pytest.approx(0.25)
    assert next(c for c in batch.components if c.name == ISOLATION).value is None  # never a victim
    assert batch.value == 100.0  # every batch request on time
    assert chat.value is not None
    assert chat.value < 50


def test_a_run_without_classes_has_no_class_views_and_no_isolation() -> None:
    plain = parse_scenario({"name": "p", "target": {"url": "builtin", "request": {"model": "sim-llm"}},
                            "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
                            "phases": [{"name": "p", "role": "baseline", "duration_s": 2,
                                        "arrival": {"process": "constant", "rate": 2}}]})  # fmt: skip
    aggregator = RunAggregator(phase_windows(plain), e2e_ms=1000, fast_fail_ms=100)
    for request in iter_plan(plain):
        aggregator.add(record_of(request, late=False))
    score = score_run(aggregator.result(), slo=plain.slo, spec=ScoreSpec(), plans=class_plans(plain))
    assert score.classes == ()
    assert next(c for c in score.components if c.name == ISOLATION).value is None
