"""The load client reads the server-state headers of each answer: TGI's timings on a whole answer, the rate
limits and back-off of a refusal; and a run's phases summarise them."""

from __future__ import annotations

import time

import pytest
from aiohttp import web
from loadgen_testkit import CHAT_NONSTREAM, Serve, planned, scenario_for

from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.domain.outcomes import Attempt
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.result import state_headers_summary as state_summary
from cliffwatch.domain.traffic.plan import phase_windows

pytestmark = pytest.mark.usefixtures("over_each_transport")  # aiohttp and the lean client alike

TGI_HEADERS = {  # what TGI's generate_internal sets on a whole answer (router/src/server.rs)
    "x-compute-type": "1-nvidia-a10g", "x-compute-time": "0.111191439", "x-compute-characters": "23",
    "x-total-time": "111", "x-validation-time": "0", "x-queue-time": "7", "x-inference-time": "104",
    "x-time-per-token": "34", "x-prompt-tokens": "7", "x-generated-tokens": "3",
}  # fmt: skip


async def attempts(serve: Serve, handler: web.RequestHandler, *, stream: bool) -> list[Attempt]:  # type: ignore[type-arg]
    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": stream})
    async with HttpExecutor(scenario, served.url) as executor:
        origin = time.perf_counter_ns()
        return [await executor.attempt(planned(i), 1, 5.0, origin_ns=origin, deadline_bound=False) for i in range(3)]


async def test_a_whole_answers_tgi_timings_are_read_from_its_headers(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=CHAT_NONSTREAM, content_type="application/json", headers=TGI_HEADERS)

    found = await attempts(serve, handler, stream=False)
    state = dict(found[0].state)
    assert state["x-queue-time"] == 7.0
    assert state["x-compute-time"] == 111.191439  # seconds on the wire, kept in ms
    assert "x-compute-type" not in state  # a label, not a number
    assert all(a.succeeded for a in found)


async def test_a_refusals_rate_limits_and_back_off_are_read_with_its_date(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": {"message": "slow down"}}, status=429,
            headers={"Retry-After": "2", "X-RateLimit-Remaining-Requests": "0", "X-RateLimit-Reset-Requests": "1.5s",
                     "Date": "Tue, 01 Dec 2026 12:00:00 GMT",
                     "Anthropic-RateLimit-Tokens-Reset": "2026-12-01T12:00:10Z"},
        )  # fmt: skip

    found = await attempts(serve, handler, stream=True)
    assert dict(found[0].state) == {
        "retry-after": 2.0,
        "x-ratelimit-remaining-requests": 0.0,
        "x-ratelimit-reset-requests": 1.5,
        "anthropic-ratelimit-tokens-reset": 10.0,
    }
    assert found[0].retry_after_s == 2.0


async def test_an_answer_without_state_headers_carries_none_and_a_phase_summarises_those_that_did(
    serve: Serve,
) -> None:
    served: list[int] = []

    async def handler(request: web.Request) -> web.Response:
        served.append(1)
        headers = {"x-queue-time": str(10 * len(served))} if len(served) > 1 else {}
        return web.Response(body=CHAT_NONSTREAM, content_type="application/json", headers=headers)

    found = await attempts(serve, handler, stream=False)
    assert found[0].state == ()
    scenario = scenario_for("http://127.0.0.1:9")
    aggregator = RunAggregator(phase_windows(scenario), e2e_ms=1000, fast_fail_ms=100)
    for index, attempt in enumerate(found):
        request = planned(index)
        aggregator.add(request.record((attempt,), slo=scenario.slo))
    summary = state_summary(aggregator.result().phases[0])["state_headers"]
    assert summary["x-queue-time"]["responses"] == 2
    assert (summary["x-queue-time"]["min"], summary["x-queue-time"]["max"]) == (20.0, 30.0)
    assert summary["x-queue-time"]["unit"] == "ms"
