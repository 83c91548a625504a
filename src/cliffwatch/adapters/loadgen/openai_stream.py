"""What an OpenAI-compatible streaming response says: tokens, visible text, how it ended.

:class:`OpenAIStream` reads a ``/v1/chat/completions`` or ``/v1/completions`` response sent with
``stream: true`` as the bytes arrive, and at the end sums it up as a :class:`StreamSummary` that maps
one to one onto an ``Attempt``'s fields. The rules below are a contract; the tests hold each of them.

Each SSE event's data payload is one of:

1. ``[DONE]``: the stream ended successfully. Anything after it is ignored.
2. An error: an event of type ``error``, or a JSON object with an ``error`` member (an object with a
   ``message``, or a string), or with ``"object": "error"`` (vLLM's older form). The stream failed with
   that message; anything after it is ignored.
3. Not JSON, or JSON but not an object: the stream failed ("malformed chunk"); anything after it is
   ignored. A decoder limit hit (an endless line) fails the same way, as "malformed stream".
4. A chunk. Its parts count independently:

   - ``usage.completion_tokens`` (an integer, in any chunk, including the final one with empty
     ``choices`` that servers send under ``stream_options.include_usage``) is the server's count of
     output tokens; the last one seen wins, since servers that repeat it send running totals.
   - a non-null ``choices[0].finish_reason`` marks the generation finished.
   - ``choices[0]`` is a *token chunk* when it carries generated output: for chat, a ``delta`` with a
     string ``content``, ``reasoning_content`` or ``reasoning`` (empty strings included) or a
     non-empty ``tool_calls`` list; for completions, a string ``text``. Two exceptions are not token
     chunks: a role announcement (the delta has ``role`` and no non-empty output, before any token
     chunk), and a closing chunk (no non-empty output together with a ``finish_reason``). Each token
     chunk counts one token. llama.cpp sends a chunk per token, with empty content for tokens that show
     no text on their own (byte tokens of an unfinished UTF-8 character), so those count too. A server
     that packs several tokens into one chunk is undercounted; ``usage`` corrects that when present.
   - a token chunk carries *visible text* when its content, reasoning or text is non-empty, or a tool
     call delta has a non-empty function name or arguments.

   Role deltas after the first token chunk do not matter: Ollama and LM Studio repeat
   ``role: assistant`` in every chunk, so the role alone cannot disqualify a chunk.

Only ``choices[0]`` is read (a load test asks for one choice). Events of any type other than ``error``
are read as chunks.

Times are passed in (``now_ns``, the arrival of the bytes being fed), so every event of one read shares
its read's time. The first token time (TTFT) is the arrival of the first token chunk with visible text,
reasoning included; the first answer time (TTFA) that of the first with visible answer text (content, a
tool call, a completion's text), which for a model that does not reason is the same chunk. The chunk
times list the arrival of every token chunk.

Reasoning tokens: ``usage.completion_tokens_details.reasoning_tokens`` when the server reports it (the
OpenAI form), else the token chunks that carried reasoning and no content; None for a stream with
neither (nothing to split).

At the end (:meth:`OpenAIStream.finish`) the stream is judged, most specific first:

- a malformed payload (rule 3): ``FailureKind.TRUNCATED``, the bytes were not the format;
- a server error (rule 2): ``FailureKind.INCOMPLETE``, the server ended the answer and said so;
- ``[DONE]`` without any finish_reason: ``FailureKind.INCOMPLETE``. A server out of slots may end a
  stream early like that (the role chunk, then ``[DONE]``): an HTTP 200 that carries no answer;
- neither ``[DONE]`` nor a finish_reason: ``FailureKind.TRUNCATED``, the server or a proxy dropped it;
- a finish_reason (with or without ``[DONE]``, which some compatible servers never send): it ended
  properly. Whether the answer is a whole one (a real finish reason, enough tokens) is the caller's
  judgement against the scenario's expectation (``domain.scenario.completeness.shortfall``).

A failure the client sees itself (a timeout, a reset) takes precedence. Tokens seen before a failure are
still reported. The output token count is ``usage`` when the stream carried it (source "usage"), else the
number of token chunks (source "chunks"), else zero (source "none").

Non-streamed responses and error bodies are read by ``openai_body``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from cliffwatch.adapters.loadgen.openai_body import (
    MAX_ERROR_CHARS,
    error_text,
    excerpt,
    loads_or_text,
    shorten,
    tool_call_text,
)
from cliffwatch.adapters.loadgen.sse import DEFAULT_MAX_PENDING, SseDecoder, SseEvent, SseLineTooLong
from cliffwatch.domain.outcomes import TokenSource
from cliffwatch.domain.scenario.retry import FailureKind


class EventKind(StrEnum):
    """What one SSE event carried, as far as the load client cares."""

    TEXT = "text"  # a token chunk with visible text
    TOKENS = "tokens"  # a token chunk without visible text (a byte token, an empty delta)
    OTHER = "other"  # no generated output: a role announcement, a closing or usage-only chunk
    DONE = "done"  # the [DONE] sentinel
    ERROR = "error"  # a server error or a malformed payload: the stream failed
    IGNORED = "ignored"  # arrived after the stream had already ended or failed


_ENDING = (EventKind.DONE, EventKind.ERROR)  # after either, :attr:`OpenAIStream.ended`


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSummary:
    """How one streamed response went; ``failure`` is None exactly when it succeeded."""

    failure: FailureKind | None
    error: str | None
    output_tokens: int
    token_source: TokenSource
    token_chunks: int  # counted token chunks, also when usage gave the count
    usage_tokens: int | None
    finish_reason: str | None
    done: bool  # [DONE] seen
    ended_mid_event: bool  # the bytes stopped inside an SSE event, which was discarded
    first_token_ns: int | None
    chunk_times_ns: tuple[int, ...]
    first_answer_ns: int | None = None
    reasoning_tokens: int | None = None
    prompt_tokens: int | None = None  # usage.prompt_tokens: the server's count of the prompt

    @property
    def succeeded(self) -> bool:
        return self.failure is None


class OpenAIStream:
    """Feeds on the raw bytes of one streamed response; :meth:`finish` sums it up."""

    __slots__ = (
        "_decoder",
        "_summary",
        "chunk_times_ns",
        "done",
        "error",
        "error_kind",
        "finish_reason",
        "first_answer_ns",
        "first_token_ns",
        "reasoning_chunks",
        "text",
        "token_chunks",
        "usage_prompt",
        "usage_reasoning",
        "usage_tokens",
    )

    def __init__(self, *, max_pending: int = DEFAULT_MAX_PENDING, keep_text: bool = False) -> None:
        self._decoder = SseDecoder(max_pending=max_pending)
        # The answer's text, kept only when asked (a conversation resends it as the assistant's turn).
        self.text: list[str] | None = [] if keep_text else None
        self._summary: StreamSummary | None = None
        self.chunk_times_ns: list[int] = []
        self.first_token_ns: int | None = None
        self.first_answer_ns: int | None = None
        self.token_chunks = 0
        self.reasoning_chunks = 0
        self.usage_reasoning: int | None = None
        self.usage_prompt: int | None = None
        self.usage_tokens: int | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.error: str | None = None
        self.error_kind = FailureKind.TRUNCATED

    @property
    def ended(self) -> bool:
        """Whether [DONE] or a failure has been seen: further bytes cannot change the outcome."""
        return self.done or self.error is not None

    def feed(self, data: bytes, now_ns: int) -> bool:
        """Reads bytes that arrived at ``now_ns``; returns :attr:`ended`. Never raises on bad input."""
        if self.ended:
            return True
        plain = self._decoder.plain_data(data)
        if plain is not None:  # a token an event, as servers send them: no line splitting, no event objects
            for value in plain:
                if self._feed_data(value, "message", now_ns) in _ENDING:
                    break  # what follows [DONE] or a failure changes nothing
            return self.ended
        try:
            events = self._decoder.feed(data)
        except SseLineTooLong as exc:
            self._fail(f"malformed stream: {exc}")
            return True
        for event in events:
            if self.feed_event(event, now_ns) is EventKind.ERROR:
                break
        return self.ended

    def feed_event(self, event: SseEvent, now_ns: int) -> EventKind:
        """Applies one decoded event (arrived at ``now_ns``) and says what it carried."""
        if self.ended:
            return EventKind.IGNORED
        return self._feed_data(event.data, event.event, now_ns)

    def _feed_data(self, data: str | bytes, event: str, now_ns: int) -> EventKind:
        # ``data`` comes as bytes from the decoder's plain path: orjson reads UTF-8 itself, and the text is
        # made only when something goes wrong.
        if event == "error":
            text = _text(data)
            return self._fail(f"server error in stream: {error_text(loads_or_text(text))}", FailureKind.INCOMPLETE)
        try:
            chunk = orjson.loads(data)
        except ValueError:
            text = _text(data)
            if text.strip() == "[DONE]":  # checked here, so JSON chunks do not pay for it
                self.done = True
                return EventKind.DONE
            try:  # the standard library's reading: it takes what orjson refuses (NaN, lone surrogates)
                chunk = json.loads(text)
            except ValueError as exc:
                return self._fail(f"malformed chunk: {exc.args[0]} in {excerpt(text)}")
        if type(chunk) is not dict:
            return self._fail(f"malformed chunk: not a JSON object: {excerpt(_text(data))}")
        if chunk.get("error") is not None or chunk.get("object") == "error":
            return self._fail(f"server error in stream: {error_text(chunk)}", FailureKind.INCOMPLETE)
        usage = chunk.get("usage")
        if type(usage) is dict:
            completion_tokens = usage.get("completion_tokens")
            if type(completion_tokens) is int and completion_tokens >= 0:
                self.usage_tokens = completion_tokens
            prompt_tokens = usage.get("prompt_tokens")
            if type(prompt_tokens) is int and prompt_tokens >= 0:
                self.usage_prompt = prompt_tokens
            details = usage.get("completion_tokens_details")
            reasoning_tokens = details.get("reasoning_tokens") if type(details) is dict else None
            if type(reasoning_tokens) is int and reasoning_tokens >= 0:
                self.usage_reasoning = reasoning_tokens
        choices = chunk.get("choices")
        if not choices or type(choices) is not list or type(choices[0]) is not dict:
            return EventKind.OTHER
        return self._choice(choices[0], now_ns)

    def finish(self) -> StreamSummary:
        """Ends the stream (the body is exhausted) and returns its summary; later calls return the same."""
        if self._summary is not None:
            return self._summary
        mid_event = self._decoder.finish()
        failure: FailureKind | None = None if self.error is None else self.error_kind
        error = self.error
        if error is None and self.finish_reason is None:
            if self.done:
                failure, error = FailureKind.INCOMPLETE, "incomplete: [DONE] without a finish_reason"
            else:
                failure, error = FailureKind.TRUNCATED, "truncated: stream ended without [DONE] or a finish_reason"
                if mid_event:
                    error += " (cut inside an event)"
        if self.usage_tokens is not None:
            tokens, source = self.usage_tokens, TokenSource.USAGE
        elif self.token_chunks:
            tokens, source = self.token_chunks, TokenSource.CHUNKS
        else:
            tokens, source = 0, TokenSource.NONE
        self._summary = StreamSummary(
            failure=failure,
            error=error,
            output_tokens=tokens,
            token_source=source,
            token_chunks=self.token_chunks,
            usage_tokens=self.usage_tokens,
            finish_reason=self.finish_reason,
            done=self.done,
            ended_mid_event=mid_event,
            first_token_ns=self.first_token_ns,
            chunk_times_ns=tuple(self.chunk_times_ns),
            first_answer_ns=self.first_answer_ns,
            reasoning_tokens=self.usage_reasoning
            if self.usage_reasoning is not None
            else (self.reasoning_chunks if self.reasoning_chunks else None),
            prompt_tokens=self.usage_prompt,
        )
        return self._summary

    def _choice(self, choice: dict[str, Any], now_ns: int) -> EventKind:
        finish_reason = choice.get("finish_reason")
        if finish_reason is not None:
            self.finish_reason = str(finish_reason)
        delta = choice.get("delta")
        if delta is not None:
            if type(delta) is not dict:
                return EventKind.OTHER
            content = delta.get("content")
            reasoning = delta.get("reasoning_content")
            if reasoning is None:
                reasoning = delta.get("reasoning")
            tool_calls = delta.get("tool_calls")
            has_output = type(content) is str or type(reasoning) is str
            answer = bool(content and type(content) is str)
            if tool_calls and type(tool_calls) is list:
                has_output = True
                answer = answer or tool_call_text(tool_calls)
            visible = answer or bool(reasoning and type(reasoning) is str)
            if not has_output or (not visible and "role" in delta and not self.token_chunks):
                return EventKind.OTHER
            # reasoning, and no content beside it (an empty content with empty reasoning is the answer's byte token)
            thinking = type(reasoning) is str and not answer and (bool(reasoning) or type(content) is not str)
            if self.text is not None and answer and type(content) is str:
                self.text.append(content)
        else:
            text = choice.get("text")
            if type(text) is not str:
                return EventKind.OTHER
            visible = answer = bool(text)
            thinking = False
            if self.text is not None and text:
                self.text.append(text)
        if not visible and finish_reason is not None:
            return EventKind.OTHER
        self.token_chunks += 1
        self.reasoning_chunks += thinking
        self.chunk_times_ns.append(now_ns)
        if not visible:
            return EventKind.TOKENS
        if self.first_token_ns is None:
            self.first_token_ns = now_ns
        if answer and self.first_answer_ns is None:
            self.first_answer_ns = now_ns
        return EventKind.TEXT

    def _fail(self, error: str, kind: FailureKind = FailureKind.TRUNCATED) -> EventKind:
        self.error = shorten(error, MAX_ERROR_CHARS)
        self.error_kind = kind
        return EventKind.ERROR


def _text(data: str | bytes) -> str:
    """An event's data as the decoder's own path gives it: UTF-8, invalid sequences as U+FFFD."""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")
