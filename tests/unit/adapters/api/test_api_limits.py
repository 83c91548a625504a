"""The API protects itself: each token's request rate is a token bucket, and a token over it is answered 429
with Retry-After and a problem body at once, before its credential costs a database lookup."""

from __future__ import annotations

import asyncio
from typing import Any

from api_harness import Api, build_parts, make_settings, serve

from cliffwatch.domain.service.runs import TokenRole


async def test_a_token_over_its_rate_gets_429_with_retry_after_and_others_do_not() -> None:
    """With 20/s and bursts of 3, a fourth request at once is refused (rate-limited, Retry-After, the rate in
    the detail); another token still gets its own burst, and a moment later the first is served again."""
    settings = make_settings(api_rate_per_token=20.0, api_burst_per_token=3)
    async with serve(await build_parts(settings), settings) as api:
        statuses = [(await api.call("GET", "/api/v1/runs", role=TokenRole.VIEWER)).status for _ in range(3)]
        refused = await api.call("GET", "/api/v1/runs", role=TokenRole.VIEWER)
        assert statuses == [200, 200, 200]
        assert refused.status == 429
        assert refused.body["type"].endswith(":rate-limited")
        assert "20 requests/s (bursts of 3)" in refused.body["detail"]
        assert refused.headers["Retry-After"] == "1"
        assert (await api.call("GET", "/api/v1/scenarios", role=TokenRole.OPERATOR)).status == 200
        await asyncio.sleep(0.1)  # two tokens' worth at 20/s
        assert (await api.call("GET", "/api/v1/runs", role=TokenRole.VIEWER)).status == 200


async def counting_lookups(settings: Any) -> tuple[Any, list[str]]:
    """The API's parts with every token lookup recorded (the token as sent) before it reaches the store."""
    parts = await build_parts(settings)
    lookups: list[str] = []
    original = parts.services.tokens.authenticate

    async def counting(token: str) -> Any:
        lookups.append(token)
        return await original(token)

    parts.services.tokens.authenticate = counting  # type: ignore[method-assign]
    return parts, lookups


async def test_a_refused_request_costs_no_token_lookup_and_probes_are_never_limited() -> None:
    """Beyond the burst nothing reaches the token store; /healthz and /readyz need no token and no bucket, and
    requests without a token are 401 as before, not counted."""
    settings = make_settings(api_rate_per_token=1.0, api_burst_per_token=2)
    parts, lookups = await counting_lookups(settings)
    async with serve(parts, settings) as api:
        replies = [await api.call("GET", "/api/v1/stop-all", role=TokenRole.VIEWER) for _ in range(10)]
        assert [r.status for r in replies] == [200, 200] + [429] * 8
        assert len(lookups) == 2
        assert [(await api.call("GET", "/healthz", role=None)).status for _ in range(10)] == [200] * 10
        assert (await api.call("GET", "/api/v1/runs", role=None)).status == 401


async def test_a_flood_from_one_token_is_refused_beyond_the_default_burst(api: Api) -> None:
    """The defaults (20/s, bursts of 40) let a script read 40 pages at once without a refusal, and refuse the
    rest of a flood of 60 (a page takes about a millisecond here, so a token or two refills meanwhile)."""
    statuses = [(await api.call("GET", "/api/v1/runs", role=TokenRole.VIEWER)).status for _ in range(60)]
    assert statuses[:40] == [200] * 40
    assert statuses.count(429) >= 15


async def test_a_flood_of_made_up_tokens_is_refused_before_it_costs_lookups_and_known_tokens_pass() -> None:
    """Each made-up token gets a bucket of its own, so the per-token rate alone let a flood of distinct ones
    through, each a database lookup: beyond 5 unknown tokens a minute from one address, the next made-up one
    is 429 at once with no lookup, while a token this instance knows is served."""
    settings = make_settings(api_failed_auth_per_minute=5.0)
    parts, lookups = await counting_lookups(settings)
    async with serve(parts, settings) as api:
        assert (await api.call("GET", "/api/v1/runs", role=TokenRole.VIEWER)).status == 200  # now known here
        made_up = [await api.call("GET", "/api/v1/runs", role=None, headers={"Authorization": f"Bearer cw_fake{i}"})
                   for i in range(20)]  # fmt: skip
        assert [r.status for r in made_up] == [401] * 5 + [429] * 15
        assert made_up[-1].body["type"].endswith(":rate-limited")
        assert int(made_up[-1].headers["Retry-After"]) >= 1
        assert len(lookups) == 1 + 5
        assert (await api.call("GET", "/api/v1/runs", role=TokenRole.VIEWER)).status == 200
