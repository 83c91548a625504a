"""Request validation and response shapes of the simulated target's OpenAI wire format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cliffwatch.domain.scenario.target_model import Scheduling, TargetModel
from cliffwatch.simulator.openai_format import (
    DONE_EVENT,
    ChunkWriter,
    GenerationRequest,
    Kind,
    SimulatedApiError,
    completion_body,
    parse_generation,
    parse_json_body,
)

MODEL = TargetModel(model="sim", max_prompt_tokens=10, default_max_tokens=7)


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "sim", "messages": [{"role": "user", "content": "hello there"}], **fields}


def events(data: bytes) -> list[Any]:
    """The JSON payloads of an SSE byte string ([DONE] kept as the string)."""
    text = data.decode()
    assert text.endswith("\n\n")
    out: list[Any] = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: ")
        payload = block.removeprefix("data: ")
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_chat_prompt_length_counts_words_in_every_message_and_text_part() -> None:
    body = chat(
        messages=[
            {"role": "system", "content": "be  brief\n please"},
            {"role": "assistant", "content": None},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "one two"},
                    {"type": "image_url", "image_url": {"url": "data:,"}},
                ],
            },
        ]
    )
    parsed = parse_generation(body, Kind.CHAT, MODEL)
    assert parsed.prompt_tokens == 5
    assert parsed.max_tokens == 7
    assert not parsed.stream
    assert not parsed.include_usage


def test_chat_prefers_max_completion_tokens_over_max_tokens() -> None:
    assert parse_generation(chat(max_tokens=3, max_completion_tokens=4), Kind.CHAT, MODEL).max_tokens == 4
    assert parse_generation(chat(max_tokens=3), Kind.CHAT, MODEL).max_tokens == 3


@pytest.mark.parametrize(("prompt", "tokens"), [("a b  c", 3), (["a b", "c d e"], 5), ("", 0)])
def test_completion_prompt_length_counts_words_of_a_string_or_list_of_strings(prompt: object, tokens: int) -> None:
    parsed = parse_generation({"prompt": prompt, "max_tokens": 2}, Kind.COMPLETION, MODEL)
    assert (parsed.prompt_tokens, parsed.max_tokens) == (tokens, 2)


def test_a_missing_model_name_means_the_served_model() -> None:
    assert parse_generation({"prompt": "x"}, Kind.COMPLETION, MODEL).prompt_tokens == 1


def test_include_usage_is_read_from_stream_options() -> None:
    parsed = parse_generation(chat(stream=True, stream_options={"include_usage": True}), Kind.CHAT, MODEL)
    assert parsed.stream
    assert parsed.include_usage


@pytest.mark.parametrize(
    ("body", "kind", "param"),
    [
        (chat(messages=[]), Kind.CHAT, "messages"),
        (chat(messages="hi"), Kind.CHAT, "messages"),
        (chat(messages=["hi"]), Kind.CHAT, "messages[0]"),
        (chat(messages=[{"content": "hi"}]), Kind.CHAT, "messages[0].role"),
        (chat(messages=[{"role": "user", "content": 5}]), Kind.CHAT, "messages[0].content"),
        (chat(messages=[{"role": "user", "content": [{"text": "x"}]}]), Kind.CHAT, "messages[0].content[0]"),
        (
            chat(messages=[{"role": "user", "content": [{"type": "text", "text": 1}]}]),
            Kind.CHAT,
            "messages[0].content[0].text",
        ),
        (chat(max_tokens=0), Kind.CHAT, "max_tokens"),
        (chat(max_tokens="5"), Kind.CHAT, "max_tokens"),
        (chat(max_tokens=True), Kind.CHAT, "max_tokens"),
        (chat(max_tokens=2.0), Kind.CHAT, "max_tokens"),
        (chat(max_completion_tokens=-1), Kind.CHAT, "max_completion_tokens"),
        (chat(stream="yes"), Kind.CHAT, "stream"),
        (chat(stream_options={"include_usage": True}), Kind.CHAT, "stream_options"),
        (chat(stream=True, stream_options=[]), Kind.CHAT, "stream_options"),
        (chat(stream=True, stream_options={"include_usage": 1}), Kind.CHAT, "stream_options.include_usage"),
        (chat(n=2), Kind.CHAT, "n"),
        (chat(model=3), Kind.CHAT, "model"),
        (chat(messages=[{"role": "user", "content": "w " * 11}]), Kind.CHAT, "messages"),
        ({"prompt": 5}, Kind.COMPLETION, "prompt"),
        ({"prompt": [1, 2]}, Kind.COMPLETION, "prompt"),
        ({"prompt": []}, Kind.COMPLETION, "prompt"),
        ({"prompt": ["w " * 6, "w " * 5]}, Kind.COMPLETION, "prompt"),
    ],
)
def test_invalid_requests_are_refused_with_400_naming_the_parameter(
    body: dict[str, Any], kind: Kind, param: str
) -> None:
    with pytest.raises(SimulatedApiError) as refused:
        parse_generation(body, kind, MODEL)
    assert refused.value.status == 400
    error = refused.value.body()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert error["message"]


def test_a_prompt_longer_than_the_limit_is_a_context_length_error() -> None:
    with pytest.raises(SimulatedApiError) as refused:
        parse_generation({"prompt": "w " * 11}, Kind.COMPLETION, MODEL)
    assert refused.value.code == "context_length_exceeded"


def test_another_model_name_is_a_404_model_not_found() -> None:
    with pytest.raises(SimulatedApiError) as refused:
        parse_generation(chat(model="gpt-4"), Kind.CHAT, MODEL)
    assert refused.value.status == 404
    assert refused.value.body()["error"]["code"] == "model_not_found"
    assert refused.value.body()["error"]["param"] == "model"


@pytest.mark.parametrize("raw", [b"{nope", b"[1, 2]", b'"text"', b"\xff\xfe\x00", b"[" * 100_000, b""])
def test_a_body_that_is_not_a_json_object_is_a_400(raw: bytes) -> None:
    with pytest.raises(SimulatedApiError) as refused:
        parse_json_body(raw)
    assert refused.value.status == 400


def request(kind: Kind, *, include_usage: bool = False) -> GenerationRequest:
    return GenerationRequest(kind=kind, prompt_tokens=4, max_tokens=3, stream=True, include_usage=include_usage)


def test_a_chat_stream_opens_with_the_role_sends_one_chunk_per_token_and_closes_with_length() -> None:
    writer = ChunkWriter(request(Kind.CHAT), request_id=9, created=1700, model="sim")
    data = writer.opening() + writer.tokens(["a ", 'q"\\ ']) + writer.tokens(["é "]) + writer.closing(3)
    parsed = events(data)
    assert parsed[-1] == "[DONE]"
    chunks = parsed[:-1]
    for chunk in chunks:
        assert chunk["id"] == "chatcmpl-9"
        assert chunk["object"] == "chat.completion.chunk"
        assert (chunk["created"], chunk["model"]) == (1700, "sim")
        assert "usage" not in chunk
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "a "},
        {"content": 'q"\\ '},
        {"content": "é "},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, None, "length"]
    assert all(c["choices"][0]["logprobs"] is None and c["choices"][0]["index"] == 0 for c in chunks)


def test_with_include_usage_a_usage_chunk_with_empty_choices_precedes_done() -> None:
    writer = ChunkWriter(request(Kind.CHAT, include_usage=True), request_id=1, created=0, model="sim")
    parsed = events(writer.opening() + writer.tokens(["a "]) + writer.closing(1))
    *chunks, usage_chunk, done = parsed
    assert done == "[DONE]"
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}
    # As OpenAI does, every other chunk then carries "usage": null.
    assert all("usage" in c and c["usage"] is None for c in chunks)


def test_a_completions_stream_sends_text_per_token_and_a_final_chunk_without_a_role() -> None:
    writer = ChunkWriter(request(Kind.COMPLETION), request_id=5, created=2, model="sim")
    assert writer.opening() == b""
    data = writer.tokens(["x ", "y "]) + writer.closing(2)
    assert data.endswith(DONE_EVENT)
    chunks = events(data)[:-1]
    assert [c["id"] for c in chunks] == ["cmpl-5"] * 3
    assert [c["object"] for c in chunks] == ["text_completion"] * 3
    assert [c["choices"][0]["text"] for c in chunks] == ["x ", "y ", ""]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]


@pytest.mark.parametrize("kind", list(Kind))
def test_a_whole_response_carries_the_text_usage_and_finish_reason(kind: Kind) -> None:
    parsed = GenerationRequest(kind=kind, prompt_tokens=4, max_tokens=2, stream=False, include_usage=False)
    body = completion_body(parsed, request_id=3, created=10, model="sim", text="a b ", completion_tokens=2)
    choice = body["choices"][0]
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert choice["finish_reason"] == "length"
    if kind is Kind.CHAT:
        assert (body["id"], body["object"]) == ("chatcmpl-3", "chat.completion")
        assert choice["message"] == {"role": "assistant", "content": "a b "}
    else:
        assert (body["id"], body["object"]) == ("cmpl-3", "text_completion")
        assert choice["text"] == "a b "


def test_priority_and_user_are_read_and_a_priority_needs_priority_scheduling_as_in_vllm() -> None:
    prioritised = TargetModel(model="sim", scheduling=Scheduling.PRIORITY)
    parsed = parse_generation(chat(priority=-3, user="tenant-a"), Kind.CHAT, prioritised)
    assert (parsed.priority, parsed.tenant) == (-3, "tenant-a")
    assert parse_generation(chat(), Kind.CHAT, MODEL).priority == 0
    with pytest.raises(SimulatedApiError) as refused:
        parse_generation(chat(priority=2), Kind.CHAT, MODEL)  # a first-come server: as vLLM's, a 400
    assert (refused.value.status, refused.value.param) == (400, "priority")
    for bad in ({"priority": "high"}, {"priority": True}, {"user": 7}):
        with pytest.raises(SimulatedApiError):
            parse_generation(chat(**bad), Kind.CHAT, prioritised)
