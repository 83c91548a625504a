"""A small run's result, built from a scenario's own plan without running anything: for the tests that judge
results (game-day hypotheses, the suite service, CI outputs)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_MS, Attempt, Outcome, RequestRecord, TokenSource
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.results.scoring import score_run
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, judge_generator
from cliffwatch.domain.traffic.plan import iter_plan, phase_windows

SCENARIO = parse_scenario({
    "name": "hypothesis", "seed": 5,
    "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
    "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 10}},
    "phases": [
        {"name": "calm", "role": "baseline", "duration_s": 3, "arrival": {"process": "constant", "rate": 4}},
        {"name": "burst", "role": "stress", "duration_s": 2, "arrival": {"process": "constant", "rate": 10}},
    ],
})  # fmt: skip


def result(*, burst_fails: bool = False, scenario: Scenario = SCENARIO,
           latency_ms: Callable[[int, int], float] = lambda phase, request: 200.0,
           fails: Callable[[int, int], bool] | None = None, **overrides: Any) -> RunResult:  # fmt: skip
    """A run of ``scenario`` whose requests take 200 ms, the burst's failing with HTTP 500 when asked; or each
    taking ``latency_ms(phase, request id)`` and failing where ``fails(phase, request id)``."""
    aggregator = RunAggregator(phase_windows(scenario), e2e_ms=scenario.slo.e2e_ms, fast_fail_ms=100)
    for request in iter_plan(scenario):
        failed = fails(request.phase, request.id) if fails is not None else burst_fails and request.phase == 1
        start = request.scheduled_ns + NS_PER_MS
        took_ns = int(latency_ms(request.phase, request.id) * NS_PER_MS)
        outcome = (
            Outcome.ERROR if failed else Outcome.ON_TIME if took_ns <= scenario.slo.e2e_ms * NS_PER_MS else Outcome.LATE
        )
        attempt = Attempt(number=1, sent_ns=start, end_ns=start + took_ns,
                          failure=FailureKind.STATUS if failed else None, status=500 if failed else 200,
                          output_tokens=0 if failed else 10,
                          token_source=TokenSource.NONE if failed else TokenSource.USAGE)  # fmt: skip
        aggregator.add(RequestRecord(id=request.id, phase=request.phase, scheduled_ns=request.scheduled_ns,
                                     prompt_tokens=request.prompt_tokens, max_tokens=request.max_tokens,
                                     attempts=(attempt,), outcome=outcome))  # fmt: skip
    metrics = aggregator.result()
    values: dict[str, Any] = {
        "run_id": "r", "scenario": scenario, "target_url": "http://127.0.0.1:8000", "status": RunStatus.SUCCEEDED,
        "abort_reason": None, "started_at": datetime(2026, 1, 2, tzinfo=UTC),
        "finished_at": datetime(2026, 1, 2, tzinfo=UTC), "duration_s": 5.0, "metrics": metrics,
        "generator": judge_generator(Histogram(), max_stall_ms=3.0, cpu_busy=0.2, overflow=0, limits=GeneratorLimits()),
        "score": score_run(metrics, slo=scenario.slo, spec=scenario.score),
    }  # fmt: skip
    values.update(overrides)
    return RunResult(**values)
