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
are read as chunks. Every failure inside a 2xx stream is ``FailureKind.TRUNCATED`` (the stream did not
finish) with the reason in ``error``; a transport error the client sees itself should take precedence.

Times are passed in (``now_ns``, the arrival of the bytes being fed), so every event of one read shares
its read's time. The first token time (TTFT) is the arrival of the first token chunk with visible text;
the chunk times list the arrival of every token chunk.

At the end (:meth:`OpenAIStream.finish`) the stream succeeded if it saw ``[DONE]`` or a finish_reason
and did not fail before. A finish_reason without ``[DONE]`` is a success: the server said the generation
is complete and every token was delivered; only the closing sentinel (and perhaps a usage chunk) is
missing, which some compatible servers never send. A stream with neither is truncated (the server or a
proxy dropped it) and fails, with the tokens seen so far still reported. The output token count is
``usage`` when the stream carried it (source "usage"), else the number of token chunks (source
"chunks"), else zero (source "none").

Non-streamed responses (:func:`parse_completion`) and error bodies (:func:`error_message`) are read here
too, so one module owns the OpenAI wire format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cliffwatch.adapters.loadgen.sse import DEFAULT_MAX_PENDING, SseDecoder, SseEvent, SseLineTooLong
from cliffwatch.domain.outcomes import TokenSource
from cliffwatch.domain.retry import FailureKind

MAX_ERROR_CHARS = 300  # error texts kept on an attempt; bodies can be whole HTML pages
_EXCERPT_CHARS = 80  # of a malformed payload, quoted in its error


class EventKind(StrEnum):
    """What one SSE event carried, as far as the load client cares."""

    TEXT = "text"  # a token chunk with visible text
    TOKENS = "tokens"  # a token chunk without visible text (a byte token, an empty delta)
    OTHER = "other"  # no generated output: a role announcement, a closing or usage-only chunk
    DONE = "done"  # the [DONE] sentinel
    ERROR = "error"  # a server error or a malformed payload: the stream failed
    IGNORED = "ignored"  # arrived after the stream had already ended or failed


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
        "finish_reason",
        "first_token_ns",
        "token_chunks",
        "usage_tokens",
    )

    def __init__(self, *, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self._decoder = SseDecoder(max_pending=max_pending)
        self._summary: StreamSummary | None = None
        self.chunk_times_ns: list[int] = []
        self.first_token_ns: int | None = None
        self.token_chunks = 0
        self.usage_tokens: int | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.error: str | None = None

    @property
    def ended(self) -> bool:
        """Whether [DONE] or a failure has been seen: further bytes cannot change the outcome."""
        return self.done or self.error is not None

    def feed(self, data: bytes, now_ns: int) -> bool:
        """Reads bytes that arrived at ``now_ns``; returns :attr:`ended`. Never raises on bad input."""
        if self.ended:
            return True
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
        data = event.data
        if event.event == "error":
            return self._fail(f"server error in stream: {_error_text(_loads_or_text(data))}")
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            if data.strip() == "[DONE]":  # checked here, so JSON chunks do not pay for it
                self.done = True
                return EventKind.DONE
            return self._fail(f"malformed chunk: {exc.args[0]} in {_excerpt(data)}")
        if type(chunk) is not dict:
            return self._fail(f"malformed chunk: not a JSON object: {_excerpt(data)}")
        if chunk.get("error") is not None or chunk.get("object") == "error":
            return self._fail(f"server error in stream: {_error_text(chunk)}")
        usage = chunk.get("usage")
        if type(usage) is dict:
            completion_tokens = usage.get("completion_tokens")
            if type(completion_tokens) is int and completion_tokens >= 0:
                self.usage_tokens = completion_tokens
        choices = chunk.get("choices")
        if not choices or type(choices) is not list or type(choices[0]) is not dict:
            return EventKind.OTHER
        return self._choice(choices[0], now_ns)

    def finish(self) -> StreamSummary:
        """Ends the stream (the body is exhausted) and returns its summary; later calls return the same."""
        if self._summary is not None:
            return self._summary
        mid_event = self._decoder.finish()
        failure: FailureKind | None = None
        error = self.error
        if error is None and not self.done and self.finish_reason is None:
            error = "truncated: stream ended without [DONE] or a finish_reason"
            if mid_event:
                error += " (cut inside an event)"
        if error is not None:
            failure = FailureKind.TRUNCATED
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
            visible = bool(content and type(content) is str) or bool(reasoning and type(reasoning) is str)
            if tool_calls and type(tool_calls) is list:
                has_output = True
                visible = visible or _tool_call_text(tool_calls)
            if not has_output or (not visible and "role" in delta and not self.token_chunks):
                return EventKind.OTHER
        else:
            text = choice.get("text")
            if type(text) is not str:
                return EventKind.OTHER
            visible = bool(text)
        if not visible and finish_reason is not None:
            return EventKind.OTHER
        self.token_chunks += 1
        self.chunk_times_ns.append(now_ns)
        if not visible:
            return EventKind.TOKENS
        if self.first_token_ns is None:
            self.first_token_ns = now_ns
        return EventKind.TEXT

    def _fail(self, error: str) -> EventKind:
        self.error = _shorten(error, MAX_ERROR_CHARS)
        return EventKind.ERROR


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """A non-streamed response body, read; ``error`` is None exactly when it is a well-formed completion.

    ``usage_tokens`` is the server's count; ``estimated_tokens`` counts whitespace-separated words of the
    generated content and reasoning, a rough stand-in (usually an undercount) for servers that report no
    usage. :attr:`output_tokens` and :attr:`token_source` pick between them as an ``Attempt`` wants them.
    """

    text: str
    finish_reason: str | None
    usage_tokens: int | None
    estimated_tokens: int
    error: str | None = None

    @property
    def output_tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.estimated_tokens

    @property
    def token_source(self) -> TokenSource:
        if self.usage_tokens is not None:
            return TokenSource.USAGE
        return TokenSource.NONE if self.error is not None else TokenSource.ESTIMATED


def parse_completion(body: bytes) -> Completion:
    """Reads a non-streamed chat (``choices[0].message.content``) or completions (``choices[0].text``) body.

    Never raises: a body that is not a completion comes back with ``error`` set and no tokens.
    """
    try:
        document = json.loads(body)
    except ValueError as exc:
        return _bad_completion(f"malformed response: {exc.args[0]} in {_excerpt(_decode(body))}")
    if type(document) is not dict:
        return _bad_completion(f"malformed response: not a JSON object: {_excerpt(_decode(body))}")
    if document.get("error") is not None or document.get("object") == "error":
        return _bad_completion(_shorten(f"server error: {_error_text(document)}", MAX_ERROR_CHARS))
    choices = document.get("choices")
    if not choices or type(choices) is not list or type(choices[0]) is not dict:
        return _bad_completion("malformed response: no choices")
    choice: dict[str, Any] = choices[0]
    message = choice.get("message")
    if type(message) is dict:
        content = message.get("content")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
    else:
        content, reasoning = choice.get("text"), None
    text = content if type(content) is str else ""
    words = len(text.split()) + (len(reasoning.split()) if type(reasoning) is str else 0)
    finish_reason = choice.get("finish_reason")
    usage = document.get("usage")
    usage_tokens = usage.get("completion_tokens") if type(usage) is dict else None
    return Completion(
        text=text,
        finish_reason=None if finish_reason is None else str(finish_reason),
        usage_tokens=usage_tokens if type(usage_tokens) is int and usage_tokens >= 0 else None,
        estimated_tokens=words,
    )


def error_message(body: bytes, *, limit: int = MAX_ERROR_CHARS) -> str | None:
    """The message of an error response body, at most ``limit`` characters; None for an empty body.

    Knows ``{"error": {"message": ...}}`` (OpenAI, vLLM, llama.cpp), ``{"error": "..."}`` (TGI),
    ``{"object": "error", "message": ...}`` (older vLLM), ``{"message": ...}`` and ``{"detail": ...}``
    (FastAPI); any other body (JSON or not, HTML included) comes back as its text, whitespace collapsed.
    """
    text = _decode(body)
    if not text.strip():
        return None
    return _shorten(_error_text(_loads_or_text(text)), limit)


def _error_text(document: object) -> str:
    """The human part of an error document: its message where one is found, else the document."""
    if isinstance(document, dict):
        for key in ("error", "message", "detail"):
            value = document.get(key)
            if isinstance(value, dict) and isinstance(value.get("message"), str):
                return str(value["message"])
            if isinstance(value, str) and value:
                return value
        return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    if isinstance(document, str):
        return document
    return json.dumps(document, ensure_ascii=False)


def _tool_call_text(tool_calls: list[Any]) -> bool:
    for call in tool_calls:
        function = call.get("function") if type(call) is dict else None
        if type(function) is dict and (function.get("name") or function.get("arguments")):
            return True
    return False


def _loads_or_text(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _decode(body: bytes) -> str:
    return body.decode("utf-8", "replace")


def _excerpt(text: str) -> str:
    return repr(_shorten(text, _EXCERPT_CHARS))


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bad_completion(error: str) -> Completion:
    return Completion(text="", finish_reason=None, usage_tokens=None, estimated_tokens=0, error=error)
