"""Hollow answers from real loopback servers: a 200 that carries no whole answer is ``incomplete``, never on time.

The servers here are independent of the built-in target. The main one answers every stream the way
llama-cpp-python's server does when a second request arrives while it is busy (its default
``interrupt_requests``: ``get_event_publisher`` in llama_cpp/server/app.py sends ``[DONE]`` and stops): the
role chunk, then ``data: [DONE]``, no token and no finish_reason (tests/fixtures/sse, the interrupted
capture). The others send what vLLM sends for an aborted request (``finish_reason: "abort"``), an error
event mid-stream, or a non-streamed body without choices.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from loadgen_testkit import Serve, chat_chunk, events_of, planned, scenario_for, send_events, sse

from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.outcomes import OUTCOMES, Attempt, Outcome, Slo, classify
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.services.memory import CollectingObserver

pytestmark = pytest.mark.usefixtures("over_each_transport")  # aiohttp and the lean client alike

FIXTURES = Path(__file__).parents[3] / "fixtures" / "sse"
INTERRUPTED = (FIXTURES / "llama-cpp-python-chat-stream-interrupted.txt").read_bytes()
DONE = b"data: [DONE]\n\n"
SLO = Slo(e2e_ms=1000, timeout_ms=3000)


async def interrupted(request: web.Request) -> web.StreamResponse:
    await request.read()
    return await send_events(request, events_of(INTERRUPTED))


async def attempt_on(scenario: Scenario, url: str, *, max_tokens: int = 8) -> Attempt:
    async with HttpExecutor(scenario, url) as executor:
        return await executor.attempt(
            planned(max_tokens=max_tokens), 1, 5.0, origin_ns=time.perf_counter_ns(), deadline_bound=False
        )


def streamed(*events: bytes) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        return await send_events(request, events)

    return handler


async def test_the_interrupted_stream_is_incomplete_and_never_on_time(serve: Serve) -> None:
    served = await serve(interrupted)
    attempt = await attempt_on(scenario_for(served.url), served.url)
    assert attempt.status == 200
    assert attempt.failure is FailureKind.INCOMPLETE
    assert attempt.error == "incomplete: [DONE] without a finish_reason"
    assert classify((attempt,), scheduled_ns=0, slo=SLO) is Outcome.INCOMPLETE


@pytest.mark.parametrize(
    ("events", "error"),
    [
        pytest.param(
            (chat_chunk(role=True), chat_chunk("a"), chat_chunk(finish="abort"), DONE),
            "incomplete: finish_reason 'abort'",
            id="vllm-abort",
        ),
        pytest.param(
            (chat_chunk(role=True), chat_chunk(finish="stop"), DONE),
            "incomplete: 0 output tokens, expected at least 1",
            id="no-tokens",
        ),
        pytest.param(
            (chat_chunk("a"), sse({"error": {"message": "preempted"}}), DONE),
            "server error in stream: preempted",
            id="error-event",
        ),
    ],
)
async def test_other_hollow_streams_are_incomplete_with_their_reason(
    serve: Serve, events: tuple[bytes, ...], error: str
) -> None:
    served = await serve(streamed(*events))
    attempt = await attempt_on(scenario_for(served.url), served.url)
    assert (attempt.failure, attempt.error) == (FailureKind.INCOMPLETE, error)


async def test_exact_output_holds_an_answer_to_every_one_of_max_tokens(serve: Serve) -> None:
    """With ignore_eos the server was told to generate all of max_tokens: 2 of 8 is a cut answer."""
    usage = sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
    served = await serve(streamed(chat_chunk("a"), chat_chunk("b"), chat_chunk(finish="stop"), usage, DONE))
    scenario = scenario_for(served.url, request={"include_usage": True, "extra_body": {"ignore_eos": True}})
    attempt = await attempt_on(scenario, served.url, max_tokens=8)
    assert attempt.failure is FailureKind.INCOMPLETE
    assert attempt.error == "incomplete: 2 of 8 output tokens (exact_output)"
    whole = await attempt_on(scenario, served.url, max_tokens=2)
    assert whole.succeeded, whole.error


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param({"choices": []}, "incomplete: no choices", id="no-choices"),
        pytest.param(
            {"choices": [{"message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]},
            "incomplete: empty answer (no content, reasoning or tool call)",
            id="empty",
        ),
        pytest.param(
            {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": None}]},
            "incomplete: no finish_reason",
            id="no-finish-reason",
        ),
    ],
)
async def test_a_non_streamed_200_without_a_whole_answer_is_incomplete(
    serve: Serve, body: dict[str, Any], error: str
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.json_response(body)

    served = await serve(handler)
    attempt = await attempt_on(scenario_for(served.url, request={"stream": False}), served.url)
    assert (attempt.status, attempt.failure, attempt.error) == (200, FailureKind.INCOMPLETE, error)


async def test_a_run_against_a_server_that_only_sends_done_has_no_request_on_time(serve: Serve) -> None:
    """The whole path (runner, aggregation, score): every request is incomplete, goodput is 0, the score's
    flag names them, and the server answered every one of them."""
    served = await serve(interrupted)
    scenario = scenario_for(
        served.url,
        phases=[
            {"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 10}},
            {"name": "burst", "role": "stress", "duration_s": 1, "arrival": {"process": "constant", "rate": 20}},
        ],
    )
    async with prepare_run(Settings.from_env({}), scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id="hollow", target_url=prepared.target_url)

    offered = sum(p.offered for p in result.metrics.phases)
    counts = {o: sum(p.outcomes[o] for p in result.metrics.phases) for o in OUTCOMES}
    assert offered == 30
    assert counts[Outcome.INCOMPLETE] == offered, counts
    assert counts[Outcome.ON_TIME] == counts[Outcome.LATE] == 0
    streamed = [seen for seen in served.requests if seen.method == "POST" and seen.json().get("stream")]
    assert len(streamed) == offered  # besides the preflight's GET and calibration probes
    assert result.score is not None
    (flag,) = result.score.flags
    assert flag.raised
    assert "20 of 20 stress requests (100 %) came back as a 2xx without a whole answer" in flag.summary
