"""Drained before the next step: a real sweep through ``prepare_sweep`` against a loopback server that, as
llama.cpp does with its deferred tasks, keeps working on requests whose clients gave up.

The server serves one request at a time in 100 ms (10 req/s) from a FIFO queue it empties whatever the clients
do, and shows its queue on a llama.cpp ``/metrics`` page (``llamacpp:requests_deferred``,
``llamacpp:requests_processing``: tests/engine_pages.py). A step at 20 req/s for 2.5 s leaves about 25
requests queued when its clients have given up (timeout 0.5 s): about 2.5 s of work the next step would
inherit. The sweep waits for it: by the server's own gauges with ``target.metrics``, by a probe without.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.bootstrap.sweep import prepare_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.capacity import CapacityResult
from cliffwatch.domain.capacity.step_drain import DrainSignal
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.services.memory import CollectingObserver
from engine_pages import PAGES, EngineState

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # sweeps: each step must keep its schedule

SERVICE_S = 0.1
SPEC = SweepSpec(start=20.0, stop=30.0, coarse_steps=2, trials=1, max_steps=2, step_s=2.0, warmup_s=0.5, cooldown_s=0,
                 arrival=SweepArrival.CONSTANT, recheck=False, growth_check=False)  # fmt: skip


class BackloggedSlot:
    """One slot and a FIFO queue it works through even for requests whose client has gone."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()
        self.busy = False
        self.worker = asyncio.create_task(self._work())

    async def _work(self) -> None:
        while True:
            done = await self.queue.get()
            self.busy = True
            await asyncio.sleep(SERVICE_S)
            self.busy = False
            if not done.done():
                done.set_result(None)

    async def handle(self, request: web.Request) -> web.Response:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(done)
        await asyncio.shield(done)
        return web.Response(text="done")

    async def metrics(self, request: web.Request) -> web.Response:
        state = EngineState(waiting=self.queue.qsize(), running=int(self.busy))
        return web.Response(text=PAGES["llamacpp"](state), content_type="text/plain")


async def sweep(tmp_path: Path, *, metrics: bool, drain_timeout_s: float = 30.0) -> tuple[CapacityResult, float]:
    """One sweep; the server's queue the moment the first step's drain ended is returned beside the result."""
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    slot = BackloggedSlot()
    app = web.Application()
    app.router.add_get("/", slot.handle)
    app.router.add_get("/metrics", slot.metrics)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    seen: list[float] = []

    class AtEachStep:
        def step_started(self, variant: str, rate: float, trial: int) -> None:
            seen.append(slot.queue.qsize() + int(slot.busy))  # what the step inherits

        def step_finished(self, variant: str, step: Any, verdict: Any) -> None:
            pass

    target: dict[str, Any] = {"url": f"http://127.0.0.1:{server.port}", "api": "http",
                              "request": {"method": "GET", "path": "/"}}  # fmt: skip
    if metrics:
        target["metrics"] = {"engine": "llamacpp", "interval_ms": 200}
    try:
        scenario = parse_scenario({
            "name": "drain", "seed": 3, "target": target,
            "slo": {"e2e_ms": 300, "timeout_ms": 500},
            "client": {"pool_size": 64, "retry": {"policy": "none"}},
            "phases": [{"name": "p", "role": "baseline", "duration_s": 5,
                        "arrival": {"process": "constant", "rate": 1}}],
        }, source="test_sweep_drain")  # fmt: skip
        spec = SweepSpec(**{**SPEC.__dict__, "drain_timeout_s": drain_timeout_s})
        async with prepare_sweep(Settings(allowlist=allowlist, state_dir=tmp_path), scenario, spec,
                                 observer=CollectingObserver(), sweep_observer=AtEachStep()) as handle:  # fmt: skip
            outcome = await handle.run()
    finally:
        slot.worker.cancel()
        await server.close()
    assert outcome.status is RunStatus.SUCCEEDED, outcome.reason
    (report,) = outcome.reports
    return report.result, seen[1]


async def test_with_the_servers_metrics_the_next_step_starts_once_its_queue_is_empty(tmp_path: Path) -> None:
    result, inherited = await sweep(tmp_path, metrics=True)
    first = result.steps[0]
    assert first.drain is not None
    assert first.drain.by is DrainSignal.SERVER_METRICS
    assert first.drain.drained, first.drain
    assert first.drain.seconds > 1.0, first.drain  # about 2.5 s of queued work the clients had given up on
    assert inherited <= 1  # the second step began on an idle server (a scrape's interval is 200 ms)
    assert result.to_dict()["steps"][0]["drain"]["by"] == "server metrics"


async def test_without_metrics_a_probe_as_fast_as_on_the_idle_target_says_it_drained(tmp_path: Path) -> None:
    result, inherited = await sweep(tmp_path, metrics=False)
    first = result.steps[0]
    assert first.drain is not None
    assert first.drain.by is DrainSignal.PROBE, first.drain
    assert first.drain.drained, first.drain
    assert first.drain.seconds > 1.0, first.drain
    assert inherited <= 1


async def test_a_target_that_does_not_drain_in_time_is_said_to_and_the_sweep_goes_on(tmp_path: Path) -> None:
    result, inherited = await sweep(tmp_path, metrics=True, drain_timeout_s=1.0)
    first = result.steps[0]
    assert first.drain is not None
    assert not first.drain.drained
    assert "the server held" in (first.drain.detail or "")
    assert inherited > 3  # the backlog the next step inherited, as the report says
    assert len(result.steps) == 2
