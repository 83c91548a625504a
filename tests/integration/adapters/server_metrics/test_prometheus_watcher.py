"""The watcher scrapes a real loopback page on its schedule, survives every way a scrape fails, and reaches
nothing the allowlist does not admit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.adapters.server_metrics.scraper import PrometheusWatcher
from cliffwatch.domain.errors import TargetNotAllowed
from cliffwatch.domain.scenario.metrics_spec import EngineKind, MetricsSpec, Signal
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from engine_pages import PAGES, EngineState

Page = Callable[[web.Request], Awaitable[web.StreamResponse]]


def loopback() -> Destinations:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    return Destinations(allowlist)


@pytest.fixture
async def page_server() -> AsyncIterator[Callable[[Page], Awaitable[str]]]:
    servers: list[TestServer] = []

    async def start(handler: Page) -> str:
        app = web.Application()
        app.router.add_get("/metrics", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/metrics"))

    yield start
    for server in servers:
        await server.close()


def watcher(url: str, spec: MetricsSpec) -> PrometheusWatcher:
    return PrometheusWatcher(spec, url, destinations=loopback(), shown_url=url, clock=MonotonicClock())


async def test_the_page_is_scraped_every_interval_on_the_runs_clock_and_its_series_follow_the_server() -> None:
    served = {"waiting": 0}

    async def metrics(request: web.Request) -> web.Response:
        served["waiting"] += 1
        return web.Response(text=PAGES["vllm"](EngineState(waiting=served["waiting"])),
                            content_type="text/plain")  # fmt: skip

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        clock = MonotonicClock()
        url = str(server.make_url("/metrics"))
        async with PrometheusWatcher(MetricsSpec(interval_ms=100, timeout_ms=100), url, destinations=loopback(),
                                     shown_url=url, clock=clock) as scraper:  # fmt: skip
            assert await scraper.check() is None
            origin = clock.now_ns()
            scraper.start(origin)
            await asyncio.sleep(0.55)
            view = await scraper.stop()
    finally:
        await server.close()
    assert view is not None
    assert view.engine is EngineKind.VLLM  # told by the page
    assert 5 <= len(view.times_s) <= 7
    # on the schedule: one scrape each 100 ms from the origin, each placed within its slot
    for index, at in enumerate(view.times_s):
        assert index * 0.1 <= at < index * 0.1 + 0.05
    waiting = view.signal(Signal.WAITING)
    assert waiting is not None
    assert list(waiting.values) == sorted(waiting.values)  # each scrape saw one more waiting
    assert view.failed == 0


async def test_failed_scrapes_are_counted_by_reason_and_the_watcher_goes_on(page_server) -> None:  # type: ignore[no-untyped-def]
    answers = iter(["503", "garbage", "slow", "ok", "ok"])

    async def metrics(request: web.Request) -> web.Response:
        kind = next(answers, "ok")
        if kind == "503":
            return web.Response(status=503, text="busy")
        if kind == "garbage":
            return web.Response(text="cliffwatch_target_waiting_requests not-a-number\n")
        if kind == "slow":
            await asyncio.sleep(0.3)
        return web.Response(text=PAGES["builtin"](EngineState(waiting=3)))

    url = await page_server(metrics)
    async with watcher(url, MetricsSpec(engine=EngineKind.BUILTIN, interval_ms=150, timeout_ms=100)) as scraper:
        scraper.start(MonotonicClock().now_ns())
        await asyncio.sleep(0.85)
        view = await scraper.stop()
    assert view is not None
    assert view.failures["HTTP 503"] == 1
    assert view.failures["no page within 100 ms"] == 1
    assert any(reason.startswith("the page does not parse as Prometheus text") for reason in view.failures)
    assert len(view.times_s) >= 2
    waiting = view.signal(Signal.WAITING)
    assert waiting is not None
    assert set(waiting.values) == {3.0}


async def test_a_page_that_cannot_be_reached_is_a_note_before_the_run_not_an_error(unused_tcp_port: int) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}/metrics"
    async with watcher(url, MetricsSpec()) as scraper:
        note = await scraper.check()
        scraper.start(MonotonicClock().now_ns())
        await asyncio.sleep(0.05)
        view = await scraper.stop()
    assert note is not None
    assert note.startswith(f"the target's metrics at {url} could not be scraped: ClientConnectorError")
    assert view is not None
    assert view.scrapes == view.failed == 1
    assert view.series == ()


async def test_a_metrics_url_outside_the_allowlist_is_refused_before_anything_is_sent() -> None:
    scraper = watcher("http://10.255.255.1:9090/metrics", MetricsSpec())
    with pytest.raises(TargetNotAllowed, match=r"10\.255\.255\.1"):
        async with scraper:
            pass


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi", "llamacpp", "triton", "builtin"])
async def test_the_backlog_is_the_servers_waiting_plus_running_by_one_scrape_now(
    page_server: Callable[[Page], Awaitable[str]], engine: str
) -> None:
    """What a sweep waits on between steps (domain.capacity.step_drain): each engine's own gauges, the engine
    told by its page."""
    state = {"waiting": 3, "running": 2}

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=PAGES[engine](EngineState(**state)), content_type="text/plain")

    url = await page_server(metrics)
    async with watcher(url, MetricsSpec(interval_ms=100, timeout_ms=500)) as scraper:
        assert await scraper.backlog() == 5
        state.update(waiting=0, running=0)
        assert await scraper.backlog() == 0


async def test_a_page_without_the_gauges_or_no_page_has_no_backlog(
    page_server: Callable[[Page], Awaitable[str]],
) -> None:
    async def unknown(request: web.Request) -> web.Response:
        return web.Response(text="# TYPE something gauge\nsomething 1\n", content_type="text/plain")

    async def failing(request: web.Request) -> web.Response:
        return web.Response(status=500)

    for handler in (unknown, failing):
        url = await page_server(handler)
        async with watcher(url, MetricsSpec(interval_ms=100, timeout_ms=500)) as scraper:
            assert await scraper.backlog() is None
