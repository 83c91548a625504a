"""Conversations on the wire: each next turn leaves after the previous answer plus the think time, carries
the conversation so far with the server's real replies, and a failed turn, the run's end or a stop ends it."""

from __future__ import annotations

import asyncio
import itertools
import json

from aiohttp import web
from loadgen_testkit import Serve

from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import NS_PER_S, Outcome, RequestRecord
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan, phase_windows


class Records:
    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.dispatched_at: dict[int, int] = {}

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        self.dispatched_at[request.id] = at_ns

    def finished(self, record: RequestRecord) -> None:
        self.records.append(record)


def chats(url: str, *, turns: int, think_ms: int, duration_s: float, rate: float = 2.0) -> Scenario:
    return parse_scenario({
        "name": "chats-on-the-wire",
        "seed": 4,
        "target": {"url": url, "api": "openai-chat",
                   "request": {"model": "m", "prompt_tokens": 5, "max_tokens": 4, "stream": False}},
        "slo": {"e2e_ms": 2000, "timeout_ms": 3000},
        "sessions": {"turns": turns, "think_time_ms": think_ms},
        "phases": [{"name": "talk", "role": "baseline", "duration_s": duration_s,
                    "arrival": {"process": "constant", "rate": rate}}],
    })  # fmt: skip


def answer(text: str) -> web.Response:
    body = {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}  # fmt: skip
    return web.json_response(body)


async def ok(request: web.Request) -> web.StreamResponse:
    return answer("ok")


async def run(scenario: Scenario, url: str, *, stop_after_s: float | None = None) -> Records:
    listener = Records()
    clock = MonotonicClock()
    async with HttpExecutor(scenario, url) as executor:
        generator = OpenLoopGenerator(scenario, executor, clock)
        task = asyncio.create_task(generator.run(list(iter_plan(scenario)), start_ns=clock.now_ns() + NS_PER_S // 20,
                                                 listener=listener))  # fmt: skip
        if stop_after_s is not None:
            await asyncio.sleep(stop_after_s)
            generator.stop("stopped by the test")
        async with asyncio.timeout(20):
            await task
        assert not executor._histories  # every conversation's history was let go
    return listener


async def test_each_turn_follows_the_answer_after_the_think_time_with_the_history_and_the_real_replies(
    serve: Serve,
) -> None:
    async def respond(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        last = body["messages"][-1]["content"].split()[0]  # the user turn's own tag: req-<id>
        return answer(f"reply to {last}")

    served = await serve(respond)
    listener = await run(chats(served.url, turns=3, think_ms=200, duration_s=1.0), served.url)

    records = sorted(listener.records, key=lambda r: (r.conversation, r.turn))
    assert {r.conversation for r in records} == {0, 1}  # two arrivals in 1 s at 2/s
    assert [(r.conversation, r.turn) for r in records] == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    assert all(r.outcome is Outcome.ON_TIME for r in records)
    bodies = [json.loads(seen.body) for seen in served.requests]
    third = next(b for b in bodies if len(b["messages"]) == 5)
    roles = [m["role"] for m in third["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    asked = [m["content"].split()[0] for m in third["messages"] if m["role"] == "user"]
    replies = [m["content"] for m in third["messages"] if m["role"] == "assistant"]
    assert replies == [f"reply to {asked[0]}", f"reply to {asked[1]}"]  # what the server really said
    for earlier, later in itertools.pairwise(records):
        if later.conversation == earlier.conversation:
            gap_s = (later.scheduled_ns - earlier.final.end_ns) / NS_PER_S  # type: ignore[union-attr]
            assert abs(gap_s - 0.2) < 1e-6  # scheduled exactly a think time after the answer
            sent_s = (later.attempts[0].sent_ns - later.scheduled_ns) / NS_PER_S
            assert 0 <= sent_s < 0.1


async def test_a_failed_turn_ends_its_conversation(serve: Serve) -> None:
    async def respond(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if len(body["messages"]) == 3:  # every second turn fails
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        return answer("fine")

    served = await serve(respond)
    listener = await run(chats(served.url, turns=4, think_ms=50, duration_s=1.0), served.url)
    turns = sorted((r.conversation, r.turn, r.outcome) for r in listener.records)
    assert turns == [(0, 1, Outcome.ON_TIME), (0, 2, Outcome.SHED), (1, 1, Outcome.ON_TIME), (1, 2, Outcome.SHED)]
    aggregator = RunAggregator(phase_windows(chats(served.url, turns=4, think_ms=50, duration_s=1.0)), e2e_ms=2000,
                               fast_fail_ms=200)  # fmt: skip
    for record in listener.records:
        aggregator.add(record)
    (stats,) = aggregator.result().conversations
    assert (stats.started, stats.failed, stats.completed, stats.cut) == (2, 2, 0, 0)


async def test_a_turn_that_would_fall_after_the_run_is_not_sent_and_the_conversation_is_cut(serve: Serve) -> None:
    served = await serve(ok)
    listener = await run(chats(served.url, turns=5, think_ms=2000, duration_s=1.0), served.url)
    assert sorted((r.conversation, r.turn) for r in listener.records) == [(0, 1), (1, 1)]
    assert len(served.requests) == 2


async def test_a_stopped_run_sends_no_further_turn(serve: Serve) -> None:
    served = await serve(ok)
    listener = await run(chats(served.url, turns=5, think_ms=400, duration_s=3.0, rate=1.0), served.url,
                         stop_after_s=0.3)  # fmt: skip
    assert len(served.requests) == 1  # the first turn went; the stop came during its think time
    assert [(r.conversation, r.turn) for r in listener.records if r.attempts] == [(0, 1)]
    assert all(r.outcome is Outcome.NOT_SENT for r in listener.records if not r.attempts)
