"""The simulated target's HTTP API over a real loopback socket: OpenAI shapes, errors, and endpoints."""

from __future__ import annotations

import io
import re

import pytest

from cliffwatch.domain.scenario.target_model import TargetModel

FAST = TargetModel(model="sim", max_batch=8, decode_base_ms=1.0, decode_per_seq_ms=0.1, prefill_base_ms=0.5)
CHAT = {"model": "sim", "messages": [{"role": "user", "content": "say something nice"}]}


def error_fields(body: object) -> dict[str, object]:
    assert isinstance(body, dict)
    assert set(body) == {"error"}
    error = body["error"]
    assert isinstance(error, dict)
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


async def test_a_chat_stream_is_role_chunk_then_one_chunk_per_token_then_length_then_done(start_target) -> None:
    target = await start_target(FAST)
    result = await target.stream("/v1/chat/completions", {**CHAT, "max_tokens": 12})
    assert result.status == 200
    assert result.events[-1] == "[DONE]"
    chunks = result.chunks
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    token_chunks = chunks[1:-1]
    assert len(token_chunks) == 12
    assert all(set(c["choices"][0]["delta"]) == {"content"} for c in token_chunks)
    assert all(c["choices"][0]["delta"]["content"].endswith(" ") for c in token_chunks)
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert re.fullmatch(r"chatcmpl-\d+", chunks[0]["id"])
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "sim" for c in chunks)
    assert not any("usage" in c for c in chunks)


async def test_a_chat_stream_ends_with_a_usage_chunk_only_when_asked(start_target) -> None:
    target = await start_target(FAST)
    body = {**CHAT, "max_tokens": 5, "stream_options": {"include_usage": True}}
    result = await target.stream("/v1/chat/completions", body)
    *_, last_choice, usage_chunk, done = result.events
    assert done == "[DONE]"
    assert last_choice["choices"][0]["finish_reason"] == "length"
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    without = await target.stream("/v1/chat/completions", {**CHAT, "max_tokens": 5})
    assert all(c.get("usage") is None for c in without.chunks)


async def test_a_completions_stream_sends_text_per_token_and_a_final_finish_reason(start_target) -> None:
    target = await start_target(FAST)
    result = await target.stream("/v1/completions", {"model": "sim", "prompt": "once upon", "max_tokens": 9})
    assert result.events[-1] == "[DONE]"
    chunks = result.chunks
    assert len(chunks) == 10
    assert all(c["object"] == "text_completion" and c["id"].startswith("cmpl-") for c in chunks)
    assert all(c["choices"][0]["text"] and c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["text"] == ""
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**CHAT, "max_tokens": 17}),
        ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 17}),
        ("/v1/completions", {"model": "sim", "prompt": ["say", "something nice"], "max_tokens": 17}),
    ],
)
async def test_a_whole_response_has_exactly_max_tokens_and_usage(start_target, path: str, body: dict) -> None:
    target = await start_target(FAST)
    response = await target.client.post(path, json=body)
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("application/json")
    payload = await response.json()
    choice = payload["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    assert len(text.split()) == 17
    assert choice["finish_reason"] == "length"
    assert payload["usage"] == {"prompt_tokens": 3, "completion_tokens": 17, "total_tokens": 20}


async def test_streamed_text_matches_max_tokens_and_the_default_applies(start_target) -> None:
    target = await start_target(TargetModel(model="sim", decode_base_ms=1.0, default_max_tokens=6))
    result = await target.stream("/v1/chat/completions", CHAT)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in result.chunks)
    assert len(text.split()) == 6


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"model": "sim", "messages": []}, "messages"),
        ("/v1/chat/completions", {**CHAT, "max_tokens": 0}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "max_tokens": "ten"}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "stream": "true"}, "stream"),
        ("/v1/completions", {"model": "sim", "prompt": {"text": "x"}}, "prompt"),
        ("/v1/completions", {"model": "sim", "prompt": "w " * 20}, "prompt"),
    ],
)
async def test_invalid_requests_get_400_with_an_openai_error_body(
    start_target, path: str, body: dict, param: str
) -> None:
    target = await start_target(TargetModel(model="sim", max_prompt_tokens=10))
    response = await target.client.post(path, json=body)
    assert response.status == 400
    error = error_fields(await response.json())
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


async def test_invalid_json_and_oversized_bodies_are_refused_and_counted(start_target) -> None:
    target = await start_target(FAST)
    bad = await target.client.post("/v1/completions", data=b'{"prompt": ', headers={"Content-Type": "application/json"})
    assert bad.status == 400
    error_fields(await bad.json())
    huge = await target.client.post("/v1/completions", data=io.BytesIO(b"x" * (1024 * 1024 + 1)))
    assert huge.status == 413
    assert error_fields(await huge.json())["code"] == "request_too_large"
    wrong_model = await target.client.post("/v1/chat/completions", json={**CHAT, "model": "gpt-4o"})
    assert wrong_model.status == 404
    assert error_fields(await wrong_model.json())["code"] == "model_not_found"
    metrics = await target.metrics()
    assert metrics['cliffwatch_target_requests_total{result="bad_request"}'] == 3
    assert metrics["cliffwatch_target_steps_total"] == 0


async def test_unknown_paths_and_methods_get_json_errors(start_target) -> None:
    target = await start_target(FAST)
    missing = await target.client.get("/v1/embeddings")
    assert missing.status == 404
    error_fields(await missing.json())
    wrong_method = await target.client.get("/v1/chat/completions")
    assert wrong_method.status == 405
    assert wrong_method.headers["Allow"] == "POST"
    error_fields(await wrong_method.json())


async def test_models_lists_the_served_model_and_health_is_ok(start_target) -> None:
    target = await start_target(FAST)
    models = await target.client.get("/v1/models")
    assert models.status == 200
    listing = await models.json()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["sim"]
    assert listing["data"][0]["object"] == "model"
    health = await target.client.get("/health")
    assert health.status == 200
    assert (await health.json())["status"] == "ok"


async def test_metrics_is_prometheus_text_with_every_counter_and_gauge(start_target) -> None:
    target = await start_target(FAST)
    await target.stream("/v1/completions", {"prompt": "a b c d", "max_tokens": 4})
    response = await target.client.get("/metrics")
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = await response.text()
    for name in ("waiting_requests", "running_requests", "max_batch"):
        assert f"# TYPE cliffwatch_target_{name} gauge" in text
    for name in ("requests_total", "prompt_tokens_total", "generation_tokens_total", "steps_total"):
        assert f"# TYPE cliffwatch_target_{name} counter" in text
        assert f"# HELP cliffwatch_target_{name} " in text
    metrics = await target.metrics()  # asserts every non-comment line is `name{labels} value`
    assert metrics["cliffwatch_target_max_batch"] == 8
    assert metrics['cliffwatch_target_requests_total{result="completed"}'] == 1
    assert metrics["cliffwatch_target_prompt_tokens_total"] == 4
    assert metrics["cliffwatch_target_generation_tokens_total"] == 4
    assert metrics["cliffwatch_target_steps_total"] == 4
    assert metrics["cliffwatch_target_running_requests"] == 0


async def test_the_same_seed_gives_the_same_text_for_the_same_request_order(start_target) -> None:
    async def texts(seed: int) -> list[str]:
        target = await start_target(TargetModel(model="sim", decode_base_ms=1.0, seed=seed))
        out = []
        for prompt in ("first", "second", "third"):
            response = await target.client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8})
            out.append((await response.json())["choices"][0]["text"])
        return out

    first = await texts(42)
    assert await texts(42) == first
    assert await texts(43) != first
    assert len(set(first)) == 3
