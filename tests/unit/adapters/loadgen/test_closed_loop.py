"""The closed-loop generator: N clients, each sending its next request when the previous one ended."""

from __future__ import annotations

import asyncio

import pytest

from cliffwatch.adapters.loadgen.closed_loop import ClosedLoopGenerator
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import NS_PER_S, Attempt, Outcome, RequestRecord
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing

SERVICE_S = 0.05
SCENARIO_DOCUMENT = {
    "name": "closed",
    "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
    "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
    "phases": [
        {"name": "warm", "role": "baseline", "duration_s": 0.3, "arrival": {"process": "poisson", "rate": 1}},
        {"name": "measured", "role": "stress", "duration_s": 0.5, "arrival": {"process": "poisson", "rate": 1}},
    ],
}
SCENARIO = parse_scenario(SCENARIO_DOCUMENT)


class SlowExecutor:
    """Answers every attempt successfully after ``SERVICE_S``; counts the most attempts at once."""

    def __init__(self, clock: MonotonicClock) -> None:
        self.clock = clock
        self.in_flight = 0
        self.capped_hops = 0
        self.tokens = 0.0
        self.most = 0

    async def preflight(self) -> PromptSizing:
        return WORDS_SIZING

    def end_conversation(self, conversation: int) -> None:
        return None

    def next_prompts(self) -> None:
        self.prompt_rounds = getattr(self, "prompt_rounds", 0) + 1

    async def attempt(
        self, request: PlannedRequest, number: int, timeout_s: float, *, origin_ns: int, deadline_bound: bool
    ) -> Attempt:
        sent = self.clock.now_ns() - origin_ns
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(SERVICE_S)
        finally:
            self.in_flight -= 1
        return Attempt(number=number, sent_ns=sent, end_ns=self.clock.now_ns() - origin_ns, output_tokens=8)


class Listener:
    def __init__(self) -> None:
        self.records: list[RequestRecord] = []

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        pass

    def finished(self, record: RequestRecord) -> None:
        self.records.append(record)


async def test_n_clients_keep_n_requests_outstanding_for_the_scenarios_duration() -> None:
    clock = MonotonicClock()
    executor = SlowExecutor(clock)
    generator = ClosedLoopGenerator(SCENARIO, executor, clock, clients=3)
    listener = Listener()
    report = await generator.run(iter_plan(SCENARIO), start_ns=clock.now_ns(), listener=listener)
    assert executor.most == 3
    # 0.8 s of three clients at 50 ms per request: about 48 requests (fewer on a busy machine, never more)
    assert 20 <= len(listener.records) <= 3 * 0.8 / SERVICE_S + 3
    assert all(r.outcome is Outcome.ON_TIME for r in listener.records)
    assert len({r.id for r in listener.records}) == len(listener.records)
    phases = {r.phase for r in listener.records}
    assert phases == {0, 1}
    assert all(r.scheduled_ns < 0.8 * NS_PER_S for r in listener.records)
    assert not report.overflow


async def test_a_stop_ends_every_client_after_its_current_request() -> None:
    clock = MonotonicClock()
    executor = SlowExecutor(clock)
    generator = ClosedLoopGenerator(SCENARIO, executor, clock, clients=2)
    listener = Listener()
    task = asyncio.create_task(generator.run(iter_plan(SCENARIO), start_ns=clock.now_ns(), listener=listener))
    await asyncio.sleep(0.2)
    generator.stop("enough")
    await asyncio.wait_for(task, 2)
    assert len(listener.records) <= 2 * 0.25 / SERVICE_S + 2
    assert executor.in_flight == 0


def test_a_closed_loop_needs_a_client() -> None:
    with pytest.raises(ValueError, match="at least one client"):
        ClosedLoopGenerator(SCENARIO, SlowExecutor(MonotonicClock()), MonotonicClock(), clients=0)


async def test_with_sessions_each_client_holds_one_conversation_after_another() -> None:
    """A client is a user: it talks through its conversation (3 turns, 40 ms apart) before the next begins,
    so at most one of its requests is ever out and every conversation's turns come in order."""
    chats = parse_scenario({**SCENARIO_DOCUMENT, "sessions": {"turns": 3, "think_time_ms": 40}})
    clock = MonotonicClock()
    executor = SlowExecutor(clock)
    listener = Listener()
    await ClosedLoopGenerator(chats, executor, clock, clients=2).run(iter_plan(chats), start_ns=clock.now_ns(),
                                                                    listener=listener)  # fmt: skip
    assert executor.most <= 2
    conversations: dict[int, list[int]] = {}
    for record in listener.records:
        conversations.setdefault(record.conversation, []).append(record.turn)
    assert len(conversations) >= 2
    assert all(turns == list(range(1, len(turns) + 1)) for turns in conversations.values())
    assert sum(1 for turns in conversations.values() if len(turns) == 3) >= 2  # whole conversations happened
