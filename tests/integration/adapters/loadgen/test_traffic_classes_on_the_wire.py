"""Traffic classes on the wire: each class's requests carry its own headers, model, lengths and priority,
retry under its own policy, and are recorded under their class."""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiohttp import web
from loadgen_testkit import CHAT_NONSTREAM, Serve

from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import NS_PER_S, RequestRecord
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan


class Records:
    def __init__(self) -> None:
        self.records: list[RequestRecord] = []

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        return None

    def finished(self, record: RequestRecord) -> None:
        self.records.append(record)


def tenants(url: str) -> Any:
    return parse_scenario({
        "name": "tenants-on-the-wire",
        "seed": 8,
        "target": {"url": url, "api": "openai-chat",
                   "request": {"model": "base", "prompt_tokens": 8, "max_tokens": 4, "stream": False,
                               "headers": {"Authorization": "Bearer shared", "X-Team": "core"}}},
        "slo": {"e2e_ms": 2000, "timeout_ms": 3000},
        "client": {"retry": {"policy": "none"}},
        "classes": {
            "chat": {"priority": 0},
            "batch": {
                "request": {"model": "batch-lora", "prompt_tokens": 40, "max_tokens": 16,
                            "headers": {"Authorization": "Bearer tenant-b"}, "extra_body": {"user": "tenant-b"}},
                "retry": {"policy": "immediate", "max_retries": 2},
                "priority": 5,
            },
        },
        "phases": [{"name": "both", "role": "baseline", "duration_s": 1,
                    "arrival": {"chat": {"process": "constant", "rate": 6},
                                "batch": {"process": "constant", "rate": 4}}}],
    })  # fmt: skip


async def test_each_class_sends_its_own_headers_body_and_retries(serve: Serve) -> None:
    refused: Counter[str] = Counter()

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        # Each class's first attempt is refused once: only the class that retries gets a second try.
        key = f"{body['model']}:{body['messages'][0]['content'][:40]}"
        if refused[key] == 0:
            refused[key] += 1
            return web.json_response({"error": {"message": "busy"}}, status=503)
        return web.Response(body=CHAT_NONSTREAM, content_type="application/json")

    served = await serve(answer)
    scenario = tenants(served.url)
    planned = list(iter_plan(scenario))
    listener = Records()
    clock = MonotonicClock()
    async with HttpExecutor(scenario, served.url) as executor:
        generator = OpenLoopGenerator(scenario, executor, clock)
        await generator.run(planned, start_ns=clock.now_ns() + NS_PER_S // 20, listener=listener)

    by_model: dict[str, list[Any]] = {}
    for seen in served.requests:
        by_model.setdefault(seen.json()["model"], []).append(seen)
    chat, batch = by_model["base"], by_model["batch-lora"]
    assert {s.headers["Authorization"] for s in chat} == {"Bearer shared"}
    assert {s.headers["Authorization"] for s in batch} == {"Bearer tenant-b"}
    assert {s.headers["X-Team"] for s in batch} == {"core"}  # inherited from target.request
    assert {s.json()["priority"] for s in chat} == {0}
    assert {(s.json()["priority"], s.json()["user"], s.json()["max_tokens"]) for s in batch} == {(5, "tenant-b", 16)}
    assert "user" not in chat[0].json()
    # chat sent 6 requests and never retried; batch's 4 each retried once after the 503
    assert len(chat) == 6
    assert len(batch) == 8
    records = {r.id: r for r in listener.records}
    klass = Counter(r.klass for r in records.values())
    assert klass == {0: 6, 1: 4}
    assert all(len(r.attempts) == (2 if r.klass == 1 else 1) for r in records.values())
