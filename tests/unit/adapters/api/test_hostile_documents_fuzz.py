"""Fuzzing the service's document entry points (hypothesis, bounded to a few seconds): hostile scenario
documents sent to the API (validate, register, run) and pasted into the dashboard are each answered with a
documented 2xx or 4xx (never a 5xx, every answer checked against the OpenAPI document), with the event loop
never blocked over 100 ms and ``/healthz`` answering within 100 ms all along."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
from api_harness import Api, build_parts, make_settings, serve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ui_harness import serve_ui

from cliffwatch.domain.service.runs import TokenRole
from document_strategies import hostile_json_bodies, hostile_texts
from loop_watch import frozen_heap, slowest_answer_while, watch_loop

MAX_BLOCK_MS = 100
FUZZ = settings(max_examples=120, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
ENDPOINTS = [
    ("POST", "/api/v1/scenarios/validate", TokenRole.VIEWER, "{}"),
    ("PUT", "/api/v1/scenarios/fuzz", TokenRole.ADMIN, "{}"),
    ("POST", "/api/v1/runs", TokenRole.OPERATOR, '{{"document": {}}}'),
]


@pytest.fixture(autouse=True)
def _service_heap() -> Iterator[None]:
    with frozen_heap():
        yield


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for the whole test: the server lives across hypothesis's examples."""
    with asyncio.Runner() as loop:
        yield loop


async def answered(api_client: Any, request: Any) -> tuple[Any, float, float]:
    """``request``'s answer, the longest loop block while it was served, and the slowest /healthz meanwhile."""
    async with watch_loop() as watch:
        reply, slowest = await slowest_answer_while(api_client, "/healthz", request)
    return reply, watch.longest_ms, slowest


def test_hostile_documents_sent_to_the_api_get_a_4xx_or_their_answer_without_blocking(
    runner: asyncio.Runner,
) -> None:
    """Validate, register and run requests carrying hostile JSON scenario documents are answered with a
    documented status below 500, the loop never blocked over 100 ms."""
    stack = AsyncExitStack()
    api_settings = make_settings()
    api: Api = runner.run(stack.enter_async_context(serve(runner.run(build_parts(api_settings)), api_settings)))

    @FUZZ
    @given(hostile_json_bodies(), st.sampled_from(ENDPOINTS))
    def check(document: str, endpoint: tuple[str, str, TokenRole, str]) -> None:
        method, path, role, envelope = endpoint
        body = document if envelope == "{}" else envelope.format(document)
        call = api.call(method, path, role=role, data=body.encode("utf-8", "surrogatepass"),
                        headers={"Content-Type": "application/json"})  # fmt: skip
        reply, block_ms, health_ms = runner.run(answered(api.client, call))
        assert reply.status < 500, reply.body
        assert block_ms < MAX_BLOCK_MS, (path, block_ms)
        assert health_ms < MAX_BLOCK_MS, (path, health_ms)

    try:
        check()
    finally:
        runner.run(stack.aclose())


def test_hostile_documents_pasted_into_the_dashboard_get_a_verdict_without_blocking(runner: asyncio.Runner) -> None:
    """Hostile YAML and JSON pasted by a viewer always get the validation page (200, or 422 when over the
    size limit) with the loop never blocked over 100 ms."""
    served = serve_ui()
    ui = runner.run(anext(served))
    cookie, csrf = runner.run(ui.login(TokenRole.VIEWER))

    @FUZZ
    @given(hostile_texts())
    def check(text: str) -> None:
        pasted = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")  # what a browser can send
        call = ui.post("/ui/scenarios/validate", {"csrf": csrf, "document": pasted}, cookie)
        (status, _, page, _), block_ms, health_ms = runner.run(answered(ui.client, call))
        assert status in (200, 422), page
        assert 'id="validation"' in page
        assert block_ms < MAX_BLOCK_MS, block_ms
        assert health_ms < MAX_BLOCK_MS, health_ms

    try:
        check()
    finally:
        runner.run(served.aclose())
