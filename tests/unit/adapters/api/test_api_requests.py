"""Bad input: malformed JSON, wrong media types, wrong types, unknown fields, oversized bodies, unknown
routes and methods. Every refusal is a problem+json naming what was wrong (the harness checks the shape)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from api_harness import Api, build_parts, make_settings, serve

from cliffwatch.domain.service.runs import TokenRole


@pytest.mark.parametrize(
    ("data", "content_type", "status", "kind"),
    [
        (b'{"scenario": ', "application/json", 400, "malformed-json"),
        (b'{"scenario": "burst-storm", "overrides": {"threshold": NaN}}', "application/json", 400, "malformed-json"),
        (b'{"scenario": "\xff"}', "application/json", 400, "malformed-json"),
        (b'{"document": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, "application/json", 400, "body-too-complex"),
        (b"", "application/json", 400, "body-missing"),
        (b'{"scenario": "burst-storm"}', "text/plain", 415, "unsupported-media-type"),
        (b'{"scenario": "burst-storm"}', "application/x-www-form-urlencoded", 415, "unsupported-media-type"),
        (b"[1, 2]", "application/json", 422, "body-invalid"),
    ],
)
async def test_unreadable_bodies_are_refused_before_anything_happens(
    api: Api, data: bytes, content_type: str, status: int, kind: str
) -> None:
    reply = await api.call("POST", "/api/v1/runs", data=data, headers={"Content-Type": content_type})
    assert reply.status == status
    assert reply.body["type"].endswith(f":{kind}")
    assert await api.store.active_runs() == []


async def test_a_json_media_type_with_a_suffix_or_charset_is_accepted(api: Api) -> None:
    headers = {"Content-Type": "application/vnd.cliffwatch+json; charset=utf-8"}
    reply = await api.call("POST", "/api/v1/runs", data=b'{"scenario": "burst-storm"}', headers=headers)
    assert reply.status == 202


@pytest.mark.parametrize(
    ("body", "problems"),
    [
        ({"scenario": 5}, {"scenario": "must be a string, got a number"}),
        ({"scenario": ""}, {"scenario": "must be 1 to 100 characters"}),
        ({"document": "burst-storm"}, {"document": "must be an object, got a string"}),
        ({"scenario": "b", "overrides": {"seed": "7"}}, {"overrides.seed": "must be an integer, got a string"}),
        ({"scenario": "b", "overrides": {"seed": True}}, {"overrides.seed": "must be an integer, got a boolean"}),
        ({"scenario": "b", "overrides": {"seed": -1}}, {"overrides.seed": "must be in [0, 9223372036854775807]"}),
        ({"scenario": "b", "overrides": {"threshold": 101}}, {"overrides.threshold": "must be in [0, 100]"}),
        ({"scenario": "b", "overrides": []}, {"overrides": "must be an object, got an array"}),
        ({"scenario": "b", "overides": {}}, {"overides": "unknown field"}),
        ({"scenario": "b", "overrides": {"target": "builtin"}}, {"overrides.target": "unknown field"}),
        ({}, {"": "give either scenario (a name) or document (a scenario)"}),
        ({"scenario": "burst-storm", "document": {}}, {"": "give either scenario (a name) or document (a scenario)"}),
        (
            {"scenario": 1, "overrides": {"seed": 1.5, "extra": 1}, "when": "now"},
            {"scenario": "must be a string, got a number",
             "overrides.seed": "must be an integer, got a number",
             "overrides.extra": "unknown field", "when": "unknown field"},
        ),
    ],
)  # fmt: skip
async def test_wrong_types_and_unknown_fields_are_422_with_every_path(
    api: Api, body: dict[str, Any], problems: dict[str, str]
) -> None:
    reply = await api.call("POST", "/api/v1/runs", json=body)
    assert reply.status == 422
    assert reply.body["type"].endswith(":body-invalid")
    assert {p["path"]: p["message"] for p in reply.body["problems"]} == problems


@pytest.fixture
async def small_limit() -> AsyncIterator[Api]:
    settings = make_settings(api_max_body_bytes=2_048)
    async with serve(await build_parts(settings), settings) as served:
        yield served


async def test_a_body_over_the_limit_is_413_by_its_length(small_limit: Api) -> None:
    document = {"scenario": "burst-storm", "overrides": {"target_url": "http://127.0.0.1/" + "a" * 1900}}
    body = json.dumps({**document, "padding": "x" * 3000})
    reply = await small_limit.call("POST", "/api/v1/runs", data=body, headers={"Content-Type": "application/json"})
    assert reply.status == 413
    assert reply.body["type"].endswith(":body-too-large")
    assert "2048 bytes" in reply.body["detail"]


async def test_a_chunked_body_over_the_limit_is_413_while_it_is_read(small_limit: Api) -> None:
    """No Content-Length to judge by: aiohttp stops reading at the limit."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"scenario": "burst-storm", "padding": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}'

    reply = await small_limit.call(
        "POST", "/api/v1/scenarios/validate", data=chunks(), headers={"Content-Type": "application/json"}
    )
    assert reply.status == 413


async def test_a_body_within_the_limit_is_read(small_limit: Api) -> None:
    reply = await small_limit.call("POST", "/api/v1/runs", json={"scenario": "burst-storm"})
    assert reply.status == 202


async def test_an_unknown_method_is_405_listing_the_allowed_ones(api: Api) -> None:
    reply = await api.call("PATCH", "/api/v1/runs")
    assert reply.status == 405
    assert reply.headers["Allow"] == "GET, POST"
    assert "PATCH" in reply.body["detail"]


@pytest.mark.parametrize("path", ["/api/v1/run", "/api/v2/runs", "/api/v1/runs/x/y", "/"])
async def test_an_unknown_path_is_404(api: Api, path: str) -> None:
    reply = await api.call("GET", path, role=TokenRole.VIEWER)
    assert reply.status == 404
    assert reply.body["instance"] == path


async def test_endpoints_without_parameters_refuse_unknown_ones(api: Api) -> None:
    reply = await api.call("GET", "/api/v1/scenarios?verbose=1")
    assert reply.status == 400
    assert reply.body["problems"] == [{"path": "verbose", "message": "unknown query parameter"}]
