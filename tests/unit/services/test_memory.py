"""The in-memory port twins keep the ports' contracts: every request finishes once, faults come off, errors fail."""

from __future__ import annotations

import asyncio

import pytest

from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.outcomes import NS_PER_MS, Attempt, Outcome, RequestRecord
from cliffwatch.domain.scenario.faults import FaultSpec, Stream, ToxicType
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.services.memory import NoFaultInjector, RecordingFaultInjector, ScriptedGenerator

LATENCY = FaultSpec(proxy="llm", type=ToxicType.LATENCY, stream=Stream.DOWNSTREAM, toxicity=1.0, attributes={})
RESET = FaultSpec(proxy="llm", type=ToxicType.RESET_PEER, stream=Stream.UPSTREAM, toxicity=0.5, attributes={})


class Recorder:
    """A GeneratorListener that keeps every call."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.records: list[RequestRecord] = []
        self.first_sent = asyncio.Event()

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        self.sent.append(request.id)
        self.first_sent.set()

    def finished(self, record: RequestRecord) -> None:
        self.records.append(record)

    def ids(self) -> list[int]:
        return sorted(r.id for r in self.records)


def _plan(count: int, gap_ms: int) -> list[PlannedRequest]:
    return [
        PlannedRequest(id=i, phase=0, scheduled_ns=i * gap_ms * NS_PER_MS, prompt_tokens=1, max_tokens=1)
        for i in range(count)
    ]


def _answer(latency_s: float) -> ScriptedGenerator:
    clock = MonotonicClock()

    def respond(request: PlannedRequest) -> tuple[float, RequestRecord]:
        attempt = Attempt(number=1, sent_ns=request.scheduled_ns, end_ns=request.scheduled_ns + 1)
        record = RequestRecord(
            id=request.id,
            phase=request.phase,
            scheduled_ns=request.scheduled_ns,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            attempts=(attempt,),
            outcome=Outcome.ON_TIME,
        )
        return latency_s, record

    return ScriptedGenerator(clock, respond)


async def _start(generator: ScriptedGenerator, plan: list[PlannedRequest], listener: Recorder) -> asyncio.Task[object]:
    start_ns = generator.clock.now_ns()
    return asyncio.create_task(generator.run(plan, start_ns=start_ns, listener=listener))


async def test_every_request_is_answered_once_with_its_record() -> None:
    """A full run dispatches every request and finishes each with the record respond gave."""
    generator, listener = _answer(0.02), Recorder()
    report = await generator.run(_plan(10, 5), start_ns=generator.clock.now_ns(), listener=listener)
    assert listener.sent == list(range(10))
    assert listener.ids() == list(range(10))
    assert {r.outcome for r in listener.records} == {Outcome.ON_TIME}
    assert report.limited is False
    assert generator.live().dispatched == 10
    assert generator.live().in_flight == 0


async def test_stop_leaves_the_rest_of_the_plan_not_sent_and_lets_answers_finish() -> None:
    """After stop(), later requests finish as not_sent with the reason; those in flight still answer."""
    generator, listener = _answer(0.1), Recorder()
    task = await _start(generator, _plan(20, 20), listener)
    await asyncio.sleep(0.09)
    generator.stop("enough")
    await asyncio.wait_for(task, timeout=5)
    sent = set(listener.sent)
    assert 0 < len(sent) < 20
    assert listener.ids() == list(range(20))
    assert all((r.outcome is Outcome.ON_TIME) == (r.id in sent) for r in listener.records)
    assert {r.not_sent_reason for r in listener.records if r.id not in sent} == {"enough"}


async def test_stop_cancelling_in_flight_finishes_every_dispatched_request_once() -> None:
    """Cancelling in flight right after a dispatch (before its answer even started) still reports it, once."""
    generator, listener = _answer(1.0), Recorder()
    task = await _start(generator, _plan(3, 0), listener)
    await asyncio.wait_for(listener.first_sent.wait(), timeout=5)
    generator.stop("interrupted", cancel_in_flight=True)
    await asyncio.wait_for(task, timeout=5)
    assert listener.ids() == [0, 1, 2]
    assert {r.outcome for r in listener.records} == {Outcome.NOT_SENT}
    assert {r.not_sent_reason for r in listener.records} == {"interrupted"}
    assert generator.live().in_flight == 0


async def test_cancelling_the_run_stops_its_answers_too() -> None:
    """A cancelled run re-raises CancelledError and no answer arrives after it has ended."""
    generator, listener = _answer(0.3), Recorder()
    task = await _start(generator, _plan(50, 10), listener)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    finished = len(listener.records)
    assert finished == len(listener.sent)  # every dispatched request was reported, none twice
    await asyncio.sleep(0.4)
    assert len(listener.records) == finished


async def test_a_respond_that_raises_fails_the_run() -> None:
    """An exception from respond propagates out of run, and the requests already in flight are stopped."""
    clock = MonotonicClock()
    healthy = _answer(0.3)

    def respond(request: PlannedRequest) -> tuple[float, RequestRecord]:
        if request.id == 3:
            raise RuntimeError("script error")
        return healthy.respond(request)

    generator, listener = ScriptedGenerator(clock, respond), Recorder()
    with pytest.raises(RuntimeError, match="script error"):
        await generator.run(_plan(6, 10), start_ns=clock.now_ns(), listener=listener)
    assert listener.sent == [0, 1, 2]
    assert listener.ids() == [0, 1, 2]
    await asyncio.sleep(0.35)
    assert len(listener.records) == 3


async def test_the_recording_injector_tracks_what_is_on() -> None:
    """apply turns a phase's faults on, remove takes them off, and history lists both in order."""
    injector = RecordingFaultInjector(MonotonicClock())
    on = await injector.apply(1, [LATENCY, RESET])
    assert [(e.phase, e.action, e.fault) for e in on] == [(1, "on", LATENCY), (1, "on", RESET)]
    assert injector.active == {1: (LATENCY, RESET)}
    off = await injector.remove(1)
    assert [(e.action, e.fault) for e in off] == [("off", LATENCY), ("off", RESET)]
    assert injector.active == {}
    assert injector.history == [("on", 1), ("off", 1)]


async def test_removing_faults_that_are_not_on_is_a_no_op() -> None:
    """remove and remove_all with nothing active return no events and record nothing."""
    injector = RecordingFaultInjector(MonotonicClock())
    assert await injector.remove(4) == []
    assert await injector.remove_all() == []
    assert injector.history == []


async def test_remove_all_takes_off_every_active_phase() -> None:
    """remove_all removes the faults of every phase still on, each once."""
    injector = RecordingFaultInjector(MonotonicClock())
    await injector.apply(1, [LATENCY])
    await injector.apply(2, [RESET])
    events = await injector.remove_all()
    assert sorted((e.phase, e.action) for e in events) == [(1, "off"), (2, "off")]
    assert injector.active == {}
    assert await injector.remove_all() == []


async def test_no_fault_injector_refuses_faults_with_its_reason() -> None:
    """Without a fault backend check and apply raise FaultInjectionFailed; removing is harmless."""
    injector = NoFaultInjector("Toxiproxy is not configured")
    with pytest.raises(FaultInjectionFailed, match="Toxiproxy is not configured"):
        await injector.check()
    with pytest.raises(FaultInjectionFailed, match="Toxiproxy is not configured"):
        await injector.apply(0, [LATENCY])
    assert await injector.remove(0) == []
    assert await injector.remove_all() == []
