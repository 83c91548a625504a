"""A run result for the CI tests, with the score given outright: its checks follow the score's and the verdicts'
values, not how they were computed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.results.score_values import SCORE_VERSION, Component, Flag, Score
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, GeneratorReport, judge_generator
from cliffwatch.domain.traffic.plan import phase_windows


def scenario() -> Scenario:
    return parse_scenario({
        "name": "ci-test",
        "seed": 5,
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 10}},
        "phases": [
            {"name": "calm", "role": "baseline", "duration_s": 3, "arrival": {"process": "constant", "rate": 4}},
        ],
    })  # fmt: skip


def score(values: dict[str, float | None], *, threshold: float = 70.0, hidden_overload: bool = False) -> Score:
    """A score of the components ``values`` (0-1, None: not applicable), equally weighted."""
    applicable = [v for v in values.values() if v is not None]
    value = round(100 * sum(applicable) / len(applicable), 1) if applicable else None
    components = tuple(
        Component(name=name, value=v, weight=0.25, summary=f"{name} said its sentence", evidence={"kept": 0.5})
        for name, v in values.items()
    )
    flag = Flag(name="hidden_overload", raised=hidden_overload, summary="answers were hollow", evidence={"hollow": 3})
    passed = value is not None and value >= threshold
    return Score(version=SCORE_VERSION, value=value, threshold=threshold, passed=passed, components=components,
                 flags=(flag,), summary=f"score {value} against {threshold:g}: the sentence")  # fmt: skip


def steady_generator() -> GeneratorReport:
    return judge_generator(Histogram(), max_stall_ms=3.0, cpu_busy=0.2, overflow=0, limits=GeneratorLimits())


def limited_generator() -> GeneratorReport:
    return judge_generator(Histogram(), max_stall_ms=400.0, cpu_busy=0.2, overflow=2, limits=GeneratorLimits())


def run_result(**overrides: Any) -> RunResult:
    """A complete run of ``scenario()`` scoring 90 of a 70 pass mark, unless told otherwise."""
    chosen = scenario()
    metrics = RunAggregator(phase_windows(chosen), e2e_ms=1000.0, fast_fail_ms=100.0).result()
    values: dict[str, Any] = {
        "run_id": "run-1",
        "scenario": chosen,
        "target_url": "http://127.0.0.1:8000",
        "status": RunStatus.SUCCEEDED,
        "abort_reason": None,
        "started_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "finished_at": datetime(2026, 1, 2, 3, 4, 8, tzinfo=UTC),
        "duration_s": 3.0,
        "metrics": metrics,
        "generator": steady_generator(),
        "score": score({"preservation": 0.9, "recovery": 0.9, "isolation": None}),
    }
    values.update(overrides)
    return RunResult(**values)
