"""Caps and quotas through the API: worst cases refused naming the field, refusals storing nothing, and the
per-token quotas on queued runs and stored documents answered 429 with Retry-After."""

from __future__ import annotations

from typing import Any

import pytest
from api_harness import Api, build_parts, make_settings, serve, small_scenario

from cliffwatch.domain.service.runs import TokenRole

SWEEP = {"start": 1, "stop": 4, "step_s": 2, "warmup_s": 0, "cooldown_s": 0}


def _retrying(name: str, *, rate: float, retries: int, **retry: Any) -> dict[str, Any]:
    document = small_scenario(name, rate=rate)
    document["client"] = {"retry": {"policy": "immediate", "max_retries": retries, **retry}}
    return document


async def _versions(api: Api) -> int:
    return len(api.store._versions)


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        # 5 requests/s × (1 + 100 retries): the reproduction of issue 10 under a 5/s cap
        (
            {"client": {"retry": {"policy": "immediate", "max_retries": 100}}},
            "client.retry.max_retries",
            ["505 attempts/s", "5 requests/s × (1 + 100 retries each)", "at most 5 attempts/s"],
        ),
        (
            {
                "target": {
                    "url": "builtin",
                    "api": "openai-chat",
                    "request": {"model": "m", "prompt_tokens": {"dist": "uniform", "min": 1, "max": 200_000}},
                }
            },
            "target.request.prompt_tokens",
            ["up to 200,000 tokens", "at most 131,072"],
        ),
        (
            {
                "target": {
                    "url": "builtin",
                    "api": "openai-chat",
                    "request": {"model": "m", "max_tokens": {"dist": "lognormal", "median": 100, "sigma": 1}},
                }
            },
            "target.request.max_tokens",
            ["up to 1,000,000 tokens", "at most 32,768"],
        ),
        # 5 requests/s, each following up to 20 redirect hops: 21 requests an attempt
        (
            {"client": {"follow_redirects": True, "max_redirects": 20}},
            "client.max_redirects",
            ["105 attempts/s", "× up to 21 requests each", "at most 5 attempts/s"],
        ),
        ({"client": {"pool_size": 5_000}}, "client.pool_size", ["5,000 connections", "at most 1,000"]),
        ({"client": {"max_in_flight": 50_000}}, "client.max_in_flight", ["50,000 requests", "at most 10,000"]),
    ],
)
async def test_a_worst_case_over_a_cap_is_refused_naming_the_field_the_worst_case_and_the_cap(
    changes: dict[str, Any], path: str, words: list[str]
) -> None:
    """Each worst case (attempts with every retry, the largest prompt and answer a distribution can draw, the
    pool and the in-flight limit) is judged against its cap; the problem's path is the field to change."""
    settings = make_settings(max_offered_rate=5.0)
    async with serve(await build_parts(settings), settings) as api:
        document = {**small_scenario("worst", rate=5), **changes}
        reply = await api.call("POST", "/api/v1/runs", json={"document": document})
    assert reply.status == 422, reply.body
    assert reply.body["type"].endswith(":run-refused")
    [problem] = reply.body["problems"]
    assert problem["path"] == path
    assert all(w in problem["message"] for w in words), problem["message"]


async def test_a_retry_budget_lowers_the_attempt_bound_to_its_ratio() -> None:
    """A budget of 10 % bounds the sustained retries to 0.1 per request whatever max_retries says, so 5/s with
    100 budgeted retries (5.5 attempts/s) passes a 6/s cap, and fails a 5/s one naming the budget's ratio."""
    budgeted = _retrying("budgeted", rate=5, retries=100, budget={"ratio": 0.1})
    roomy = make_settings(max_offered_rate=5.0, max_attempt_rate=6.0)
    async with serve(await build_parts(roomy), roomy) as api:
        await api.queue({"document": budgeted})
    tight = make_settings(max_offered_rate=5.0)
    async with serve(await build_parts(tight), tight) as api:
        reply = await api.call("POST", "/api/v1/runs", json={"document": budgeted})
    assert reply.status == 422
    [problem] = reply.body["problems"]
    assert problem["path"] == "client.retry.budget.ratio"
    assert "5.5 attempts/s" in problem["message"]


async def test_a_concurrency_sweep_is_judged_by_its_clients_not_as_a_rate() -> None:
    """--concurrency steps are clients at once: capped by max_concurrency, not by the offered rate."""
    settings = make_settings(max_offered_rate=5.0, max_concurrency=8)
    async with serve(await build_parts(settings), settings) as api:
        ok = {**SWEEP, "mode": "concurrency", "stop": 8}
        assert (await api.call("POST", "/api/v1/sweeps", json={"scenario": "burst-storm", "sweep": ok})).status == 202
        over = {**SWEEP, "mode": "concurrency", "stop": 9}
        reply = await api.call("POST", "/api/v1/sweeps", json={"scenario": "burst-storm", "sweep": over})
    assert reply.status == 422
    [problem] = reply.body["problems"]
    assert problem == {"path": "sweep.stop",
                       "message": "the sweep may run up to 9 clients at once; this service runs at most 8"}  # fmt: skip


async def test_each_sweep_variant_is_judged_with_its_retries() -> None:
    """A rate sweep's highest rate times each variant's retries must fit the attempt cap; the variant is named."""
    settings = make_settings(max_offered_rate=16.0)
    async with serve(await build_parts(settings), settings) as api:
        sweep = {**SWEEP, "stop": 5, "variants": ["none", "immediate:3", "budget:10"]}
        reply = await api.call("POST", "/api/v1/sweeps", json={"scenario": "burst-storm", "sweep": sweep})
    assert reply.status == 422
    [problem] = reply.body["problems"]
    assert problem["path"] == "sweep.variants[1]"
    assert problem["message"].startswith("the sweep may send up to 20 attempts/s")


@pytest.mark.parametrize(
    "body",
    [
        {"document": small_scenario("too-hot", rate=5_000)},  # over the caps
        {"document": small_scenario("elsewhere", target="http://10.0.0.1:8000")},  # outside the allowlist
        {"document": small_scenario("elsewhere-too"), "overrides": {"target_url": "http://10.0.0.2:8000"}},
        {"document": small_scenario("swept"), "kind": "sweep", "sweep": {**SWEEP, "stop": 5_000}},
    ],
)
async def test_a_refused_submission_stores_no_scenario_version(api: Api, body: dict[str, Any]) -> None:
    """A 422 leaves the store as it was: the inline document is kept only once every check has passed."""
    before = await _versions(api)
    reply = await api.call("POST", "/api/v1/runs", json=body)
    assert reply.status == 422, reply.body
    assert await _versions(api) == before
    assert await api.store.active_runs() == []


async def test_a_repeat_is_answered_before_the_quota_and_a_reused_key_stores_nothing() -> None:
    """A token at its one queued run may repeat the request that queued it (200, the same run: the quota counts
    that run, so the repeat was refused 429 before); a key reused for another document is refused, and that
    document is not stored."""
    settings = make_settings(max_queued_runs_per_token=1)
    async with serve(await build_parts(settings), settings) as api:
        headers = {"Idempotency-Key": "deploy-9"}
        body = {"document": small_scenario("first")}
        first = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers=headers, json=body)
        again = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers=headers, json=body)
        assert (first.status, again.status) == (202, 200)
        assert again.body["id"] == first.body["id"]
        before = await _versions(api)
        reused = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers=headers,
                                json={"document": small_scenario("other")})  # fmt: skip
        assert reused.status == 422
        assert reused.body["type"].endswith(":idempotency-key-reused")
        assert await _versions(api) == before


async def test_a_token_with_its_most_queued_runs_gets_429_until_one_starts() -> None:
    """The quota counts the token's queued runs: beyond it, 429 quota-exceeded with Retry-After and nothing
    stored; another token is unaffected, and once a run leaves the queue the token may queue again."""
    settings = make_settings(max_queued_runs_per_token=2)
    async with serve(await build_parts(settings), settings) as api:
        first = await api.queue({"scenario": "burst-storm"})
        await api.queue({"document": small_scenario("second")})
        before = await _versions(api)
        refused = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR,
                                 json={"document": small_scenario("third")})  # fmt: skip
        assert refused.status == 429
        assert refused.body["type"].endswith(":quota-exceeded")
        assert (refused.body["quota"], refused.body["limit"]) == ("queued runs", 2)
        assert int(refused.headers["Retry-After"]) >= 1
        assert await _versions(api) == before
        await api.queue({"scenario": "burst-storm"}, role=TokenRole.ADMIN)  # another token: its own quota
        await api.call("POST", f"/api/v1/runs/{first['id']}/abort", role=TokenRole.OPERATOR)
        await api.queue({"scenario": "burst-storm"})


async def test_a_token_storing_too_many_new_documents_in_a_day_gets_429_with_the_wait() -> None:
    """New inline documents count against the token for 24 h; a document already stored costs nothing, and
    Retry-After says when the oldest one leaves the window."""
    settings = make_settings(max_documents_per_token=2, max_queued_runs_per_token=100)
    async with serve(await build_parts(settings), settings) as api:
        await api.queue({"document": small_scenario("doc-a")})
        await api.queue({"document": small_scenario("doc-b")})
        await api.queue({"document": small_scenario("doc-a")})  # stored already
        await api.queue({"scenario": "burst-storm"})  # not a document
        refused = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR,
                                 json={"document": small_scenario("doc-c")})  # fmt: skip
        assert refused.status == 429
        assert refused.body["type"].endswith(":quota-exceeded")
        assert 23 * 3600 < int(refused.headers["Retry-After"]) <= 24 * 3600
        assert "doc-c" not in {name for name, _ in api.store._versions}
