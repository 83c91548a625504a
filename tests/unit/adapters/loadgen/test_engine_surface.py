"""One slot's context as an engine reports it: llama.cpp's /props first, else vLLM's /v1/models, and a
gateway's list of several models never taken for the one asked about."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.adapters.loadgen.engine_surface import context_tokens, refused_for_context


async def context_of(props: Any, models: Any, model: str | None = "m") -> int | None:
    def answering(document: Any) -> Any:
        async def handler(request: web.Request) -> web.Response:
            return web.json_response(document)

        return handler

    app = web.Application()
    if props is not None:
        app.router.add_get("/props", answering(props))
    if models is not None:
        app.router.add_get("/v1/models", answering(models))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            return await context_tokens(session, str(server.make_url("")).rstrip("/"), {}, model)
    finally:
        await server.close()


async def test_llama_cpps_props_give_one_slots_context() -> None:
    assert await context_of({"default_generation_settings": {"n_ctx": 1024}, "total_slots": 2}, None) == 1024


@pytest.mark.parametrize(
    ("cards", "model", "expected"),
    [
        ([{"id": "m", "max_model_len": 4096}, {"id": "other", "max_model_len": 32768}], "m", 4096),
        ([{"id": "only", "max_model_len": 8192}], "m", 8192),  # one model served: that one
        ([{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": 32768}], "m", None),
        ([{"id": "m"}], "m", None),  # an OpenAI-like list without the field
    ],
)
async def test_vllms_model_list_gives_the_asked_models_length(cards: Any, model: str, expected: int | None) -> None:
    assert await context_of(None, {"object": "list", "data": cards}, model) == expected


def test_llama_cpps_refusal_over_the_context_still_says_the_prompts_count() -> None:
    body = (b'{"error": {"code": 400, "message": "request (1900 tokens) exceeds the available context size", '
            b'"type": "exceed_context_size_error", "n_prompt_tokens": 1900, "n_ctx": 1024}}')  # fmt: skip
    assert refused_for_context(400, body) == (1900, 1024)
    assert refused_for_context(400, b'{"error": {"type": "invalid_request_error"}}') is None
    assert refused_for_context(503, body) is None
