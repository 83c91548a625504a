"""The OpenAI wire format as the simulated target speaks it: request validation and response shapes.

Requests are parsed once into a :class:`GenerationRequest` (or an :class:`SimulatedApiError` carrying the
OpenAI-style error body); responses, stream chunks and error bodies are built here so ``server.py`` only
moves bytes. Shapes follow real servers (see ``/work/shared/fixtures/sse``): a chat stream opens with a
role chunk, sends one chunk per token, closes with an empty delta and ``finish_reason``, then the usage
chunk when ``stream_options.include_usage`` asked for it, then ``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.scenario.target_model import Scheduling, TargetModel
from cliffwatch.simulator.prefix_cache import block_hashes

DONE_EVENT = b"data: [DONE]\n\n"
FINISH_REASON = "length"  # every sequence generates exactly max_tokens, as with ignore_eos


class Kind(StrEnum):
    CHAT = "chat"
    COMPLETION = "completion"


class SimulatedApiError(CliffwatchError):
    """A request the server refuses, with the HTTP status and the fields of the OpenAI error body."""

    def __init__(
        self, status: int, message: str, *, type_: str, param: str | None = None, code: str | None = None
    ) -> None:
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        super().__init__(f"HTTP {status}: {message}")

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type_=self.type, param=self.param, code=self.code)


def error_body(message: str, *, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _invalid(message: str, param: str | None, code: str | None = None) -> SimulatedApiError:
    return SimulatedApiError(400, message, type_="invalid_request_error", param=param, code=code)


@dataclass(frozen=True, kw_only=True)
class GenerationRequest:
    """What the engine needs from a valid request, and how the response must be shaped."""

    kind: Kind
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    priority: int = 0  # vLLM's field: lower is sooner under priority scheduling
    tenant: str = ""  # the OpenAI "user": whose turn it is under fair scheduling
    blocks: tuple[int, ...] = ()  # the prompt's chained block hashes, for the prefix cache (prefix_cache.py)
    tail: tuple[str, ...] = ()  # the prompt's words after its last full block (its answer's blocks chain on)


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; raises ``SimulatedApiError`` (400) for anything else."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _invalid(f"We could not parse the JSON body of your request: {exc}", None) from exc
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.", None)
    return body


def parse_generation(body: Mapping[str, Any], kind: Kind, model: TargetModel) -> GenerationRequest:
    """Validates a chat or completions request; raises ``SimulatedApiError`` (400, or 404 for another model)."""
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise _invalid("'model' must be a string.", "model")
    if name is not None and name != model.model:
        raise SimulatedApiError(
            404,
            f"The model `{name}` does not exist; this server serves `{model.model}`.",
            type_="invalid_request_error",
            param="model",
            code="model_not_found",
        )
    if kind is Kind.CHAT:
        words = _chat_prompt_words(body.get("messages"))
        max_tokens = _optional_positive_int(body, "max_completion_tokens")
        if max_tokens is None:
            max_tokens = _optional_positive_int(body, "max_tokens")
    else:
        words = _completion_prompt_words(body.get("prompt"))
        max_tokens = _optional_positive_int(body, "max_tokens")
    prompt_tokens = len(words)
    blocks = block_hashes(words, model.block_tokens) if model.prefix_caching else ()
    if prompt_tokens > model.max_prompt_tokens:
        raise _invalid(
            f"This model's maximum prompt length is {model.max_prompt_tokens} tokens, "
            f"but the prompt has {prompt_tokens} tokens.",
            "messages" if kind is Kind.CHAT else "prompt",
            "context_length_exceeded",
        )
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise _invalid("Only n=1 is supported.", "n")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _invalid("'stream' must be a boolean.", "stream")
    priority = body.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) >= 2**63:
        raise _invalid("'priority' must be an integer.", "priority")
    if priority != 0 and model.scheduling is not Scheduling.PRIORITY:
        # As vLLM answers a priority its scheduler does not use (entrypoints/openai/.../protocol.py, "priority").
        raise _invalid("Any priority other than 0 needs priority scheduling, which this server does not use.",
                       "priority")  # fmt: skip
    user = body.get("user", "")
    if not isinstance(user, str):
        raise _invalid("'user' must be a string.", "user")
    return GenerationRequest(
        kind=kind,
        prompt_tokens=prompt_tokens,
        max_tokens=model.default_max_tokens if max_tokens is None else max_tokens,
        stream=stream,
        include_usage=_include_usage(body.get("stream_options"), stream),
        priority=priority,
        tenant=user[:256],
        blocks=blocks,
        tail=tuple(words[len(blocks) * model.block_tokens :]) if model.prefix_caching else (),
    )


def _chat_prompt_words(messages: object) -> list[str]:
    """The prompt's tokens as the simulator counts them: every message's words, in order."""
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty array.", "messages")
    total: list[str] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _invalid(f"'{where}' must be an object.", where)
        if not isinstance(message.get("role"), str):
            raise _invalid(f"'{where}.role' must be a string.", f"{where}.role")
        content = message.get("content")
        if content is None or isinstance(content, str):
            total += (content or "").split()
        elif isinstance(content, list):
            total += _content_parts_words(content, f"{where}.content")
        else:
            raise _invalid(f"'{where}.content' must be a string or an array of parts.", f"{where}.content")
    return total


def _content_parts_words(parts: list[Any], where: str) -> list[str]:
    total: list[str] = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise _invalid(f"'{where}[{j}]' must be an object with a string 'type'.", f"{where}[{j}]")
        if part["type"] != "text":
            continue  # images and audio cost nothing in a text-only simulation
        text = part.get("text")
        if not isinstance(text, str):
            raise _invalid(f"'{where}[{j}].text' must be a string.", f"{where}[{j}].text")
        total += text.split()
    return total


def _completion_prompt_words(prompt: object) -> list[str]:
    if isinstance(prompt, str):
        return prompt.split()
    # A list of strings is taken as one prompt: the simulator always answers with a single choice.
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return [word for p in prompt for word in p.split()]
    raise _invalid("'prompt' must be a string or a non-empty array of strings.", "prompt")


def _optional_positive_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"'{key}' must be an integer.", key)
    if value < 1:
        raise _invalid(f"'{key}' must be at least 1, got {value}.", key)
    return value


def _include_usage(options: object, stream: bool) -> bool:
    if options is None:
        return False
    if not stream:
        raise _invalid("'stream_options' is only allowed when 'stream' is true.", "stream_options")
    if not isinstance(options, dict):
        raise _invalid("'stream_options' must be an object.", "stream_options")
    include = options.get("include_usage", False)
    if include is None:
        return False
    if not isinstance(include, bool):
        raise _invalid("'stream_options.include_usage' must be a boolean.", "stream_options.include_usage")
    return include


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response_id(kind: Kind, request_id: int) -> str:
    return f"chatcmpl-{request_id}" if kind is Kind.CHAT else f"cmpl-{request_id}"


def completion_body(
    request: GenerationRequest, *, request_id: int, created: int, model: str, text: str, completion_tokens: int
) -> dict[str, Any]:
    """The whole non-streamed response, with ``usage``."""
    choice: dict[str, Any]
    if request.kind is Kind.CHAT:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text}
        obj = "text_completion"
    choice |= {"logprobs": None, "finish_reason": FINISH_REASON}
    return {
        "id": response_id(request.kind, request_id),
        "object": obj,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(request.prompt_tokens, completion_tokens),
    }


def _event(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


class ChunkWriter:
    """Builds the SSE events of one streamed response; token events come from a prebuilt template.

    Only the token text varies between token events, so the rest of the JSON is serialized once: this
    is the server's hot path under load.
    """

    def __init__(self, request: GenerationRequest, *, request_id: int, created: int, model: str) -> None:
        self._request = request
        self._chat = request.kind is Kind.CHAT
        self._head: dict[str, Any] = {
            "id": response_id(request.kind, request_id),
            "object": "chat.completion.chunk" if self._chat else "text_completion",
            "created": created,
            "model": model,
        }
        # OpenAI sends "usage": null on every chunk but the usage chunk when include_usage is set.
        self._tail: dict[str, Any] = {"usage": None} if request.include_usage else {}
        head = json.dumps(self._head, separators=(",", ":"))[:-1]
        field = '"delta":{"content":' if self._chat else '"text":'
        close = "}" if self._chat else ""
        tail = ',"usage":null' if request.include_usage else ""
        self._token_prefix = f'data: {head},"choices":[{{"index":0,{field}'
        self._token_suffix = f'{close},"logprobs":null,"finish_reason":null}}]{tail}}}\n\n'

    def _choice_event(self, choice: dict[str, Any]) -> bytes:
        return _event({**self._head, "choices": [choice], **self._tail})

    def opening(self) -> bytes:
        """The role announcement that opens a chat stream; completions streams have none."""
        if not self._chat:
            return b""
        return self._choice_event(
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        )

    def tokens(self, tokens: Sequence[str]) -> bytes:
        """One event per token."""
        prefix, suffix = self._token_prefix, self._token_suffix
        return "".join(f"{prefix}{json.dumps(token)}{suffix}" for token in tokens).encode()

    def closing(self, completion_tokens: int) -> bytes:
        """The final chunk with ``finish_reason``, the usage chunk if asked for, and ``[DONE]``."""
        body: dict[str, Any] = {"delta": {}} if self._chat else {"text": ""}
        out = self._choice_event({"index": 0, **body, "logprobs": None, "finish_reason": FINISH_REASON})
        if self._request.include_usage:
            out += _event({**self._head, "choices": [], "usage": usage(self._request.prompt_tokens, completion_tokens)})
        return out + DONE_EVENT
