"""Hostile documents sent to the service: the API's JSON bodies and the dashboard's paste box. Each is
answered with a 4xx or its normal answer while the event loop is never blocked over 100 ms (measured by the
``loop_watch`` probe on the test server's own loop), and ``/healthz`` keeps answering meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

import pytest
import yaml
from api_harness import Api, small_scenario
from ui_harness import Ui, serve_ui

from cliffwatch.adapters.documents import SCENARIO_LIMITS
from cliffwatch.domain.service.runs import TokenRole
from loop_watch import frozen_heap, slowest_answer_while, watch_loop

T = TypeVar("T")
MAX_BLOCK_MS = 100
JSON = {"Content-Type": "application/json"}


def alias_bomb(levels: int) -> str:
    """A scenario whose http request body is 9**levels strings as a tree, in about 70 bytes a level."""
    lines = ["x0: &x0 [l, l, l, l, l, l, l, l, l]"]
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join([
        "name: bomb", "slo: {e2e_ms: 1000, timeout_ms: 2000}",
        "target:", "  url: builtin", "  api: http", "  request:", "    body:",
        *(f"      {line}" for line in lines),
        "phases:", "  - {name: a, role: baseline, duration_s: 1, arrival: {process: constant, rate: 1}}", "",
    ])  # fmt: skip


def deep_document(depth: int) -> str:
    """A valid scenario as JSON text whose http request body is lists nested ``depth`` deep."""
    document = small_scenario("deep")
    document["target"] = {"url": "http://127.0.0.1:9", "api": "http", "request": {"body": "@"}}
    return json.dumps(document).replace('"@"', "[" * depth + "]" * depth)


def worst_document(name: str = "worst", *, levels_around: int = 0) -> dict[str, Any]:
    """A valid scenario as large as the limits allow: its request body nested to the depth limit (less the
    ``levels_around`` it will be sent in) and holding long strings, up to the value limit and within the
    API's body size."""
    document = small_scenario(name)
    deep: Any = "end"
    for _ in range(SCENARIO_LIMITS.max_depth - 4 - levels_around):  # the top, target, request and body levels
        deep = [deep]
    room = SCENARIO_LIMITS.max_nodes - 200  # what the rest of the document (and a run's envelope) takes
    document["target"] = {"url": "http://127.0.0.1:9", "api": "http",
                          "request": {"body": {"deep": deep, "texts": ["é" * 45] * (room - 70)}}}  # fmt: skip
    return document


async def healthz_while(client: Any, work: Awaitable[T]) -> tuple[T, float]:
    return await slowest_answer_while(client, "/healthz", work)


@pytest.fixture(autouse=True)
def _service_heap() -> Iterator[None]:
    with frozen_heap():
        yield


@pytest.fixture
async def ui() -> AsyncIterator[Ui]:
    async for served in serve_ui():
        yield served


async def paste(ui: Ui, text: str) -> tuple[int, str]:
    cookie, csrf = await ui.login(TokenRole.VIEWER)
    status, _, page, _ = await ui.post("/ui/scenarios/validate", {"csrf": csrf, "document": text}, cookie)
    return status, page


async def test_an_alias_bomb_pasted_by_a_viewer_is_refused_without_blocking_the_loop(ui: Ui) -> None:
    """A few hundred bytes of nested aliases pasted into the dashboard are one problem on the page, answered
    with the loop never blocked over 100 ms and /healthz answering throughout."""
    bomb = alias_bomb(7)
    assert len(bomb) < 700
    async with watch_loop() as watch:
        (status, page), slowest_health = await healthz_while(ui.client, paste(ui, bomb))
    assert status == 200
    assert "aliases expand to more than 10,000 values" in page
    assert watch.longest_ms < MAX_BLOCK_MS, watch.report()
    assert slowest_health < MAX_BLOCK_MS


async def test_the_worst_paste_within_the_limits_is_validated_without_blocking_the_loop(ui: Ui) -> None:
    """The largest document the paste box takes, as YAML at the depth, value and alias limits, gets its
    verdict with the loop never blocked over 100 ms and /healthz answering throughout."""
    document = worst_document()
    body = document["target"]["request"]["body"]
    body["texts"] = ["y" * 20] * 8_000
    body["one"] = "@one"
    body["refs"] = ["@ref"] * (SCENARIO_LIMITS.max_aliases - 1)
    text = yaml.safe_dump(document, sort_keys=False, width=10_000)
    text = text.replace("one: '@one'", "one: &t " + "x" * 60).replace("'@ref'", "*t")
    assert 200_000 < len(text.encode()) < 256 * 1024
    async with watch_loop() as watch:
        (status, page), slowest_health = await healthz_while(ui.client, paste(ui, text))
    assert status == 200
    assert "Valid: this document is a scenario cliffwatch can run." in page
    assert watch.longest_ms < MAX_BLOCK_MS, watch.report()
    assert slowest_health < MAX_BLOCK_MS


async def test_a_body_nested_deeper_than_validation_can_follow_is_a_400_not_a_500(api: Api) -> None:
    """A scenario whose request body is nested 500 deep (fine for the JSON parser, not for validation and
    hashing) is refused as too complex by every endpoint that takes a document."""
    text = deep_document(500)
    calls = [
        ("POST", "/api/v1/scenarios/validate", TokenRole.VIEWER, text),
        ("PUT", "/api/v1/scenarios/deep", TokenRole.ADMIN, text),
        ("POST", "/api/v1/runs", TokenRole.OPERATOR, '{"document": ' + text + "}"),
    ]
    for method, path, role, body in calls:
        async with watch_loop() as watch:
            reply = await api.call(method, path, role=role, data=body, headers=JSON)
        assert reply.status == 400, reply.body
        assert reply.body["type"].endswith(":body-too-complex")
        assert "nested too deeply (more than 64 levels)" in reply.body["detail"]
        assert watch.longest_ms < MAX_BLOCK_MS, watch.report()


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ("[" + ",".join(["0"] * 300_000) + "]", "has more than 10,000 values"),
        ('{"name": ' + "1" * 5_000 + "}", "a number of more than 400 characters"),
        ('{"name": 1e400}', "too large for a float"),
        ('{"name": "\\ud800"}', "unpaired surrogate"),
        ('{"name": NaN}', "NaN is not a number in JSON"),
    ],
    ids=["many-values", "huge-int", "huge-float", "surrogate", "nan"],
)
async def test_json_outside_the_limits_or_json_itself_is_a_400(api: Api, body: str, detail: str) -> None:
    """Too many values, numbers Python cannot convert or JSON cannot hold, and broken Unicode are clear 400s."""
    async with watch_loop() as watch:
        reply = await api.call("POST", "/api/v1/scenarios/validate", role=TokenRole.VIEWER, data=body, headers=JSON)
    assert reply.status == 400, reply.body
    assert detail in reply.body["detail"]
    assert watch.longest_ms < MAX_BLOCK_MS, watch.report()


async def test_the_worst_document_within_the_limits_is_served_without_blocking_the_loop(api: Api) -> None:
    """The largest document the limits allow is validated, registered, run and shown again, each with the
    loop never blocked over 100 ms and /healthz answering throughout."""
    document = worst_document()
    text = json.dumps(document, ensure_ascii=False)
    assert 800_000 < len(text.encode()) <= SCENARIO_LIMITS.max_bytes
    calls = [
        ("POST", "/api/v1/scenarios/validate", TokenRole.VIEWER, text, 200),
        ("PUT", "/api/v1/scenarios/worst", TokenRole.ADMIN, text, 200),
        # in a run request, the document is one level down: it may nest one level less
        (
            "POST",
            "/api/v1/runs",
            TokenRole.OPERATOR,
            json.dumps({"document": worst_document(levels_around=1)}, ensure_ascii=False),
            202,
        ),
        ("GET", "/api/v1/scenarios/worst", TokenRole.VIEWER, None, 200),
    ]
    for method, path, role, body, status in calls:
        async with watch_loop() as watch:
            reply, slowest_health = await healthz_while(
                api.client, api.call(method, path, role=role, data=body, headers=JSON if body else None)
            )
        assert reply.status == status, (path, reply.body)
        assert watch.longest_ms < MAX_BLOCK_MS, (path, watch.report())
        assert slowest_health < MAX_BLOCK_MS, path
    assert reply.body["document"] == document
