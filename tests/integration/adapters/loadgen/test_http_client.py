"""The HTTP load client against real loopback servers: what one attempt sends, measures and reports."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Callable

import pytest
from aiohttp import web
from loadgen_testkit import (
    CHAT_NONSTREAM,
    CHAT_STREAM,
    COMPLETIONS_STREAM,
    DONE,
    TRUNCATED_STREAM,
    Serve,
    chat_chunk,
    closed_port_url,
    events_of,
    planned,
    scenario_for,
    send_events,
    sse,
    start_sse,
)

from cliffwatch.adapters.loadgen.answer_reader import DRAIN_TIMEOUT_S
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.domain.errors import TargetUnreachable
from cliffwatch.domain.outcomes import NS_PER_S, Attempt, TokenSource
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.plan import PlannedRequest

GAP_S = 0.05  # the servers' pause between writes, where a test needs the client to see them apart
pytestmark = pytest.mark.usefixtures("over_each_transport")  # aiohttp and the lean client, held to one suite


async def one_attempt(
    scenario: Scenario,
    url: str,
    *,
    request: PlannedRequest | None = None,
    timeout_s: float = 5.0,
    deadline_bound: bool = False,
) -> Attempt:
    """One attempt through a fresh executor; times are relative to just before it was made."""
    async with HttpExecutor(scenario, url) as executor:
        origin = time.perf_counter_ns()
        attempt = await executor.attempt(
            request or planned(), 1, timeout_s, origin_ns=origin, deadline_bound=deadline_bound
        )
        assert executor.in_flight == 0
        return attempt


def seconds(ns: int | None) -> float:
    assert ns is not None
    return ns / NS_PER_S


# -- streamed answers ---------------------------------------------------------------------------------


async def test_a_streamed_chat_answer_counts_token_chunks_and_times_ttft_at_the_first_visible_text(
    serve: Serve,
) -> None:
    events = [
        chat_chunk(role=True),
        chat_chunk(""),
        chat_chunk(""),
        chat_chunk("Hello"),
        chat_chunk(" world"),
        chat_chunk(finish="stop"),
        DONE,
    ]

    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events, gap_s=GAP_S)

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url)

    assert attempt.succeeded, attempt.error
    assert attempt.status == 200
    assert attempt.output_tokens == 4
    assert attempt.token_source is TokenSource.CHUNKS
    assert len(attempt.chunk_times_ns) == 4
    assert list(attempt.chunk_times_ns) == sorted(set(attempt.chunk_times_ns))  # strictly increasing
    # "Hello" is the third token chunk and the first with visible text, three server gaps after the headers.
    assert attempt.first_token_ns == attempt.chunk_times_ns[2]
    assert seconds(attempt.first_token_ns) - seconds(attempt.first_byte_ns) >= 2.5 * GAP_S
    assert attempt.first_byte_ns is not None
    assert 0 <= attempt.sent_ns <= attempt.first_byte_ns
    assert attempt.end_ns >= attempt.chunk_times_ns[-1]


async def test_the_captured_llamacpp_chat_stream_succeeds_with_its_eight_token_chunks(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events_of(CHAT_STREAM))

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url)

    assert attempt.succeeded, attempt.error
    assert (attempt.output_tokens, attempt.token_source) == (8, TokenSource.CHUNKS)
    assert attempt.first_token_ns is not None
    assert attempt.first_token_ns in attempt.chunk_times_ns


async def test_with_include_usage_the_servers_usage_count_is_the_token_count(serve: Serve) -> None:
    events = [
        chat_chunk(role=True),
        chat_chunk("a"),
        chat_chunk("b"),
        chat_chunk(finish="length"),
        sse({"object": "chat.completion.chunk", "choices": [], "usage": {"completion_tokens": 11}}),
        DONE,
    ]

    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events)

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"include_usage": True})
    attempt = await one_attempt(scenario, served.url)

    assert attempt.succeeded, attempt.error
    assert (attempt.output_tokens, attempt.token_source) == (11, TokenSource.USAGE)
    assert len(attempt.chunk_times_ns) == 2
    assert served.requests[0].json()["stream_options"] == {"include_usage": True}


async def test_a_streamed_completions_answer_is_read_from_the_completions_path(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events_of(COMPLETIONS_STREAM))

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url, api="openai-completions"), served.url)

    assert attempt.succeeded, attempt.error
    assert (attempt.output_tokens, attempt.token_source) == (7, TokenSource.CHUNKS)
    assert served.requests[0].path == "/v1/completions"


async def test_an_error_event_inside_a_stream_ends_the_attempt_as_incomplete_with_the_servers_message(
    serve: Serve,
) -> None:
    events = [chat_chunk(role=True), chat_chunk("x"), sse({"error": {"message": "KV cache exhausted"}})]

    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events)

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url)

    assert attempt.failure is FailureKind.INCOMPLETE  # the server ended the answer and said why
    assert attempt.error is not None
    assert "KV cache exhausted" in attempt.error
    assert attempt.output_tokens == 1


# -- non-streamed answers -----------------------------------------------------------------------------


async def test_a_non_streamed_answer_with_usage_counts_the_usage_tokens(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=CHAT_NONSTREAM, content_type="application/json")

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url, request={"stream": False}), served.url)

    assert attempt.succeeded, attempt.error
    assert (attempt.output_tokens, attempt.token_source) == (7, TokenSource.USAGE)
    assert attempt.first_token_ns is not None
    assert attempt.chunk_times_ns == ()
    body = served.requests[0].json()
    assert body["stream"] is False
    assert "stream_options" not in body
    assert served.requests[0].headers.get("Accept") != "text/event-stream"


async def test_a_non_streamed_answer_without_usage_estimates_tokens_from_its_words(serve: Serve) -> None:
    document = {"choices": [{"message": {"role": "assistant", "content": "one two three"}, "finish_reason": "stop"}]}

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(document)

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url, request={"stream": False}), served.url)

    assert attempt.succeeded, attempt.error
    assert (attempt.output_tokens, attempt.token_source) == (3, TokenSource.ESTIMATED)


async def test_a_non_streamed_answer_that_arrives_in_pieces_is_read_whole(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        half = len(CHAT_NONSTREAM) // 2
        await response.write(CHAT_NONSTREAM[:half])
        await asyncio.sleep(GAP_S)
        await response.write(CHAT_NONSTREAM[half:])
        await response.write_eof()
        return response

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url, request={"stream": False}), served.url)

    assert attempt.succeeded, attempt.error
    assert (attempt.output_tokens, attempt.token_source) == (7, TokenSource.USAGE)


# -- what is sent -------------------------------------------------------------------------------------


@pytest.mark.parametrize("include_usage", [False, True])
async def test_a_chat_request_carries_the_model_a_prompt_of_exactly_prompt_tokens_words_and_the_extra_body(
    serve: Serve, include_usage: bool
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events_of(CHAT_STREAM))

    served = await serve(handler)
    scenario = scenario_for(
        served.url,
        request={
            "include_usage": include_usage,
            "extra_body": {"ignore_eos": True, "temperature": 0},
            "headers": {"Authorization": "Bearer sk-test", "X-Run": "it"},
        },
    )
    await one_attempt(scenario, served.url, request=planned(41, prompt_tokens=37, max_tokens=19))

    [seen] = served.requests
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    body = seen.json()
    expected_keys = {"model", "messages", "max_tokens", "stream", "ignore_eos", "temperature"}
    assert set(body) == expected_keys | ({"stream_options"} if include_usage else set())
    assert body["model"] == "tiny-llama"
    assert body["max_tokens"] == 19
    assert body["stream"] is True
    assert (body["ignore_eos"], body["temperature"]) == (True, 0)
    [message] = body["messages"]
    assert message["role"] == "user"
    assert len(message["content"].split()) == 37
    assert message["content"].startswith("req-41 ")
    assert seen.headers["Authorization"] == "Bearer sk-test"
    assert seen.headers["X-Run"] == "it"
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Accept"] == "text/event-stream"
    assert seen.headers["User-Agent"].startswith("cliffwatch/")


async def test_a_completions_request_sends_the_prompt_as_text_of_exactly_prompt_tokens_words(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events_of(COMPLETIONS_STREAM))

    served = await serve(handler)
    scenario = scenario_for(served.url, api="openai-completions")
    await one_attempt(scenario, served.url, request=planned(7, prompt_tokens=1, max_tokens=3))
    await one_attempt(scenario, served.url, request=planned(8, prompt_tokens=300, max_tokens=3))

    prompts = [seen.json()["prompt"] for seen in served.requests]
    assert [len(p.split()) for p in prompts] == [1, 300]
    assert prompts[0] == "req-7"
    assert all("messages" not in seen.json() for seen in served.requests)


async def test_template_headers_replace_the_clients_defaults_whatever_their_case(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events_of(CHAT_STREAM))

    served = await serve(handler)
    headers = {"content-type": "application/json; charset=utf-8", "user-agent": "my-bench/1", "accept": "*/*"}
    await one_attempt(scenario_for(served.url, request={"headers": headers}), served.url)

    seen = served.requests[0].headers
    assert seen.getall("Content-Type") == ["application/json; charset=utf-8"]
    assert seen.getall("User-Agent") == ["my-bench/1"]
    assert seen.getall("Accept") == ["*/*"]


async def test_a_plain_http_target_gets_a_get_and_any_2xx_succeeds_whatever_the_body(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>not a completion</html>", content_type="text/html")

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url, api="http", request={"path": "/health"}), served.url)

    assert attempt.succeeded, attempt.error
    assert attempt.status == 200
    assert (attempt.output_tokens, attempt.token_source) == (0, TokenSource.NONE)
    [seen] = served.requests
    assert (seen.method, seen.path, seen.body) == ("GET", "/health", b"")


async def test_a_head_request_ends_at_its_answers_head_whatever_length_it_announces(serve: Serve) -> None:
    """A HEAD's answer announces the length of a body it never sends: the attempt ends with the head, promptly,
    and the next request is answered in full."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(text="x" * 1000)  # aiohttp sends its Content-Length, and no body to a HEAD

    served = await serve(handler)
    scenario = scenario_for(served.url, api="http", request={"method": "HEAD", "path": "/probe"})
    async with HttpExecutor(scenario, served.url) as executor:
        for number in (1, 2):
            began = time.perf_counter()
            attempt = await executor.attempt(planned(number), 1, 3.0, origin_ns=0, deadline_bound=False)
            assert attempt.succeeded, attempt.error
            assert attempt.status == 200
            assert time.perf_counter() - began < 1.0  # not held until the attempt's timeout
    assert [(r.method, r.path) for r in served.requests] == [("HEAD", "/probe")] * 2


async def test_a_cookie_the_target_sets_is_never_sent_with_later_requests(serve: Serve) -> None:
    # Each planned request is another user: one user's session cookie must not ride on everyone's requests.
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.Response(text="ok")
        response.set_cookie("session", "user-1")
        return response

    served = await serve(handler)
    url = served.url.replace("127.0.0.1", "localhost")  # a jar keeps no cookie of a bare IP address
    scenario = scenario_for(url, api="http", request={"path": "/"})
    async with HttpExecutor(scenario, url) as executor:
        for number in (1, 2):
            attempt = await executor.attempt(planned(), number, 5.0, origin_ns=time.perf_counter_ns(),
                                             deadline_bound=False)  # fmt: skip
            assert attempt.succeeded, attempt.error

    assert [seen.headers.get("Cookie") for seen in served.requests] == [None, None]


async def test_a_plain_http_template_body_is_sent_as_json(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=201)

    served = await serve(handler)
    scenario = scenario_for(
        served.url, api="http", request={"method": "POST", "path": "/jobs", "body": {"size": 3, "tags": ["a"]}}
    )
    attempt = await one_attempt(scenario, served.url)

    assert attempt.succeeded, attempt.error
    [seen] = served.requests
    assert seen.json() == {"size": 3, "tags": ["a"]}
    assert seen.headers["Content-Type"] == "application/json"


# -- refusals and failures ----------------------------------------------------------------------------


def http_date_in(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


@pytest.mark.parametrize(
    ("retry_after", "low", "high"),
    [
        (lambda: "2", 2.0, 2.0),
        (lambda: http_date_in(30), 25.0, 31.0),
        (lambda: "soon", None, None),
        (lambda: "²", None, None),
    ],
    ids=["seconds", "http-date", "unreadable", "non-ascii-digit"],
)
async def test_a_429_reports_its_retry_after_in_seconds(
    serve: Serve, retry_after: Callable[[], str], low: float | None, high: float | None
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        headers = {"Retry-After": retry_after()}
        return web.json_response({"error": {"message": "slow down"}}, status=429, headers=headers)

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url)

    assert (attempt.failure, attempt.status) == (FailureKind.STATUS, 429)
    assert attempt.error == "HTTP 429: slow down"
    if low is None:
        assert attempt.retry_after_s is None
    else:
        assert attempt.retry_after_s is not None
        assert low <= attempt.retry_after_s <= (high or low)


async def test_a_503_fails_with_the_status_and_the_servers_error_message(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "model overloaded", "type": "server_error"}}, status=503)

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url)

    assert (attempt.failure, attempt.status) == (FailureKind.STATUS, 503)
    assert attempt.error == "HTTP 503: model overloaded"
    assert attempt.retry_after_s is None
    assert attempt.output_tokens == 0


async def test_an_error_body_that_arrives_in_pieces_keeps_its_whole_message(serve: Serve) -> None:
    body = json.dumps({"error": {"message": "queue full, " + "retry later " * 5}}).encode()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=503, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(body[:20])
        await asyncio.sleep(GAP_S)
        await response.write(body[20:])
        await response.write_eof()
        return response

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url)

    assert attempt.error == "HTTP 503: queue full, " + " ".join(["retry later"] * 5)


async def test_an_error_status_whose_body_never_ends_still_fails_promptly_with_its_status(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=503, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"error": {"mess')
        await served.hang()
        return response

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url, timeout_s=5.0)

    assert (attempt.failure, attempt.status) == (FailureKind.STATUS, 503)
    assert attempt.error is not None
    assert attempt.error.startswith("HTTP 503: ")
    assert seconds(attempt.end_ns - attempt.sent_ns) < DRAIN_TIMEOUT_S + 1.0


async def test_a_refused_connection_fails_as_connection_without_a_status() -> None:
    url = closed_port_url()
    attempt = await one_attempt(scenario_for(url), url)

    assert attempt.failure is FailureKind.CONNECTION
    assert attempt.status is None
    assert attempt.error


async def test_a_connection_reset_mid_stream_is_truncated_and_keeps_the_tokens_received(serve: Serve) -> None:
    reset = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = await start_sse(request)
        for event in (chat_chunk(role=True), chat_chunk("a"), chat_chunk("b"), chat_chunk("c")):
            await response.write(event)
        await asyncio.sleep(GAP_S)  # the server's pace: the reset comes a moment after the tokens, mid-generation
        assert request.transport is not None
        request.transport.close()
        reset.set()
        return response

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url)

    assert reset.is_set()
    assert attempt.failure is FailureKind.TRUNCATED
    assert attempt.status == 200
    assert (attempt.output_tokens, attempt.token_source) == (3, TokenSource.CHUNKS)
    assert len(attempt.chunk_times_ns) == 3


async def test_a_stream_that_ends_without_done_or_a_finish_reason_is_truncated(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events_of(TRUNCATED_STREAM))

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url)

    assert attempt.failure is FailureKind.TRUNCATED
    assert attempt.error is not None
    assert "[DONE]" in attempt.error
    assert (attempt.output_tokens, attempt.token_source) == (3, TokenSource.CHUNKS)


# -- timeouts -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deadline_bound", "text"),
    [(False, "attempt timeout after 0.3s"), (True, "request deadline reached after 0.3s")],
)
async def test_a_server_that_never_answers_times_the_attempt_out_with_the_limit_that_ended_it(
    serve: Serve, deadline_bound: bool, text: str
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await served.hang()
        return web.Response()

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url, timeout_s=0.3, deadline_bound=deadline_bound)

    assert attempt.failure is FailureKind.TIMEOUT
    assert attempt.error == text
    assert attempt.status is None
    assert 0.3 <= seconds(attempt.end_ns - attempt.sent_ns) < 1.5


async def test_a_stream_that_stalls_times_out_and_keeps_the_tokens_it_delivered(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = await start_sse(request)
        await response.write(chat_chunk(role=True) + chat_chunk("a") + chat_chunk("b"))
        await served.hang()
        return response

    served = await serve(handler)
    attempt = await one_attempt(scenario_for(served.url), served.url, timeout_s=0.3)

    assert attempt.failure is FailureKind.TIMEOUT
    assert (attempt.status, attempt.output_tokens) == (200, 2)


async def test_a_silence_longer_than_read_timeout_ms_ends_the_attempt_early_as_a_read_timeout(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = await start_sse(request)
        await response.write(chat_chunk(role=True) + chat_chunk("a"))
        await served.hang()
        return response

    served = await serve(handler)
    scenario = scenario_for(served.url, client={"read_timeout_ms": 200})
    attempt = await one_attempt(scenario, served.url, timeout_s=5.0)

    assert attempt.failure is FailureKind.TIMEOUT
    assert attempt.error is not None
    assert "read" in attempt.error
    assert "attempt timeout" not in attempt.error
    assert attempt.output_tokens == 1
    assert 0.2 <= seconds(attempt.end_ns - attempt.sent_ns) < 2.0


# -- the connection pool ------------------------------------------------------------------------------


async def test_with_one_pooled_connection_the_second_request_waits_for_the_first_and_says_how_long(
    serve: Serve,
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.3)
        return web.Response(body=CHAT_NONSTREAM, content_type="application/json")

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": False}, client={"pool_size": 1})
    async with HttpExecutor(scenario, served.url) as executor:
        origin = time.perf_counter_ns()
        attempts = await asyncio.gather(
            *(executor.attempt(planned(i), 1, 5.0, origin_ns=origin, deadline_bound=False) for i in range(2))
        )
        assert executor.in_flight == 0

    first, second = sorted(attempts, key=lambda a: a.end_ns)
    assert first.succeeded
    assert second.succeeded
    assert seconds(first.pool_wait_ns) < 0.1
    service_s = seconds(first.end_ns - first.sent_ns)
    assert service_s >= 0.3
    assert abs(seconds(second.pool_wait_ns) - service_s) < 0.1
    assert seconds(second.end_ns - first.end_ns) >= 0.25
    assert len(served.connections) == 1


async def test_an_attempt_whose_time_runs_out_waiting_for_a_pooled_connection_is_not_sent_not_a_timeout(
    serve: Serve,
) -> None:
    """The first request holds the one connection past its timeout (the target's timeout); the second never
    got a connection, so it never reached the target: unsent, with its wait, not the target's timeout."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await served.hang()
        return web.Response()

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": False}, client={"pool_size": 1})
    async with HttpExecutor(scenario, served.url) as executor:
        origin = time.perf_counter_ns()
        # the second's time runs out while the first still holds the connection (released only at its own end)
        first, second = await asyncio.gather(
            executor.attempt(planned(0), 1, 1.0, origin_ns=origin, deadline_bound=False),
            executor.attempt(planned(1), 1, 0.3, origin_ns=origin, deadline_bound=False),
        )
    assert first.failure is FailureKind.TIMEOUT
    assert first.error == "attempt timeout after 1s"
    assert second.failure is FailureKind.UNSENT
    assert second.error is not None
    assert second.error.startswith("not sent: attempt timeout after 0.3s before the request left the client, ")
    assert "waiting for a pooled connection (client.pool_size)" in second.error
    assert 0.25 <= seconds(second.pool_wait_ns) < 0.9
    assert len(served.requests) == 1


async def test_in_flight_counts_outstanding_attempts_and_returns_to_zero(serve: Serve) -> None:
    answer = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        await answer.wait()
        return await send_events(request, events_of(CHAT_STREAM))

    served = await serve(handler)
    async with HttpExecutor(scenario_for(served.url), served.url) as executor:
        origin = time.perf_counter_ns()
        pending = [
            asyncio.create_task(executor.attempt(planned(i), 1, 5.0, origin_ns=origin, deadline_bound=False))
            for i in range(2)
        ]
        await served.until_received(2)
        assert executor.in_flight == 2
        answer.set()
        attempts = await asyncio.gather(*pending)
        assert executor.in_flight == 0
        assert executor.tokens == 16
    assert all(a.succeeded for a in attempts)


async def test_a_connection_is_reused_after_a_stream_that_ended_with_done(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events_of(CHAT_STREAM))

    served = await serve(handler)
    async with HttpExecutor(scenario_for(served.url), served.url) as executor:
        origin = time.perf_counter_ns()
        for i in range(3):
            attempt = await executor.attempt(planned(i), 1, 5.0, origin_ns=origin, deadline_bound=False)
            assert attempt.succeeded, attempt.error

    assert len(served.requests) == 3
    assert len(served.connections) == 1


async def test_a_server_holding_the_body_open_after_done_neither_fails_nor_holds_the_attempt(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = await start_sse(request)
        for event in events_of(CHAT_STREAM):
            await response.write(event)
        await served.hang()
        return response

    served = await serve(handler)
    async with HttpExecutor(scenario_for(served.url), served.url) as executor:
        origin = time.perf_counter_ns()
        # The attempt's own limit runs out while the client drains what follows [DONE].
        short = await executor.attempt(planned(0), 1, DRAIN_TIMEOUT_S / 2, origin_ns=origin, deadline_bound=False)
        began = time.perf_counter()
        long = await executor.attempt(planned(1), 1, 5.0, origin_ns=origin, deadline_bound=False)
        waited = time.perf_counter() - began

    for attempt in (short, long):
        assert attempt.succeeded, attempt.error
        assert attempt.output_tokens == 8
    assert waited < DRAIN_TIMEOUT_S + 1.0
    assert len(served.connections) == 2  # a connection that never finished its body is not reused


# -- preflight ----------------------------------------------------------------------------------------


async def test_preflight_refuses_a_target_nothing_listens_on() -> None:
    url = closed_port_url()
    async with HttpExecutor(scenario_for(url), url) as executor:
        with pytest.raises(TargetUnreachable) as caught:
            await executor.preflight()
    assert caught.value.url == url


async def test_preflight_accepts_any_http_answer_even_a_404(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise web.HTTPNotFound()

    served = await serve(handler)
    async with HttpExecutor(scenario_for(served.url), served.url) as executor:
        await executor.preflight()
    assert [(seen.method, seen.path) for seen in served.requests] == [("GET", "/")]
