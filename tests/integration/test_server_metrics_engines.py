"""A run scrapes each engine's page as that engine renders it, and quotes the engine's own queue.

The load goes to the built-in target; ``target.metrics.url`` points at a loopback page that mimics one
engine (tests/engine_pages.py) with a queue that grows by ten requests a second from the first scrape.
Each run lasts about 2.5 seconds.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.results.result import RunResult
from cliffwatch.domain.results.scoring import HIDDEN_OVERLOAD
from cliffwatch.domain.scenario.metrics_spec import EngineKind, Signal
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.services.memory import CollectingObserver
from engine_pages import PAGES, EngineState

pytestmark = pytest.mark.slow

WAITING = {
    "vllm": "vllm:num_requests_waiting",
    "sglang": 'sglang:num_queue_reqs{priority=""}',
    "tgi": "tgi_queue_size",
    "llamacpp": "llamacpp:requests_deferred",
    "triton": 'nv_trt_llm_request_metrics{request_type="waiting"}',
}


@pytest.fixture
async def growing_page(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    engine = request.param
    started: list[float] = []

    async def metrics(_: web.Request) -> web.Response:
        started[:] = started or [time.monotonic()]
        waiting = round(10 * (time.monotonic() - started[0]))
        state = EngineState(waiting=waiting, running=4, kv=min(1.0, waiting / 40), generated=100 * waiting)
        return web.Response(text=PAGES[engine](state), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/metrics"))
    await server.close()


def scenario(metrics_url: str) -> dict[str, Any]:
    return {
        "name": "watched",
        "target": {"url": "builtin", "request": {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": 4},
                   "metrics": {"url": metrics_url, "interval_ms": 200}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "phases": [
            {"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 4}},
            {"name": "push", "role": "stress", "duration_s": 1.5, "arrival": {"process": "constant", "rate": 8}},
        ],
    }  # fmt: skip


async def run(document: dict[str, Any]) -> RunResult:
    parsed = parse_scenario(document)
    async with prepare_run(Settings.from_env({}), parsed, observer=CollectingObserver()) as prepared:
        return await prepared.service.execute(parsed, run_id="engines", target_url=prepared.target_url)


@pytest.mark.parametrize("growing_page", sorted(WAITING), indirect=True)
async def test_a_run_reads_each_engines_page_and_its_flag_quotes_that_engines_queue(
    growing_page: str, request: pytest.FixtureRequest
) -> None:
    engine = request.node.callspec.params["growing_page"]
    result = await run(scenario(growing_page))
    server = result.server
    assert server is not None
    assert server.engine is EngineKind(engine)
    assert server.failed == 0
    waiting = server.signal(Signal.WAITING)
    assert waiting is not None
    assert waiting.expr == WAITING[engine]
    assert waiting.values[-1] is not None
    assert waiting.values[-1] >= 20  # 2.5 s of a queue growing by 10/s
    flag = next(f for f in result.score.flags if f.name == HIDDEN_OVERLOAD)
    assert "the server's waiting queue grew from " in flag.summary
    assert f"({WAITING[engine]})" in flag.summary
    document = result.to_dict()
    assert document["server_metrics"]["engine"] == engine
    assert document["phases"][1]["server"]["waiting"]["max"] > document["phases"][0]["server"]["waiting"]["max"]
