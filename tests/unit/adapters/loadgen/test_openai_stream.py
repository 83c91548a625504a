from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cliffwatch.adapters.loadgen.openai_body import MAX_ERROR_CHARS, error_message, parse_completion
from cliffwatch.adapters.loadgen.openai_stream import EventKind, OpenAIStream, StreamSummary
from cliffwatch.adapters.loadgen.sse import SseDecoder, SseEvent
from cliffwatch.domain.outcomes import TokenSource
from cliffwatch.domain.scenario.retry import FailureKind

FIXTURES = Path(__file__).parents[3] / "fixtures" / "sse"
CHAT = (FIXTURES / "llamacpp-chat-stream.txt").read_bytes()
COMPLETIONS = (FIXTURES / "llamacpp-completions-stream.txt").read_bytes()
TRUNCATED = (FIXTURES / "llamacpp-chat-stream-truncated.txt").read_bytes()
INTERRUPTED = (FIXTURES / "llama-cpp-python-chat-stream-interrupted.txt").read_bytes()
DONE = b"data: [DONE]\n\n"


def sse(payload: dict[str, Any] | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


def chat(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    return sse({"object": "chat.completion.chunk", "choices": [{"delta": delta, "finish_reason": finish}], **extra})


def completion(text: str, finish: str | None = None) -> bytes:
    return sse({"object": "text_completion", "choices": [{"text": text, "finish_reason": finish}]})


def replay(*reads: bytes) -> StreamSummary:
    """Feeds each read at its own time: read i arrives at i * 10 ns."""
    stream = OpenAIStream()
    for i, read in enumerate(reads):
        stream.feed(read, i * 10)
    return stream.finish()


def kinds(*reads: bytes) -> list[EventKind]:
    stream = OpenAIStream()
    events = [event for read in reads for event in SseDecoder().feed(read)]
    return [stream.feed_event(event, 0) for event in events]


def events_of(raw: bytes) -> list[bytes]:
    """The captured body cut into one read per event, as a server flushing each chunk sends it."""
    return [part + b"\n\n" for part in raw.split(b"\n\n") if part]


# --- the captured streams ------------------------------------------------------------------------


def test_the_captured_chat_stream_is_eight_chunk_counted_tokens_and_a_success() -> None:
    """llama.cpp's chat stream: role chunk and closing chunk not counted, [DONE] ends it well."""
    summary = replay(CHAT)
    assert summary.succeeded
    assert (summary.failure, summary.error) == (None, None)
    assert (summary.output_tokens, summary.token_source) == (8, TokenSource.CHUNKS)
    assert (summary.finish_reason, summary.done, summary.ended_mid_event) == ("length", True, False)
    assert summary.usage_tokens is None


def test_each_event_of_the_chat_stream_is_classified() -> None:
    """Role announcement and closing chunk carry nothing; empty contents are tokens without text."""
    assert kinds(CHAT) == [
        EventKind.OTHER,  # {"role": "assistant"}
        EventKind.TOKENS,  # ""
        EventKind.TOKENS,  # ""
        EventKind.TEXT,  # " "
        EventKind.TOKENS,  # ""
        EventKind.TEXT,  # "\u001e"
        EventKind.TEXT,
        EventKind.TEXT,
        EventKind.TEXT,
        EventKind.OTHER,  # {} with finish_reason "length"
        EventKind.DONE,
    ]


def test_ttft_is_the_first_visible_text_while_empty_chunks_still_get_chunk_times() -> None:
    """Read i arrives at 10·i ns: the first non-empty content is the fourth event (read 3)."""
    summary = replay(*events_of(CHAT))
    assert summary.first_token_ns == 30
    assert summary.chunk_times_ns == (10, 20, 30, 40, 50, 60, 70, 80)


def test_the_captured_completions_stream_counts_seven_tokens() -> None:
    """Seven ``text`` chunks count; llama-cpp-python's closing chunk ("" with finish_reason) does not."""
    summary = replay(*events_of(COMPLETIONS))
    assert summary.succeeded
    assert (summary.output_tokens, summary.token_source, summary.finish_reason) == (7, TokenSource.CHUNKS, "length")
    assert summary.first_token_ns == 20  # ")" in the third chunk
    assert kinds(COMPLETIONS)[-2:] == [EventKind.OTHER, EventKind.DONE]


def test_the_truncated_capture_fails_as_truncated_with_the_tokens_seen() -> None:
    """No [DONE] and no finish_reason: a failure, yet the three tokens and the TTFT are kept."""
    summary = replay(*events_of(TRUNCATED))
    assert summary.failure is FailureKind.TRUNCATED
    assert not summary.succeeded
    assert summary.error == "truncated: stream ended without [DONE] or a finish_reason"
    assert (summary.output_tokens, summary.token_source) == (3, TokenSource.CHUNKS)
    assert summary.first_token_ns == 30
    assert not summary.ended_mid_event


def test_an_empty_body_is_a_truncated_stream_with_no_tokens() -> None:
    """A 200 whose body ends before any event is not a success."""
    summary = replay(b"")
    assert summary.failure is FailureKind.TRUNCATED
    assert (summary.output_tokens, summary.token_source, summary.ended_mid_event) == (0, TokenSource.NONE, False)


def test_a_stream_cut_inside_an_event_says_so() -> None:
    """Bytes stopping in the middle of a chunk are a truncation reported as mid-event."""
    summary = replay(CHAT[:1000])
    assert summary.failure is FailureKind.TRUNCATED
    assert summary.error == "truncated: stream ended without [DONE] or a finish_reason (cut inside an event)"
    assert summary.ended_mid_event


@pytest.mark.parametrize(
    "raw", [CHAT, COMPLETIONS, TRUNCATED, INTERRUPTED], ids=["chat", "completions", "truncated", "interrupted"]
)
def test_every_read_size_gives_the_same_summary(raw: bytes) -> None:
    """Reads of 1 byte up to the whole body give the same summary when they arrive at the same time."""

    def summary(size: int) -> StreamSummary:
        stream = OpenAIStream()
        for start in range(0, len(raw), size):
            stream.feed(raw[start : start + size], 5)
        return stream.finish()

    whole = summary(len(raw))
    for size in range(1, len(raw) + 1):
        assert summary(size) == whole, f"read size {size}"


@given(st.data())
def test_any_partition_of_a_captured_stream_gives_the_same_summary(data: st.DataObject) -> None:
    """Wherever the reads are cut, counts, outcome and finish reason are the same as for one read."""
    raw = data.draw(st.sampled_from([CHAT, COMPLETIONS, TRUNCATED, INTERRUPTED]))
    cuts = sorted(data.draw(st.sets(st.integers(min_value=1, max_value=len(raw) - 1), max_size=40)))
    bounds = [0, *cuts, len(raw)]
    stream = OpenAIStream()
    for start, end in itertools.pairwise(bounds):
        stream.feed(raw[start:end], 5)
    assert stream.finish() == replay_at_once(raw)


def replay_at_once(raw: bytes) -> StreamSummary:
    stream = OpenAIStream()
    stream.feed(raw, 5)
    return stream.finish()


# --- token counting rules --------------------------------------------------------------------------


def test_usage_overrides_the_chunk_count() -> None:
    """The include_usage chunk (empty choices) after the last chunk gives the count and its source."""
    usage = sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 11, "total_tokens": 14}})
    summary = replay(CHAT.removesuffix(DONE), usage, DONE)
    assert summary.succeeded
    assert (summary.output_tokens, summary.token_source) == (11, TokenSource.USAGE)
    assert (summary.usage_tokens, summary.token_chunks) == (11, 8)


def test_the_last_usage_wins_and_null_usage_is_ignored() -> None:
    """Running totals on every chunk (vLLM's continuous usage) end at the last one; usage: null is no count."""
    summary = replay(
        chat({"content": "a"}, usage={"completion_tokens": 1}),
        chat({"content": "b"}, usage={"completion_tokens": 2}),
        chat({"content": "c"}, usage=None),
        chat({}, "stop"),
        DONE,
    )
    assert (summary.output_tokens, summary.token_source, summary.token_chunks) == (2, TokenSource.USAGE, 3)


def test_a_usage_of_zero_tokens_is_still_the_servers_count() -> None:
    """Zero from usage is a count, not an absence."""
    summary = replay(sse({"choices": [], "usage": {"completion_tokens": 0}}), DONE)
    assert (summary.output_tokens, summary.token_source) == (0, TokenSource.USAGE)


def test_a_stream_without_tokens_or_usage_has_no_token_source() -> None:
    """[DONE] alone has zero tokens from nowhere, and is no answer: incomplete."""
    summary = replay(DONE)
    assert summary.failure is FailureKind.INCOMPLETE
    assert (summary.output_tokens, summary.token_source, summary.first_token_ns) == (0, TokenSource.NONE, None)


def test_an_openai_style_role_chunk_with_empty_content_is_not_a_token() -> None:
    """OpenAI opens with {"role": "assistant", "content": ""}: an announcement, not a token."""
    assert kinds(chat({"role": "assistant", "content": ""}), chat({"content": "Hi"})) == [
        EventKind.OTHER,
        EventKind.TEXT,
    ]


def test_role_on_every_chunk_does_not_hide_the_tokens() -> None:
    """Ollama and LM Studio repeat the role in every delta: those chunks still count, empty ones too."""
    reads = [chat({"role": "assistant", "content": text}) for text in ("Hel", "", "lo")]
    assert kinds(*reads) == [EventKind.TEXT, EventKind.TOKENS, EventKind.TEXT]


def test_a_closing_chunk_with_text_counts_but_an_empty_one_does_not() -> None:
    """vLLM puts the last token in the finish_reason chunk; llama.cpp closes with an empty one."""
    assert kinds(chat({"content": "end"}, "length"), chat({"content": ""}, "stop")) == [
        EventKind.TEXT,
        EventKind.OTHER,
    ]
    assert kinds(completion("end", "length"), completion("", "stop")) == [EventKind.TEXT, EventKind.OTHER]


def test_reasoning_content_counts_as_tokens_and_visible_text() -> None:
    """A reasoning model's thinking is generated output: the TTFT is at the first reasoning delta."""
    summary = replay(
        chat({"role": "assistant", "content": None, "reasoning_content": ""}),
        chat({"reasoning_content": "Let me think", "content": None}),
        chat({"reasoning": "(vLLM's newer field)"}),
        chat({"content": "42"}),
        chat({}, "stop"),
        DONE,
    )
    assert (summary.output_tokens, summary.first_token_ns) == (3, 10)
    # the answer's first content token came in the fourth read; two of the three tokens were reasoning
    assert (summary.first_answer_ns, summary.reasoning_tokens) == (30, 2)


def test_a_model_that_does_not_reason_has_its_first_answer_at_its_first_token_and_no_split() -> None:
    summary = replay(chat({"role": "assistant", "content": ""}), chat({"content": "Hi"}), chat({}, "stop"), DONE)
    assert summary.first_token_ns == summary.first_answer_ns == 10
    assert summary.reasoning_tokens is None


def test_usage_reasoning_tokens_give_the_split_over_the_chunk_count() -> None:
    """OpenAI's usage.completion_tokens_details.reasoning_tokens is the server's own split."""
    usage = {"completion_tokens": 12, "completion_tokens_details": {"reasoning_tokens": 9}}
    summary = replay(
        chat({"reasoning_content": "hm"}), chat({"content": "ok"}, "stop"), sse({"choices": [], "usage": usage})
    )
    assert (summary.output_tokens, summary.reasoning_tokens) == (12, 9)


def test_a_non_streamed_answer_reads_its_reasoning_tokens_from_usage() -> None:
    body = {
        "choices": [{"message": {"content": "42", "reasoning_content": "six times seven"}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 20, "completion_tokens_details": {"reasoning_tokens": 15}},
    }
    assert parse_completion(json.dumps(body).encode()).reasoning_tokens == 15


def test_tool_call_deltas_are_tokens_and_show_text_once_they_carry_a_name_or_arguments() -> None:
    """Streaming a function call generates tokens; an empty-arguments delta is a token without text."""
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get", "arguments": ""}}
    assert kinds(
        chat({"role": "assistant", "content": None, "tool_calls": [first]}),
        chat({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),
        chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": 1}'}}]}),
        chat({"tool_calls": []}),
        chat({}, "tool_calls"),
    ) == [EventKind.TEXT, EventKind.TOKENS, EventKind.TEXT, EventKind.OTHER, EventKind.OTHER]


def test_chunks_without_output_are_not_tokens() -> None:
    """Null content, an empty delta, a non-string text and empty choices carry no tokens."""
    assert (
        kinds(
            chat({"content": None}),
            chat({}),
            sse({"choices": [{"text": None}]}),
            sse({"choices": []}),
            sse({"id": "x"}),
        )
        == [EventKind.OTHER] * 5
    )


# --- how a stream ends -------------------------------------------------------------------------------


def test_done_without_a_finish_reason_is_incomplete() -> None:
    """[DONE] without any finish_reason is how a server out of slots ends a stream early: an HTTP 200 that is
    not an answer. It is incomplete, with the reason, and the tokens that came are still counted."""
    summary = replay(chat({"content": "a"}), DONE)
    assert summary.failure is FailureKind.INCOMPLETE
    assert summary.error == "incomplete: [DONE] without a finish_reason"
    assert (summary.done, summary.finish_reason, summary.output_tokens) == (True, None, 1)


def test_the_captured_interrupted_stream_is_incomplete() -> None:
    """What llama-cpp-python sent when a second request arrived (interrupt_requests): role chunk, [DONE]."""
    summary = replay(*events_of(INTERRUPTED))
    assert summary.failure is FailureKind.INCOMPLETE
    assert (summary.done, summary.finish_reason, summary.output_tokens) == (True, None, 0)


def test_the_hollow_stream_a_busy_server_sends_is_incomplete() -> None:
    """The role chunk, a null finish_reason, then [DONE]: no token, no finish_reason."""
    summary = replay(chat({"role": "assistant", "content": ""}), chat({"content": None}, None), DONE)
    assert summary.failure is FailureKind.INCOMPLETE
    assert (summary.output_tokens, summary.first_token_ns) == (0, None)


def test_a_finish_reason_without_done_is_a_success() -> None:
    """Decision: the server said the generation is complete; a missing closing sentinel is tolerated."""
    summary = replay(chat({"content": "a"}), chat({}, "stop"))
    assert summary.succeeded
    assert (summary.done, summary.finish_reason, summary.output_tokens) == (False, "stop", 1)


def test_a_finish_reason_then_a_cut_inside_the_next_event_is_still_a_success() -> None:
    """Cut inside the trailing usage chunk or [DONE]: every token arrived, so the attempt succeeded."""
    summary = replay(chat({"content": "a"}), chat({}, "stop"), b"data: [DO")
    assert summary.succeeded
    assert summary.ended_mid_event
    assert (summary.output_tokens, summary.token_source) == (1, TokenSource.CHUNKS)


def test_anything_after_done_is_ignored() -> None:
    """Once [DONE] arrived, later chunks (even broken ones) neither count nor fail the stream."""
    stream = OpenAIStream()
    assert stream.feed(chat({"content": "a"}, "stop") + DONE, 1) is True
    assert stream.feed(chat({"content": "b"}) + b"data: {broken\n\n", 2) is True
    summary = stream.finish()
    assert summary.succeeded
    assert summary.output_tokens == 1
    assert kinds(DONE, chat({"content": "b"})) == [EventKind.DONE, EventKind.IGNORED]


def test_feed_says_whether_the_stream_is_over() -> None:
    """feed returns False while more may come, True after [DONE] or a failure."""
    stream = OpenAIStream()
    assert stream.feed(chat({"content": "a"}), 1) is False
    assert stream.feed(chat({}, "stop"), 2) is False  # a usage chunk and [DONE] may still follow
    assert stream.feed(DONE, 3) is True


def test_finish_returns_the_same_summary_when_called_again() -> None:
    """The summary is computed once; a second call does not reclassify the stream."""
    stream = OpenAIStream()
    stream.feed(TRUNCATED, 1)
    assert stream.finish() is stream.finish()


# --- failures inside the stream ---------------------------------------------------------------------


def test_a_mid_stream_error_object_fails_the_stream_with_its_message() -> None:
    """{"error": {...}} after some tokens: a failure carrying the server's message; tokens are kept."""
    error = sse({"error": {"message": "CUDA out of memory", "type": "server_error", "code": 500}})
    stream = OpenAIStream()
    assert stream.feed(chat({"content": "a"}) + error + chat({"content": "b"}) + DONE, 7) is True
    summary = stream.finish()
    assert summary.failure is FailureKind.INCOMPLETE  # the server ended the answer and said so
    assert summary.error == "server error in stream: CUDA out of memory"
    assert (summary.output_tokens, summary.done) == (1, False)


@pytest.mark.parametrize(
    ("read", "message"),
    [
        pytest.param(sse({"error": "Input validation error"}), "Input validation error", id="tgi-string"),
        pytest.param(sse({"object": "error", "message": "bad", "code": 400}), "bad", id="vllm-old"),
        pytest.param(b'event: error\ndata: {"message": "overloaded"}\n\n', "overloaded", id="event-type"),
        pytest.param(b"event: error\ndata: plain words\n\n", "plain words", id="event-type-text"),
        pytest.param(sse({"error": {"code": 500}}), '{"error":{"code":500}}', id="no-message"),
    ],
)
def test_every_known_error_shape_fails_with_its_message(read: bytes, message: str) -> None:
    """Error objects, error strings, vLLM's old form and SSE error events all end the answer as incomplete."""
    summary = replay(chat({"content": "a"}), read)
    assert summary.error == f"server error in stream: {message}"
    assert summary.failure is FailureKind.INCOMPLETE


def test_a_null_error_member_is_not_an_error() -> None:
    """Some proxies add "error": null to every chunk; only a present error fails the stream."""
    assert replay(chat({"content": "a"}, error=None), chat({}, "stop"), DONE).succeeded


def test_a_payload_that_is_not_json_fails_as_a_malformed_chunk() -> None:
    """Broken JSON is a failure with the parser's reason and an excerpt, never an exception."""
    summary = replay(chat({"content": "a"}), b'data: {"choices": [\n\n', DONE)
    assert summary.failure is FailureKind.TRUNCATED
    assert summary.error is not None
    assert summary.error == "malformed chunk: Expecting value: line 1 column 14 (char 13) in '{\"choices\": ['"
    assert (summary.output_tokens, summary.done) == (1, False)


def test_json_that_is_not_an_object_is_a_malformed_chunk() -> None:
    """A bare number or list is not a chunk."""
    assert replay(b"data: 42\n\n").error == "malformed chunk: not a JSON object: '42'"


def test_an_endless_line_fails_the_stream_instead_of_raising() -> None:
    """The decoder's limit turns into a failure of this attempt, not an exception in the client."""
    stream = OpenAIStream(max_pending=256)
    assert stream.feed(chat({"content": "a"}), 1) is False
    assert stream.feed(b"data: " + b"x" * 300, 2) is True
    summary = stream.finish()
    assert summary.error is not None
    assert summary.error.startswith("malformed stream: SSE line exceeds 256 bytes")
    assert summary.output_tokens == 1


def test_long_error_messages_are_shortened() -> None:
    """A server that streams a whole stack trace leaves at most MAX_ERROR_CHARS on the attempt."""
    summary = replay(sse({"error": {"message": "boom " * 500}}))
    assert summary.error is not None
    assert len(summary.error) == MAX_ERROR_CHARS
    assert summary.error.endswith("…")


# --- non-streamed responses and error bodies ----------------------------------------------------------


def test_the_captured_non_streamed_chat_response_gives_text_and_usage() -> None:
    """choices[0].message.content is the text; usage.completion_tokens the count."""
    result = parse_completion((FIXTURES / "llamacpp-chat-nonstream.json").read_bytes())
    assert result.error is None
    assert (result.text, result.finish_reason, result.usage_tokens) == ("l \x1e\x1e", "length", 7)
    assert result.estimated_tokens == 1  # str.split counts U+001E, the record separator, as whitespace
    assert (result.output_tokens, result.token_source) == (7, TokenSource.USAGE)


def test_a_non_streamed_completions_response_without_usage_is_estimated_from_words() -> None:
    """choices[0].text is the text; without usage only the word estimate is there, labelled as such."""
    result = parse_completion(b'{"choices": [{"text": "one two  three\\nfour", "finish_reason": "stop"}]}')
    assert (result.text, result.usage_tokens, result.estimated_tokens) == ("one two  three\nfour", None, 4)
    assert (result.output_tokens, result.token_source) == (4, TokenSource.ESTIMATED)


@pytest.mark.parametrize(
    ("message", "empty"),
    [
        pytest.param({"content": ""}, True, id="empty-content"),
        pytest.param({"content": None}, True, id="null-content"),
        pytest.param({"content": None, "reasoning_content": "hmm"}, False, id="reasoning"),
        pytest.param(
            {"content": None, "tool_calls": [{"function": {"name": "get", "arguments": "{}"}}]}, False, id="tool-call"
        ),
        pytest.param({"content": "x"}, False, id="text"),
    ],
)
def test_a_non_streamed_answer_is_empty_without_content_reasoning_or_a_tool_call(
    message: dict[str, Any], empty: bool
) -> None:
    """The caller holds an empty answer against min_output_tokens; a tool call or reasoning is an answer."""
    body = json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}).encode()
    assert parse_completion(body).empty is empty


def test_a_non_streamed_reasoning_response_estimates_reasoning_words_too() -> None:
    """Reasoning is generated output as well: it adds to the estimate but is not the text."""
    body = b'{"choices": [{"message": {"content": "42", "reasoning_content": "six times seven"}}]}'
    result = parse_completion(body)
    assert (result.text, result.estimated_tokens, result.finish_reason) == ("42", 4, None)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b'{"error": {"message": "model not loaded"}}', "server error: model not loaded", id="error"),
        pytest.param(
            b"<html>502</html>",
            "malformed response: Expecting value: line 1 column 1 (char 0) in '<html>502</html>'",
            id="html",
        ),
        pytest.param(b"[1]", "malformed response: not a JSON object: '[1]'", id="list"),
        pytest.param(b'{"choices": []}', "incomplete: no choices", id="no-choices"),
    ],
)
def test_a_body_that_is_not_a_completion_comes_back_as_an_error(body: bytes, error: str) -> None:
    """Errors and junk in a 200 body are reported, never raised, with no tokens. An error document or a
    completion without choices is an answer that is not there (incomplete); junk is not the format."""
    result = parse_completion(body)
    assert result.error == error
    hollow = body.startswith(b"{")
    assert result.failure is (FailureKind.INCOMPLETE if hollow else FailureKind.TRUNCATED)
    assert (result.text, result.usage_tokens, result.estimated_tokens) == ("", None, 0)
    assert (result.output_tokens, result.token_source) == (0, TokenSource.NONE)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b'{"error": {"message": "Rate limit", "type": "rate_limit"}}', "Rate limit", id="openai"),
        pytest.param(b'{"error": "Model is overloaded", "error_type": "overloaded"}', "Model is overloaded", id="tgi"),
        pytest.param(b'{"object": "error", "message": "too long", "code": 400}', "too long", id="vllm-old"),
        pytest.param(b'{"detail": "Not Found"}', "Not Found", id="fastapi"),
        pytest.param(b'{"detail": [{"loc": ["body"]}]}', '{"detail":[{"loc":["body"]}]}', id="other-json"),
        pytest.param(
            b"<html>\n  <body>502 Bad Gateway</body>\n</html>\n",
            "<html> <body>502 Bad Gateway</body> </html>",
            id="html",
        ),
        pytest.param(b"upstream \xff reset", "upstream \ufffd reset", id="not-utf8"),
    ],
)
def test_error_bodies_give_their_message(body: bytes, message: str) -> None:
    """The message of every common error shape; anything else as its text with whitespace collapsed."""
    assert error_message(body) == message


def test_an_empty_error_body_has_no_message() -> None:
    """Nothing (or only whitespace) to report is None, so the caller can say "HTTP 503" alone."""
    assert error_message(b"") is None
    assert error_message(b" \r\n") is None


def test_error_messages_are_cut_to_the_limit() -> None:
    """A whole HTML error page becomes at most ``limit`` characters, ending in an ellipsis."""
    message = error_message(b"x" * 5000, limit=40)
    assert message == "x" * 39 + "…"


def test_stream_and_sse_events_agree_on_event_boundaries() -> None:
    """feed_event applied to decoded events gives the same summary as feeding the bytes."""
    stream = OpenAIStream()
    for event in SseDecoder().feed(CHAT):
        stream.feed_event(event, 5)
    assert stream.finish() == replay_at_once(CHAT)
    assert stream.feed_event(SseEvent("[DONE]"), 6) is EventKind.IGNORED


def test_what_the_fast_json_reader_refuses_is_read_as_the_standard_library_reads_it() -> None:
    """Chunks are parsed with orjson; NaN, lone surrogates and invalid UTF-8 (which it refuses) fall back to
    the standard library's reading, so a stream is judged as before whichever parser took the chunk."""
    nan = b'data: {"choices": [{"delta": {"content": "a"}}], "x": NaN}\n\n'
    surrogate = b'data: {"choices": [{"delta": {"content": "\\ud800"}}]}\n\n'
    broken_utf8 = b'data: {"choices": [{"delta": {"content": "caf\xe9"}}]}\n\n'
    stream = OpenAIStream()
    stream.feed(b": warm-up\n\n", 0)  # past the start, where the decoder's plain path applies
    for i, read in enumerate((nan, surrogate, broken_utf8, chat({}, "stop"), DONE)):
        stream.feed(read, i + 1)
    summary = stream.finish()
    assert summary.succeeded
    assert (summary.output_tokens, summary.token_chunks) == (3, 3)


def test_events_after_done_in_the_same_read_are_ignored_on_the_plain_path() -> None:
    stream = OpenAIStream()
    stream.feed(b": warm-up\n\n", 0)
    assert stream.feed(chat({"content": "a"}, "stop") + DONE + chat({"content": "b"}) + b"data: {broken\n\n", 1)
    summary = stream.finish()
    assert summary.succeeded
    assert summary.output_tokens == 1
