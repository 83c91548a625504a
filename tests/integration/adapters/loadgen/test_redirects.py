"""Redirects against real loopback servers: a 3xx is the answer unless the scenario follows redirects, and a
followed hop is admitted through the allowlist (by port, here: two servers on 127.0.0.1) before anything
is sent to it, without the target's credentials when it leaves the target's origin."""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiohttp import web
from loadgen_testkit import Serve, Served, planned, scenario_for

from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.outcomes import Attempt, Outcome, Slo, classify
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.security.allowlist import Allowlist, parse_allowlist
from cliffwatch.domain.traffic.rate_limit import RateLimit, TokenBucket

pytestmark = pytest.mark.usefixtures("over_each_transport")  # aiohttp and the lean client alike

CREDENTIALS = {
    "Authorization": "Bearer sk-target",
    "Proxy-Authorization": "Basic cHJveHk=",
    "Cookie": "session=s3cret",
    "api-key": "sk-azure",
    "x-api-key": "sk-anthropic",
}
SLO = Slo(e2e_ms=1000, timeout_ms=3000)


def only(*served: Served) -> Allowlist:
    """An allowlist admitting exactly these servers (127.0.0.1 on their ports)."""
    allowlist, problems = parse_allowlist([s.url.removeprefix("http://") for s in served])
    assert allowlist is not None, problems
    return allowlist


def redirecting(status: int, to: str | None) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, headers={"Location": to} if to is not None else {}, text="moved")

    return handler


async def ok(request: web.Request) -> web.StreamResponse:
    return web.Response(text="fine")


async def attempt_on(scenario: Scenario, url: str, allowlist: Allowlist) -> Attempt:
    async with HttpExecutor(scenario, url, destinations=Destinations(allowlist)) as executor:
        return await executor.attempt(planned(), 1, 5.0, origin_ns=time.perf_counter_ns(), deadline_bound=False)


def plain(url: str, *, follow: bool = False, hops: int | None = None, method: str = "GET") -> Scenario:
    client: dict[str, Any] = {"follow_redirects": True} if follow else {}
    if hops is not None:
        client["max_redirects"] = hops
    request: dict[str, Any] = {"method": method, "headers": CREDENTIALS, "path": "/ask"}
    if method != "GET":
        request["body"] = {"question": 42}
    return scenario_for(url, api="http", request=request, client=client)


async def test_a_redirect_is_the_answer_and_nothing_reaches_where_it_points(serve: Serve) -> None:
    """A 307 from the allowed target to a server outside the allowlist ends the attempt as a redirect
    (its status kept, the Location named); the other server receives nothing, credentials included."""
    elsewhere = await serve(ok)
    target = await serve(redirecting(307, f"{elsewhere.url}/stolen"))
    async with HttpExecutor(plain(target.url), target.url) as executor:  # its own loopback-only destinations
        attempt = await executor.attempt(planned(), 1, 5.0, origin_ns=time.perf_counter_ns(), deadline_bound=False)

    assert elsewhere.requests == []
    assert len(target.requests) == 1
    assert attempt.status == 307
    assert attempt.failure is FailureKind.REDIRECT
    assert attempt.error is not None
    assert f"{elsewhere.url}/stolen" in attempt.error
    assert "not followed" in attempt.error
    assert classify((attempt,), scheduled_ns=0, slo=SLO) is Outcome.REDIRECT


async def test_preflight_takes_a_redirect_as_an_answer_and_does_not_follow_it(serve: Serve) -> None:
    """The pre-flight request is answered by the 3xx itself: the server it points to sees nothing."""
    elsewhere = await serve(ok)
    target = await serve(redirecting(302, elsewhere.url))
    async with HttpExecutor(plain(target.url), target.url) as executor:
        await executor.preflight()
    assert elsewhere.requests == []


async def test_a_followed_hop_outside_the_allowlist_is_refused_naming_it_and_nothing_is_sent_there(
    serve: Serve,
) -> None:
    """With follow_redirects on, a hop to a host:port the allowlist does not admit ends the attempt as
    refused, naming the URL and the allowlist; the server there receives nothing."""
    elsewhere = await serve(ok)
    target = await serve(redirecting(307, f"{elsewhere.url}/stolen"))
    attempt = await attempt_on(plain(target.url, follow=True), target.url, only(target))

    assert (attempt.failure, attempt.status) == (FailureKind.REFUSED, 307)
    assert attempt.error is not None
    assert f"redirect to {elsewhere.url}/stolen refused" in attempt.error
    assert "target allowlist" in attempt.error
    assert classify((attempt,), scheduled_ns=0, slo=SLO) is Outcome.ERROR
    assert elsewhere.requests == []


async def test_a_followed_cross_origin_hop_goes_without_credentials_and_a_same_origin_hop_keeps_them(
    serve: Serve,
) -> None:
    """Target /ask → target /moved (same origin: every header) → another allowed origin (no Authorization,
    Proxy-Authorization, Cookie, api-key or x-api-key; other headers kept), which answers 200."""
    elsewhere = await serve(ok)

    async def handler(request: web.Request) -> web.StreamResponse:
        to = "/moved" if request.path == "/ask" else f"{elsewhere.url}/final"
        return web.Response(status=308, headers={"Location": to})

    target = await serve(handler)
    scenario = plain(target.url, follow=True)
    attempt = await attempt_on(scenario, target.url, only(target, elsewhere))

    assert attempt.succeeded, attempt.error
    assert attempt.status == 200
    assert [seen.path for seen in target.requests] == ["/ask", "/moved"]
    for seen in target.requests:
        assert all(seen.headers.get(name) == value for name, value in CREDENTIALS.items())
    [hop] = elsewhere.requests
    assert hop.path == "/final"
    assert [name for name in CREDENTIALS if name in hop.headers] == []
    assert hop.headers["User-Agent"].startswith("cliffwatch/")


@pytest.mark.parametrize(
    ("status", "method", "has_body"),
    [(303, "GET", False), (301, "POST", True), (302, "POST", True), (307, "POST", True), (308, "POST", True)],
)
async def test_a_303_becomes_a_get_and_every_other_followed_redirect_keeps_the_method_and_body(
    serve: Serve, status: int, method: str, has_body: bool
) -> None:
    """POST answered with each redirect: 303 is followed with a GET without a body (or Content-Type), as
    browsers do; 301, 302, 307 and 308 are followed with the same POST and body (docs/scenarios.md)."""
    landing = await serve(ok)
    target = await serve(redirecting(status, f"{landing.url}/landed"))
    attempt = await attempt_on(plain(target.url, follow=True, method="POST"), target.url, only(target, landing))

    assert attempt.succeeded, attempt.error
    [hop] = landing.requests
    assert hop.method == method
    assert (hop.json() if has_body else hop.body) == ({"question": 42} if has_body else b"")
    assert ("Content-Type" in hop.headers) is has_body


async def test_a_chain_longer_than_max_redirects_ends_as_a_redirect_after_that_many_hops(serve: Serve) -> None:
    """A target that redirects to itself forever is followed max_redirects times, then the last 3xx is
    the answer."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": f"/loop{len(target.requests)}"})

    target = await serve(handler)
    attempt = await attempt_on(plain(target.url, follow=True, hops=3), target.url, only(target))

    assert (attempt.failure, attempt.status) == (FailureKind.REDIRECT, 302)
    assert attempt.error is not None
    assert "after 3 hops" in attempt.error
    assert len(target.requests) == 4  # the request and three hops


@pytest.mark.parametrize(
    ("status", "location", "why"),
    [(304, "/x", "not a redirect to follow"), (302, None, "no Location"), (302, "ftp://127.0.0.1/x", "http(s)")],
)
async def test_a_3xx_that_cannot_be_followed_is_the_answer(
    serve: Serve, status: int, location: str | None, why: str
) -> None:
    target = await serve(redirecting(status, location))
    attempt = await attempt_on(plain(target.url, follow=True), target.url, only(target))

    assert (attempt.failure, attempt.status) == (FailureKind.REDIRECT, status)
    assert attempt.error is not None
    assert why in attempt.error
    assert len(target.requests) == 1


async def test_each_followed_hop_takes_a_token_of_the_attempt_cap(serve: Serve) -> None:
    """A target redirecting to itself cannot multiply what is sent past the cap: with three tokens left, an
    attempt follows three hops (four requests in all), then the 307 stands as its answer, the cap named."""
    loop_url: list[str] = []

    async def again(request: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": loop_url[0]}, text="again")

    target = await serve(again)
    loop_url.append(f"{target.url}/ask")
    cap = TokenBucket(RateLimit(rate=1e-6, burst=3), time.perf_counter_ns())
    scenario = plain(target.url, follow=True, hops=20)
    async with HttpExecutor(scenario, target.url, destinations=Destinations(only(target)), cap=cap) as executor:
        attempt = await executor.attempt(planned(), 1, 5.0, origin_ns=time.perf_counter_ns(), deadline_bound=False)
    assert len(target.requests) == 4
    assert executor.capped_hops == 1
    assert attempt.failure is FailureKind.REDIRECT
    assert attempt.error is not None
    assert "attempt cap" in attempt.error


async def test_a_redirect_that_carries_the_query_back_is_recorded_without_its_keys(serve: Serve) -> None:
    """Servers redirect keeping the query (a trailing slash, http to https): the outcome's error, which the store
    keeps and viewers read, names the Location with the run's query values and any sensitive one masked."""

    async def slash(request: web.Request) -> web.StreamResponse:
        return web.Response(status=301, headers={"Location": f"{request.path}/?{request.query_string}&sig=abc123"})

    target = await serve(slash)
    scenario = scenario_for(target.url, api="http", request={"path": "/ask?api_key=sk-in-path-1", "query": {
        "custom": "sk-query-value-2", "n": "2"}})  # fmt: skip
    attempt = await attempt_on(scenario, target.url, only(target))

    assert attempt.status == 301
    assert attempt.error is not None
    for secret in ("sk-in-path-1", "sk-query-value-2", "abc123"):
        assert secret not in attempt.error
    assert "/ask/?api_key=***&custom=***&n=2&sig=***" in attempt.error
