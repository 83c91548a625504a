"""RunService against its in-memory twins: phases on a real monotonic clock, faults, guards, interrupts.

Phases last a fraction of a second and the twins answer in a few milliseconds, so each run takes one or
two seconds of wall time; assertions on timing leave hundreds of milliseconds of slack.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.errors import FaultInjectionFailed, TargetUnreachable
from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S, Attempt, Outcome, RequestRecord, Slo, classify
from cliffwatch.domain.ports import Clock, FaultInjector
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.results.scoring import SCORE_VERSION
from cliffwatch.domain.scenario.faults import FaultEvent, FaultSpec
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan, phase_windows
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing
from cliffwatch.services.memory import (
    CollectingObserver,
    InMemorySink,
    NoFaultInjector,
    RecordingFaultInjector,
    ScriptedGenerator,
)
from cliffwatch.services.runner import RunService

SLO = Slo(e2e_ms=500.0, timeout_ms=1_000.0)
LATENCY = {"proxy": "llm", "type": "latency", "attributes": {"latency": 100}}
Respond = Callable[[PlannedRequest], tuple[float, RequestRecord]]


# -- builders ---------------------------------------------------------------------------------------


def _phase(name: str, role: str, duration_s: float, rate: float = 20, *faults: dict[str, Any]) -> dict[str, Any]:
    phase: dict[str, Any] = {
        "name": name,
        "role": role,
        "duration_s": duration_s,
        "arrival": {"process": "constant", "rate": rate},
    }
    if faults:
        phase["faults"] = list(faults)
    return phase


def _scenario(*phases: dict[str, Any], abort: dict[str, Any] | None = None) -> Scenario:
    document: dict[str, Any] = {
        "name": "runner-test",
        "seed": 3,
        "slo": {"e2e_ms": SLO.e2e_ms, "timeout_ms": SLO.timeout_ms},
        "proxies": [{"name": "llm"}],
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "phases": list(phases),
    }
    if abort is not None:
        document["abort"] = abort
    return parse_scenario(document)


def _three_phases(duration_s: float = 0.4, *, stress_faults: bool = True) -> Scenario:
    faults = (LATENCY,) if stress_faults else ()
    return _scenario(
        _phase("calm", "baseline", duration_s),
        _phase("burst", "stress", duration_s, 20, *faults),
        _phase("after", "recovery", duration_s),
    )


def _record(request: PlannedRequest, *, took_ms: float, failure: FailureKind | None = None) -> RequestRecord:
    """The record of a request answered ``took_ms`` after its scheduled time (a failure when ``failure``)."""
    end = request.scheduled_ns + round(took_ms * NS_PER_MS)
    attempt = Attempt(
        number=1,
        sent_ns=request.scheduled_ns,
        end_ns=end,
        failure=failure,
        error=None if failure is None else "refused",
        first_token_ns=None if failure else end,
        output_tokens=0 if failure else request.max_tokens,
    )
    return RequestRecord(
        id=request.id,
        phase=request.phase,
        scheduled_ns=request.scheduled_ns,
        prompt_tokens=request.prompt_tokens,
        max_tokens=request.max_tokens,
        attempts=(attempt,),
        outcome=classify((attempt,), scheduled_ns=request.scheduled_ns, slo=SLO),
    )


def on_time(latency_s: float = 0.01) -> Respond:
    return lambda request: (latency_s, _record(request, took_ms=latency_s * 1000))


def late_in(phase: int) -> Respond:
    """On time, except that the requests of ``phase`` finish past the e2e bound."""
    return lambda request: (0.01, _record(request, took_ms=SLO.e2e_ms * 1.5 if request.phase == phase else 10))


def errors_in(phase: int) -> Respond:
    """On time, except that the requests of ``phase`` fail with a connection error."""

    def respond(request: PlannedRequest) -> tuple[float, RequestRecord]:
        failure = FailureKind.CONNECTION if request.phase == phase else None
        return 0.01, _record(request, took_ms=10, failure=failure)

    return respond


class Rig:
    """A RunService wired to in-memory twins, keeping each of them at hand for the assertions."""

    def __init__(
        self,
        respond: Respond,
        *,
        faults: FaultInjector | None = None,
        injector: type[RecordingFaultInjector] = RecordingFaultInjector,
        sink: InMemorySink | None = None,
    ) -> None:
        self.clock = MonotonicClock()
        self.generator = ScriptedGenerator(self.clock, respond)
        self.injector = injector(self.clock)
        self.sink = sink or InMemorySink()
        self.observer = CollectingObserver()
        self.service = RunService(
            clock=self.clock,
            generator=self.generator,
            faults=faults or self.injector,
            sink=self.sink,
            observer=self.observer,
        )

    async def run(self, scenario: Scenario) -> RunResult:
        return await self.service.execute(scenario, run_id="run-1", target_url="http://127.0.0.1:9")

    async def applied(self) -> None:
        """Returns once the injector (a _SignallingInjector) has applied a fault."""
        assert isinstance(self.injector, _SignallingInjector)
        await self.injector.applied.wait()


def _ids(records: list[RequestRecord]) -> list[int]:
    return sorted(r.id for r in records)


def _planned(scenario: Scenario) -> list[PlannedRequest]:
    return list(iter_plan(scenario))


class _SignallingInjector(RecordingFaultInjector):
    """Sets ``applied`` once some fault is on, so a test can act in the middle of a faulted phase."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.applied = asyncio.Event()

    async def apply(self, phase: int, faults: Sequence[FaultSpec]) -> list[FaultEvent]:
        events = await super().apply(phase, faults)
        self.applied.set()
        return events


# -- a complete run ---------------------------------------------------------------------------------


async def test_every_planned_request_reaches_the_sink_and_the_aggregates_exactly_once() -> None:
    """Each planned request is recorded once in the sink and counted once in its own phase."""
    scenario = _scenario(
        _phase("calm", "baseline", 0.4, 30),
        _phase("burst", "stress", 0.4, 60),
        _phase("after", "recovery", 0.4, 30),
    )
    rig = Rig(on_time(0.05))
    result = await rig.run(scenario)
    planned = _planned(scenario)
    assert result.status is RunStatus.SUCCEEDED
    assert _ids(rig.sink.records) == [p.id for p in planned]
    assert [p.offered for p in result.metrics.phases] == [sum(1 for p in planned if p.phase == i) for i in range(3)]
    assert sum(s.offered for s in result.metrics.seconds) == len(planned)
    assert all(p.outcomes == Counter({Outcome.ON_TIME: p.offered}) for p in result.metrics.phases)


async def test_faults_go_on_at_their_phase_start_and_off_at_its_end_in_order() -> None:
    """Each phase's faults are applied when it starts and removed when it ends, one phase after another."""
    scenario = _scenario(
        _phase("calm", "baseline", 0.3),
        _phase("slow", "stress", 0.3, 20, LATENCY),
        _phase("slower", "stress", 0.3, 20, {**LATENCY, "attributes": {"latency": 300}}),
        _phase("after", "recovery", 0.3),
    )
    rig = Rig(on_time())
    result = await rig.run(scenario)
    assert rig.injector.history == [("on", 1), ("off", 1), ("on", 2), ("off", 2)]
    assert rig.injector.active == {}
    windows = phase_windows(scenario)
    slack = 200 * NS_PER_MS
    for event in result.fault_events:
        window = windows[event.phase]
        expected = window.start_ns if event.action == "on" else window.end_ns
        assert abs(event.at_ns - expected) < slack, (event, window)  # run-relative, near the phase boundary
    assert [(e.action, e.phase, e.fault.attributes["latency"]) for e in result.fault_events] == [
        ("on", 1, 100),
        ("off", 1, 100),
        ("on", 2, 300),
        ("off", 2, 300),
    ]


async def test_a_trailing_phase_without_requests_still_keeps_its_time_and_faults() -> None:
    """When the generator is done before the last phase (no arrivals planned in it), the phase still runs
    on the clock: it is timed, and its faults go on and off."""
    steps = {"process": "step", "steps": [{"rate": 20, "duration_s": 0.05}, {"rate": 0, "duration_s": 0.55}]}
    scenario = _scenario(
        _phase("calm", "baseline", 0.3),
        {"name": "quiet", "role": "stress", "duration_s": 0.6, "faults": [LATENCY], "arrival": steps},
    )
    rig = Rig(on_time(0.01))
    started = asyncio.get_running_loop().time()
    result = await rig.run(scenario)
    assert asyncio.get_running_loop().time() - started >= 0.85
    assert rig.injector.history == [("on", 1), ("off", 1)]
    assert [t.index for t in result.phase_timings] == [0, 1]
    assert result.phase_timings[1].ended_ns >= round(0.85 * NS_PER_S)
    assert result.status is RunStatus.SUCCEEDED


async def test_progress_lines_name_each_phase_and_report_the_offered_rate() -> None:
    """Progress names the phase it was taken in and measures rates over the time since the previous line."""
    scenario = _three_phases(0.5)
    rig = Rig(on_time())
    await rig.run(scenario)
    assert [line.phase for line in rig.observer.lines] == ["calm", "burst", "after"]
    assert [line.role for line in rig.observer.lines] == ["baseline", "stress", "recovery"]
    assert rig.observer.notes == [
        "phase calm (baseline): constant 20/s",
        "phase burst (stress): constant 20/s",
        "phase after (recovery): constant 20/s",
    ]
    # 20 requests/s are sent; a half-second tick must not be divided by a whole second
    assert all(14 <= line.offered_per_s <= 26 for line in rig.observer.lines), rig.observer.lines
    assert rig.observer.lines[-1].total_s == pytest.approx(1.5)


async def test_live_token_rates_count_from_the_runs_start_not_from_what_the_client_counted_before() -> None:
    """A sweep's steps share one HTTP client whose token count goes on growing: the first line of a step must
    not divide the earlier steps' tokens by its first second (it showed 6,316 tokens/s at 4 req/s once)."""
    scenario = _three_phases(0.5)
    rig = Rig(on_time())
    rig.generator.tokens = 6_316.0  # what the earlier steps left on the shared counter
    await rig.run(scenario)
    # 20 requests/s of max_tokens each, a request's tokens counted when it finishes
    ceiling = 20 * scenario.target.request.max_tokens.largest * 1.5  # type: ignore[union-attr]
    assert all(line.tokens_per_s <= ceiling for line in rig.observer.lines), rig.observer.lines
    assert rig.observer.lines[-1].tokens_per_s > 0


async def test_a_passing_run_gives_a_json_serialisable_result() -> None:
    """The result document is strict JSON with phases, time series, the versioned score and the generator."""
    scenario = _three_phases()
    rig = Rig(on_time())
    result = await rig.run(scenario)
    document = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert document["status"] == "succeeded"
    assert document["passed"] is True
    assert [p["name"] for p in document["phases"]] == ["calm", "burst", "after"]
    assert all(p["actual_start_s"] is not None for p in document["phases"])
    assert document["timeseries"]
    assert sum(row["offered"] for row in document["timeseries"]) == len(_planned(scenario))
    assert document["score_version"] == SCORE_VERSION
    assert {c["name"] for c in document["score"]["components"]} == {
        "preservation",
        "safe_degradation",
        "recovery",
        "retry_containment",
        "isolation",
    }
    assert document["generator"]["generator_limited"] is False
    assert [(f["phase"], f["action"]) for f in document["faults"]] == [(1, "on"), (1, "off")]
    assert all(0 <= f["at_s"] <= scenario.duration_s + 1 for f in document["faults"])


# -- faults that cannot be applied, and faults left behind ------------------------------------------


async def test_a_scenario_with_faults_fails_before_any_load_without_a_fault_injector() -> None:
    """Without a fault backend a scenario with faults raises before the pre-flight and sends nothing."""
    rig = Rig(on_time(), faults=NoFaultInjector("no Toxiproxy configured"))
    with pytest.raises(FaultInjectionFailed, match="no Toxiproxy configured"):
        await rig.run(_three_phases())
    assert rig.generator.preflights == 0
    assert rig.generator.live().dispatched == 0
    assert rig.sink.records == []


async def test_a_scenario_without_faults_runs_without_a_fault_injector() -> None:
    """NoFaultInjector is only consulted when some phase has faults."""
    rig = Rig(on_time(), faults=NoFaultInjector("no Toxiproxy configured"))
    result = await rig.run(_three_phases(0.3, stress_faults=False))
    assert result.status is RunStatus.SUCCEEDED
    assert rig.generator.preflights == 1


async def test_cancelling_the_run_mid_phase_removes_its_faults_and_propagates() -> None:
    """A cancelled run removes the active faults, re-raises CancelledError and leaves no request running."""
    rig = Rig(on_time(0.3), injector=_SignallingInjector)
    task = asyncio.create_task(rig.run(_three_phases(0.6)))
    await asyncio.wait_for(rig.applied(), timeout=5)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rig.injector.active == {}
    assert rig.injector.history == [("on", 1), ("off", 1)]
    recorded = len(rig.sink.records)
    await asyncio.sleep(0.4)  # longer than any answer: nothing may arrive after the run has ended
    assert len(rig.sink.records) == recorded
    assert rig.generator.live().in_flight == 0
    assert rig.sink.flushes > 0


async def test_a_failing_generator_still_has_its_faults_removed() -> None:
    """When the generator raises during a phase with faults, the error propagates and the faults are gone."""

    def respond(request: PlannedRequest) -> tuple[float, RequestRecord]:
        if request.phase == 1 and request.scheduled_ns > phase_windows(scenario)[1].start_ns + 100 * NS_PER_MS:
            raise RuntimeError("generator broke")
        return 0.2, _record(request, took_ms=200)

    scenario = _three_phases(0.5)
    rig = Rig(respond)
    with pytest.raises(RuntimeError, match="generator broke"):
        await rig.run(scenario)
    assert rig.injector.active == {}
    assert rig.injector.history == [("on", 1), ("off", 1)]
    recorded = len(rig.sink.records)
    await asyncio.sleep(0.3)
    assert len(rig.sink.records) == recorded  # the other requests in flight were stopped with the run


class _StuckInjector(RecordingFaultInjector):
    """Applies faults, but fails to take them off again."""

    async def remove(self, phase: int) -> list[FaultEvent]:
        raise FaultInjectionFailed(proxy="llm", toxic="latency", reason="proxy gone")


class _CountingSink(InMemorySink):
    """Remembers how many records it held at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed_at: list[int] = []

    async def flush(self) -> None:
        await super().flush()
        self.flushed_at.append(len(self.records))


async def test_a_fault_that_cannot_be_removed_is_reported_and_the_records_are_still_flushed() -> None:
    """A failing fault removal propagates, but every record is flushed and the service is free again."""
    sink = _CountingSink()
    rig = Rig(on_time(0.2), injector=_StuckInjector, sink=sink)
    with pytest.raises(FaultInjectionFailed, match="proxy gone"):
        await rig.run(_three_phases(0.4))
    assert sink.records  # requests were in flight when the removal failed
    assert sink.flushed_at[-1] == len(sink.records)
    assert rig.service._state is None


# -- abort guards and interrupts --------------------------------------------------------------------


async def test_the_error_rate_guard_aborts_and_leaves_the_rest_of_the_plan_unsent() -> None:
    """Too many errors in the window abort the run: a reason with the numbers, faults off, the rest not_sent."""
    scenario = _scenario(
        _phase("calm", "baseline", 0.4),
        _phase("burst", "stress", 3.0, 20, LATENCY),
        _phase("after", "recovery", 0.4),
        abort={"error_rate": {"window_s": 5, "max_ratio": 0.5, "min_requests": 5, "outcomes": ["error"]}},
    )
    rig = Rig(errors_in(1))
    result = await rig.run(scenario)
    assert result.status is RunStatus.ABORTED
    assert result.passed is False
    assert result.abort_reason is not None
    numbers = re.fullmatch(
        r"(\d+)% of the (\d+) requests finished in the last 5s were error \(limit 50%\)", result.abort_reason
    )
    assert numbers is not None, result.abort_reason
    assert int(numbers[1]) > 50
    assert int(numbers[2]) >= 5
    assert rig.observer.notes[-1] == f"aborting: {result.abort_reason}"
    # the stress phase's fault came off when the guard fired, well before the phase's planned end
    off = [e for e in result.fault_events if e.action == "off"]
    assert [e.phase for e in off] == [1]
    assert off[0].at_ns < phase_windows(scenario)[1].end_ns - NS_PER_S
    assert rig.injector.active == {}
    burst, after = result.metrics.phases[1], result.metrics.phases[2]
    assert burst.outcomes[Outcome.ERROR] >= 5
    assert burst.outcomes[Outcome.NOT_SENT] > 0
    assert after.offered == after.outcomes[Outcome.NOT_SENT] > 0
    assert _ids(rig.sink.records) == [p.id for p in _planned(scenario)]
    assert {r.not_sent_reason for r in rig.sink.records if r.outcome is Outcome.NOT_SENT} == {
        f"aborted: {result.abort_reason}"
    }
    assert result.to_dict()["verdicts"][-1] == {"name": "aborted", "summary": result.abort_reason}


async def test_an_abort_rolls_the_faults_back_before_it_is_recorded() -> None:
    """When a guard fires during a faulted phase, the fault is already off when the abort is announced."""
    scenario = _scenario(
        _phase("calm", "baseline", 0.4),
        _phase("burst", "stress", 3.0, 20, LATENCY),
        abort={"error_rate": {"window_s": 5, "max_ratio": 0.5, "min_requests": 5, "outcomes": ["error"]}},
    )
    rig = Rig(errors_in(1))
    active_when_announced: list[dict[int, Any]] = []
    original_note = rig.observer.note

    def note(message: str) -> None:
        if message.startswith("aborting:"):
            active_when_announced.append(dict(rig.injector.active))
        original_note(message)

    rig.observer.note = note  # type: ignore[method-assign]
    result = await rig.run(scenario)
    assert result.status is RunStatus.ABORTED
    assert active_when_announced == [{}]


class _FailingInjector(RecordingFaultInjector):
    """Applies the first fault of a phase, then cannot apply the second (as a Toxiproxy 400 would)."""

    async def apply(self, phase: int, faults: Sequence[FaultSpec]) -> list[FaultEvent]:
        events = await super().apply(phase, faults[:1])
        failed = FaultEvent(phase=phase, fault=faults[1], action="on", at_ns=self.clock.now_ns(), ok=False,
                            detail="HTTP 400: bad attribute")  # fmt: skip
        return [*events, failed]


async def test_a_fault_that_cannot_be_applied_aborts_the_run_and_rolls_back_the_others() -> None:
    """A phase whose faults cannot all be applied stops the run: the applied ones are removed, the reason
    names the failure, and the rest of the plan is not sent."""
    second = {"proxy": "llm", "type": "bandwidth", "attributes": {"rate": 10}}
    scenario = _scenario(_phase("calm", "baseline", 0.3), _phase("burst", "stress", 2.0, 20, LATENCY, second))
    rig = Rig(on_time(0.01), injector=_FailingInjector)
    result = await rig.run(scenario)
    assert result.status is RunStatus.ABORTED
    assert result.abort_reason == "a fault could not be applied: HTTP 400: bad attribute"
    assert rig.injector.active == {}
    assert rig.injector.history == [("on", 1), ("off", 1)]
    assert result.metrics.phases[1].outcomes[Outcome.NOT_SENT] > 0


async def test_the_error_rate_guard_ignores_failures_outside_its_outcomes() -> None:
    """Errors do not trip a guard that watches only timeouts."""
    scenario = _scenario(
        _phase("calm", "baseline", 0.3),
        _phase("burst", "stress", 0.5),
        abort={"error_rate": {"window_s": 5, "max_ratio": 0.5, "min_requests": 5, "outcomes": ["timeout"]}},
    )
    result = await Rig(errors_in(1)).run(scenario)
    assert result.status is RunStatus.SUCCEEDED
    assert result.abort_reason is None


async def test_an_unhealthy_baseline_aborts_before_the_stress_phase() -> None:
    """A baseline with too few on-time requests stops the run before any stress fault or load."""
    scenario = _scenario(
        _phase("calm", "baseline", 0.4),
        _phase("burst", "stress", 0.4, 20, LATENCY),
        abort={"baseline_unhealthy": {"min_on_time_ratio": 0.8}},
    )
    rig = Rig(late_in(0))
    result = await rig.run(scenario)
    assert result.status is RunStatus.ABORTED
    assert result.abort_reason is not None
    assert result.abort_reason.startswith("baseline 'calm' already unhealthy: 0% of ")
    assert "(needs 80%); no stress was applied" in result.abort_reason
    assert rig.injector.history == []
    burst = result.metrics.phases[1]
    assert burst.offered == burst.outcomes[Outcome.NOT_SENT] > 0
    assert [t.index for t in result.phase_timings] == [0]


async def test_a_healthy_baseline_lets_the_stress_phase_run() -> None:
    """A baseline within its on-time floor does not abort, and the stress phase gets its faults."""
    scenario = _scenario(
        _phase("calm", "baseline", 0.4),
        _phase("burst", "stress", 0.4, 20, LATENCY),
        abort={"baseline_unhealthy": {"min_on_time_ratio": 0.8}},
    )
    rig = Rig(late_in(1))
    result = await rig.run(scenario)
    assert result.status is RunStatus.SUCCEEDED
    assert rig.injector.history == [("on", 1), ("off", 1)]
    assert result.metrics.phases[1].outcomes[Outcome.LATE] == result.metrics.phases[1].offered


async def test_interrupt_stops_the_run_and_records_it_as_interrupted() -> None:
    """interrupt() cuts the run short: status interrupted, faults off, every request still recorded once."""
    scenario = _three_phases(0.6)
    rig = Rig(on_time(0.2), injector=_SignallingInjector)
    task = asyncio.create_task(rig.run(scenario))
    await asyncio.wait_for(rig.applied(), timeout=5)
    rig.service.interrupt()
    result = await asyncio.wait_for(task, timeout=5)
    assert result.status is RunStatus.INTERRUPTED
    assert result.passed is False
    assert rig.injector.active == {}
    assert result.duration_s < scenario.duration_s - 0.5
    assert _ids(rig.sink.records) == [p.id for p in _planned(scenario)]
    assert result.metrics.phases[2].offered == result.metrics.phases[2].outcomes[Outcome.NOT_SENT]
    assert "interrupted" in [v.name for v in result.verdicts()]


async def test_interrupt_outside_a_run_does_nothing() -> None:
    """interrupt() between runs neither fails nor affects the next run."""
    rig = Rig(on_time())
    rig.service.interrupt()
    result = await rig.run(_three_phases(0.3))
    assert result.status is RunStatus.SUCCEEDED
    assert rig.generator.stopped is None


class _HangingPreflight(ScriptedGenerator):
    """A generator whose pre-flight check waits until cancelled (a target that accepts but never answers)."""

    def __init__(self, clock: Clock, respond: Respond) -> None:
        super().__init__(clock, respond)
        self.checking = asyncio.Event()
        self.check_cancelled = False

    async def preflight(self) -> PromptSizing:
        self.checking.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.check_cancelled = True
            raise
        return WORDS_SIZING


@pytest.mark.parametrize("stop", ["interrupt", "abort"])
async def test_a_stop_during_the_preflight_check_ends_the_run_at_once_with_nothing_sent(stop: str) -> None:
    """Before the fix the run went on to its full length once the check ended: now the check is cut short too."""
    rig = Rig(on_time())
    generator = _HangingPreflight(rig.clock, on_time())
    rig.service.generator = generator
    scenario = _three_phases(2.0)
    task = asyncio.create_task(rig.run(scenario))
    await asyncio.wait_for(generator.checking.wait(), timeout=5)
    if stop == "interrupt":
        rig.service.interrupt()
    else:
        rig.service.abort("emergency stop")
    result = await asyncio.wait_for(task, timeout=2)
    assert generator.check_cancelled
    assert result.status is (RunStatus.INTERRUPTED if stop == "interrupt" else RunStatus.ABORTED)
    assert result.duration_s < 0.5
    assert generator.live().dispatched == 0
    assert all(r.outcome is Outcome.NOT_SENT for r in rig.sink.records)
    assert _ids(rig.sink.records) == [p.id for p in _planned(scenario)]


async def test_a_failed_preflight_check_still_raises_and_leaves_the_service_free() -> None:
    class Unreachable(ScriptedGenerator):
        async def preflight(self) -> PromptSizing:
            raise TargetUnreachable("http://127.0.0.1:9", "connection refused")

    rig = Rig(on_time())
    rig.service.generator = Unreachable(rig.clock, on_time())
    with pytest.raises(TargetUnreachable, match="connection refused"):
        await rig.run(_three_phases(0.3))
    rig.service.generator = rig.generator
    assert (await rig.run(_three_phases(0.3))).status is RunStatus.SUCCEEDED


async def test_an_abort_from_outside_stops_the_run_and_records_it_as_aborted_with_the_reason() -> None:
    """An API abort mid-phase: faults off, nothing more sent, status aborted with the given reason."""
    scenario = _scenario(_phase("calm", "baseline", 0.3), _phase("burst", "stress", 5.0, 20, LATENCY))
    rig = Rig(on_time(0.01), injector=_SignallingInjector)
    task = asyncio.create_task(rig.run(scenario))
    await rig.applied()
    rig.service.abort("aborted by ops via the API")
    result = await asyncio.wait_for(task, 5)
    assert result.status is RunStatus.ABORTED
    assert result.abort_reason == "aborted by ops via the API"
    assert rig.injector.active == {}
    assert result.duration_s < 3
    assert result.metrics.phases[1].outcomes[Outcome.NOT_SENT] > 0
