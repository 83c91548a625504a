"""A finished run: whether it passed, its verdicts, and the strict-JSON document it is written as."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cliffwatch import __version__
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import (
    NS_PER_MS,
    NS_PER_S,
    OUTCOMES,
    Attempt,
    Outcome,
    RequestRecord,
    TokenSource,
)
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.result import RESULT_FORMAT, PhaseTiming, RunResult, RunStatus
from cliffwatch.domain.results.scoring import SCORE_VERSION, score_run
from cliffwatch.domain.scenario.faults import FaultEvent, FaultSpec, Stream, ToxicType
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.traffic.generator_health import CapReport, GeneratorLimits, judge_generator
from cliffwatch.domain.traffic.plan import iter_plan, phase_windows
from cliffwatch.domain.traffic.rate_limit import RateLimit

LATENCY = FaultSpec(proxy="llm", type=ToxicType.LATENCY, stream=Stream.DOWNSTREAM, toxicity=1.0, attributes={})


def _scenario() -> Scenario:
    return parse_scenario(
        {
            "name": "result-test",
            "seed": 5,
            "slo": {"e2e_ms": 1000, "timeout_ms": 3000, "ttft_ms": 500},
            "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 10}},
            "phases": [
                {"name": "calm", "role": "baseline", "duration_s": 3, "arrival": {"process": "constant", "rate": 4}},
                {"name": "burst", "role": "stress", "duration_s": 2, "arrival": {"process": "constant", "rate": 10}},
                {"name": "after", "role": "recovery", "duration_s": 6, "arrival": {"process": "constant", "rate": 4}},
            ],
        }
    )


def _result(scenario: Scenario, *, fail_stress: bool = False, **overrides: Any) -> RunResult:
    """A result built from the scenario's own plan: every request answered in 200 ms, with ten tokens."""
    fast_fail_ms = scenario.score.fast_fail_fraction * scenario.slo.e2e_ms
    aggregator = RunAggregator(phase_windows(scenario), e2e_ms=scenario.slo.e2e_ms, fast_fail_ms=fast_fail_ms)
    for request in iter_plan(scenario):
        start = request.scheduled_ns + NS_PER_MS
        end = start + 200 * NS_PER_MS
        failed = fail_stress and request.phase == 1
        attempt = Attempt(
            number=1,
            sent_ns=start,
            end_ns=end,
            failure=FailureKind.STATUS if failed else None,
            status=500 if failed else 200,
            first_token_ns=None if failed else start + 50 * NS_PER_MS,
            chunk_times_ns=() if failed else tuple(start + (50 + 15 * i) * NS_PER_MS for i in range(10)),
            output_tokens=0 if failed else 10,
            token_source=TokenSource.NONE if failed else TokenSource.USAGE,
        )
        aggregator.add(
            RequestRecord(
                id=request.id,
                phase=request.phase,
                scheduled_ns=request.scheduled_ns,
                prompt_tokens=request.prompt_tokens,
                max_tokens=request.max_tokens,
                attempts=(attempt,),
                outcome=Outcome.ERROR if failed else Outcome.ON_TIME,
            )
        )
    metrics = aggregator.result()
    windows = phase_windows(scenario)
    values: dict[str, Any] = {
        "run_id": "run-7",
        "scenario": scenario,
        "target_url": "http://127.0.0.1:8000",
        "status": RunStatus.SUCCEEDED,
        "abort_reason": None,
        "started_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "finished_at": datetime(2026, 1, 2, 3, 4, 16, tzinfo=UTC),
        "duration_s": 11.0004,
        "metrics": metrics,
        "generator": judge_generator(Histogram(), max_stall_ms=3.0, cpu_busy=0.2, overflow=0, limits=GeneratorLimits()),
        "score": score_run(metrics, slo=scenario.slo, spec=scenario.score),
        "fault_events": (
            FaultEvent(phase=1, fault=LATENCY, action="on", at_ns=3 * NS_PER_S + 2_000_000, ok=True),
            FaultEvent(phase=1, fault=LATENCY, action="off", at_ns=5 * NS_PER_S, ok=True, detail="toxic-1"),
        ),
        "phase_timings": tuple(
            PhaseTiming(index=w.index, began_ns=w.start_ns + 1_000_000, ended_ns=w.end_ns + 4_000_000) for w in windows
        ),
    }
    values.update(overrides)
    return RunResult(**values)


def _limited() -> Any:
    return judge_generator(Histogram(), max_stall_ms=400.0, cpu_busy=0.2, overflow=2, limits=GeneratorLimits())


def _capped(**held: int) -> Any:
    cap = CapReport(limit=RateLimit(rate=5, burst=5), **held)
    return judge_generator(Histogram(), max_stall_ms=3.0, cpu_busy=0.2, overflow=0, limits=GeneratorLimits(), cap=cap)


def _document(result: RunResult) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    return document


def test_a_complete_on_time_run_passes() -> None:
    """Succeeded, generator within its limits and a score over the threshold: passed, with no verdicts."""
    result = _result(_scenario())
    assert result.score.passed
    assert result.passed is True
    assert result.verdicts() == []


@pytest.mark.parametrize(
    ("overrides", "verdict"),
    [
        pytest.param({"generator": _limited()}, "generator_limited", id="generator-limited"),
        pytest.param({"status": RunStatus.ABORTED, "abort_reason": "too many errors"}, "aborted", id="aborted"),
        pytest.param({"status": RunStatus.INTERRUPTED}, "interrupted", id="interrupted"),
        pytest.param({"generator": _capped(retries=3)}, "capped", id="capped"),
    ],
)
def test_a_run_that_cannot_be_trusted_does_not_pass(overrides: dict[str, Any], verdict: str) -> None:
    """A limited generator, an abort or an interrupt fails the run even with a passing score, and says why."""
    result = _result(_scenario(), **overrides)
    assert result.score.passed
    assert result.passed is False
    assert [v.name for v in result.verdicts()] == [verdict]


def test_a_fault_that_could_not_be_removed_is_a_verdict_of_its_own() -> None:
    """A fault left behind is said loudly, with what went wrong and how it will be cleaned up."""
    events = (
        FaultEvent(phase=1, fault=LATENCY, action="on", at_ns=3 * NS_PER_S, ok=True),
        FaultEvent(phase=1, fault=LATENCY, action="off", at_ns=5 * NS_PER_S, ok=False, detail="HTTP 500"),
    )
    result = _result(_scenario(), fault_events=events)
    [verdict] = result.verdicts()
    assert verdict.name == "fault_left_behind"
    assert "HTTP 500" in verdict.summary
    assert "reconcile" in verdict.summary


def test_the_verdicts_explain_themselves() -> None:
    """The generator verdict lists its reasons; the abort verdict carries the abort reason."""
    result = _result(_scenario(), generator=_limited(), status=RunStatus.ABORTED, abort_reason="baseline unhealthy")
    summaries = {v.name: v.summary for v in result.verdicts()}
    assert "event loop stalled 400 ms > 100 ms" in summaries["generator_limited"]
    assert "2 request(s) not sent: max_in_flight reached" in summaries["generator_limited"]
    assert summaries["aborted"] == "baseline unhealthy"


def test_a_capped_run_says_what_its_attempt_cap_held_back() -> None:
    """The capped verdict names the cap and each kind of attempt held back; the document says capped at its
    top and the numbers under generator.attempt_cap. A cap that held nothing back is no verdict."""
    result = _result(_scenario(), generator=_capped(first_attempts=2, retries=7, delayed=1))
    [verdict] = result.verdicts()
    assert verdict.summary == (
        "the run's attempt cap (5/s, burst 5) held the load back (2 request(s) not sent, 7 retry(ies) not sent, "
        "1 closed-loop request(s) delayed): what was sent is not the load as written"
    )
    document = _document(result)
    assert document["capped"] is True
    assert document["generator"]["attempt_cap"] == {"rate": 5, "burst": 5, "capped": True,
                                                    "first_attempts_not_sent": 2, "retries_not_sent": 7,
                                                    "closed_loop_delayed": 1,
                                                    "redirect_hops_not_followed": 0}  # fmt: skip
    untouched = _result(_scenario(), generator=_capped())
    assert (untouched.capped, untouched.passed, untouched.verdicts()) == (False, True, [])
    assert _document(untouched)["generator"]["attempt_cap"]["capped"] is False


def test_a_failing_score_fails_the_run() -> None:
    """Errors through the stress phase bring the score under the threshold, and the run does not pass."""
    result = _result(_scenario(), fail_stress=True)
    assert result.status is RunStatus.SUCCEEDED
    assert result.score.passed is False
    assert result.passed is False


def test_the_document_is_strict_json_with_every_section() -> None:
    """to_dict carries the run, scenario, target, versioned score, generator, phases, time series and faults."""
    scenario = _scenario()
    document = _document(_result(scenario))
    assert document["format"] == RESULT_FORMAT
    assert document["cliffwatch_version"] == __version__
    assert document["run_id"] == "run-7"
    assert document["status"] == "succeeded"
    assert document["passed"] is True
    assert document["abort_reason"] is None
    assert document["started_at"] == "2026-01-02T03:04:05+00:00"
    assert document["duration_s"] == 11.0
    assert document["target"] == {"url": "http://127.0.0.1:8000", "api": "openai-chat"}
    assert document["scenario"]["name"] == "result-test"
    assert document["scenario"]["content_hash"] == scenario.content_hash
    assert [p["arrival"] for p in document["scenario"]["phases"]] == ["constant 4/s", "constant 10/s", "constant 4/s"]
    assert document["score_version"] == SCORE_VERSION == document["score"]["version"]
    assert [c["name"] for c in document["score"]["components"]] == [
        "preservation",
        "safe_degradation",
        "recovery",
        "retry_containment",
        "isolation",
    ]
    assert document["generator"]["generator_limited"] is False
    assert document["generator"]["attempt_cap"] is None
    assert document["capped"] is False
    assert document["verdicts"] == []


def test_phases_carry_planned_and_actual_times_and_their_counts() -> None:
    """Each phase row has its planned window, its measured start and end, and what was offered and on time."""
    phases = _document(_result(_scenario()))["phases"]
    assert [(p["name"], p["role"]) for p in phases] == [
        ("calm", "baseline"),
        ("burst", "stress"),
        ("after", "recovery"),
    ]
    calm = phases[0]
    assert (calm["planned_start_s"], calm["planned_end_s"]) == (0.0, 3.0)
    assert (calm["actual_start_s"], calm["actual_end_s"]) == (0.001, 3.004)
    assert calm["offered"] == calm["sent"] == 12
    assert calm["outcomes"] == {o.value: (12 if o is Outcome.ON_TIME else 0) for o in OUTCOMES}
    assert calm["on_time_ratio"] == 1.0
    assert calm["token_count_source"] == {"usage": 12}
    assert calm["latency_ms"]["e2e"]["count"] == 12
    assert phases[1]["offered"] == 20


def test_a_phase_that_never_ran_has_no_actual_times() -> None:
    """Phases without a timing (the run stopped before them) show null actual times."""
    result = _result(_scenario(), phase_timings=(PhaseTiming(index=0, began_ns=0, ended_ns=3 * NS_PER_S),))
    phases = _document(result)["phases"]
    assert [p["actual_start_s"] for p in phases] == [0.0, None, None]


def test_timeseries_rows_cover_every_second_with_every_outcome() -> None:
    """One row per second from 0, each with every outcome class and the latency percentiles."""
    rows = _document(_result(_scenario()))["timeseries"]
    assert [row["t"] for row in rows] == list(range(len(rows)))
    assert len(rows) == 11
    assert sum(row["offered"] for row in rows) == len(list(iter_plan(_scenario())))
    first = rows[0]
    assert {o.value for o in OUTCOMES} <= set(first)
    assert {"ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms"} <= set(first)
    assert first["e2e_p50_ms"] == pytest.approx(201.0, rel=0.02)
    assert first["output_tokens"] == 40.0


def test_fault_events_are_written_in_seconds_from_the_start() -> None:
    """Fault rows give the phase, action, run-relative seconds, the fault and whether it worked."""
    faults = _document(_result(_scenario()))["faults"]
    assert faults == [
        {"phase": 1, "action": "on", "at_s": 3.002, "fault": "latency() on llm downstream", "ok": True, "detail": ""},
        {
            "phase": 1,
            "action": "off",
            "at_s": 5.0,
            "fault": "latency() on llm downstream",
            "ok": True,
            "detail": "toxic-1",
        },
    ]


def test_a_run_with_nothing_recorded_is_still_strict_json() -> None:
    """Empty phases and seconds give nulls where there is nothing to measure, never NaN or infinity."""
    scenario = _scenario()
    empty = RunAggregator(phase_windows(scenario), e2e_ms=1000, fast_fail_ms=100).result()
    result = _result(
        scenario,
        metrics=empty,
        score=score_run(empty, slo=scenario.slo, spec=scenario.score),
        status=RunStatus.INTERRUPTED,
        phase_timings=(),
        fault_events=(),
    )
    document = _document(result)
    assert document["score"]["value"] is None
    assert document["timeseries"] == []
    assert all(p["on_time_ratio"] is None and p["amplification"] is None for p in document["phases"])
    assert document["passed"] is False


def test_the_document_round_trips_through_json_unchanged() -> None:
    """Nothing in to_dict needs a custom encoder: dumping and loading gives an equal document."""
    document = _result(_scenario(), generator=_limited()).to_dict()
    assert json.loads(json.dumps(document, allow_nan=False)) == document
