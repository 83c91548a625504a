"""What a non-streamed OpenAI-compatible answer and an error body say, and the text helpers both readers share.

:func:`parse_completion` reads a whole ``/v1/chat/completions`` or ``/v1/completions`` body; :func:`error_message`
the message of an error body. The streamed side is ``openai_stream``; together they own the OpenAI wire format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cliffwatch.domain.outcomes import TokenSource
from cliffwatch.domain.scenario.retry import FailureKind

MAX_ERROR_CHARS = 300  # error texts kept on an attempt; bodies can be whole HTML pages
_EXCERPT_CHARS = 80  # of a malformed payload, quoted in its error


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """A non-streamed response body, read; ``error`` is None exactly when it is a well-formed completion, and
    ``failure`` then says how it was not: TRUNCATED for a body that is not the format, INCOMPLETE for an
    error document or a completion without choices (an HTTP 200 that carries no answer). ``empty``: the
    answer has no content, reasoning or tool call.

    ``usage_tokens`` is the server's count; ``estimated_tokens`` counts whitespace-separated words of the
    generated content and reasoning, a rough stand-in (usually an undercount) for servers that report no
    usage. :attr:`output_tokens` and :attr:`token_source` pick between them as an ``Attempt`` wants them.
    """

    text: str
    finish_reason: str | None
    usage_tokens: int | None
    estimated_tokens: int
    error: str | None = None
    failure: FailureKind | None = None
    empty: bool = False
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    prompt_tokens: int | None = None  # usage.prompt_tokens

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
        return _bad_completion(f"malformed response: {exc.args[0]} in {excerpt(_decode(body))}")
    if type(document) is not dict:
        return _bad_completion(f"malformed response: not a JSON object: {excerpt(_decode(body))}")
    if document.get("error") is not None or document.get("object") == "error":
        error = shorten(f"server error: {error_text(document)}", MAX_ERROR_CHARS)
        return _bad_completion(error, FailureKind.INCOMPLETE)
    choices = document.get("choices")
    if not choices or type(choices) is not list or type(choices[0]) is not dict:
        return _bad_completion("incomplete: no choices", FailureKind.INCOMPLETE)
    choice: dict[str, Any] = choices[0]
    message = choice.get("message")
    tool_calls: object = None
    if type(message) is dict:
        content = message.get("content")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        tool_calls = message.get("tool_calls")
    else:
        content, reasoning = choice.get("text"), None
    text = content if type(content) is str else ""
    words = len(text.split()) + (len(reasoning.split()) if type(reasoning) is str else 0)
    called = bool(tool_calls) and type(tool_calls) is list and tool_call_text(tool_calls)
    finish_reason = choice.get("finish_reason")
    usage = document.get("usage")
    usage_tokens = usage.get("completion_tokens") if type(usage) is dict else None
    details = usage.get("completion_tokens_details") if type(usage) is dict else None
    reasoning_tokens = details.get("reasoning_tokens") if type(details) is dict else None
    prompt_tokens = usage.get("prompt_tokens") if type(usage) is dict else None
    return Completion(
        text=text,
        finish_reason=None if finish_reason is None else str(finish_reason),
        usage_tokens=usage_tokens if type(usage_tokens) is int and usage_tokens >= 0 else None,
        estimated_tokens=words,
        empty=not text and not (type(reasoning) is str and reasoning) and not called,
        reasoning_tokens=reasoning_tokens if type(reasoning_tokens) is int and reasoning_tokens >= 0 else None,
        prompt_tokens=prompt_tokens if type(prompt_tokens) is int and prompt_tokens >= 0 else None,
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
    return shorten(error_text(loads_or_text(text)), limit)


def error_text(document: object) -> str:
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


def tool_call_text(tool_calls: list[Any]) -> bool:
    for call in tool_calls:
        function = call.get("function") if type(call) is dict else None
        if type(function) is dict and (function.get("name") or function.get("arguments")):
            return True
    return False


def loads_or_text(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _decode(body: bytes) -> str:
    return body.decode("utf-8", "replace")


def excerpt(text: str) -> str:
    return repr(shorten(text, _EXCERPT_CHARS))


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bad_completion(error: str, failure: FailureKind = FailureKind.TRUNCATED) -> Completion:
    return Completion(
        text="", finish_reason=None, usage_tokens=None, estimated_tokens=0, error=error, failure=failure, empty=True
    )
