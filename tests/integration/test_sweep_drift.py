"""A real sweep through ``prepare_sweep`` against a loopback server whose speed drifts: the recheck at the end sees
it, the result carries ``target_drift`` and the verdict says so; against the same server held steady it does not.

The server serves one request at a time, 20 ms each (50 req/s), and is slowed by the test when the recheck starts:
to 200 ms a request (5 req/s: the recheck fails), or to 32 ms (the issue's × 1.6: it still holds, and only its
median latency shows the drift). The sweep measures 8 and 12 req/s (no cliff), then 8 req/s again. Steps of
0.5 + 2 s with constant arrivals keep each test to about 10 s: the slowed server drains at once after the
recheck, its probes alike though slower than it was idle (domain.capacity.step_drain).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.bootstrap.sweep import prepare_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.capacity import CapacityResult, StepStats, StepVerdict
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.services.memory import CollectingObserver

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # sweeps: each step must keep its schedule

FAST_S, SLOW_S = 0.02, 0.2
SPEC = SweepSpec(start=8.0, stop=12.0, coarse_steps=2, trials=1, step_s=2.0, warmup_s=0.5, cooldown_s=0.2,
                 arrival=SweepArrival.CONSTANT, recheck=True)  # fmt: skip


class OneSlot:
    """A server answering one request at a time in ``service_s``; a request whose client has gone is skipped."""

    def __init__(self) -> None:
        self.service_s = FAST_S
        self.lock = asyncio.Lock()

    async def handle(self, request: web.Request) -> web.Response:
        async with self.lock:
            if request.transport is None or request.transport.is_closing():
                return web.Response(status=499)
            await asyncio.sleep(self.service_s)
        return web.Response(text="done")


class SlowsAtTheRecheck:
    """A ``SweepObserver`` that slows the server to ``slow_s`` a request when the recheck (the first rate's second
    trial) starts; None: it keeps its speed."""

    def __init__(self, server: OneSlot, slow_s: float | None) -> None:
        self.server = server
        self.slow_s = slow_s

    def step_started(self, variant: str, rate: float, trial: int) -> None:
        if self.slow_s is not None and rate == SPEC.first_rate and trial == 2:
            self.server.service_s = self.slow_s

    def step_finished(self, variant: str, step: StepStats, verdict: StepVerdict) -> None:
        pass


async def sweep(tmp_path: Path, *, slow_s: float | None) -> CapacityResult:
    """One sweep against a fresh server; run once more when a step was generator-limited (a busy machine's
    step says nothing about the target, and the drift rule leaves it out)."""
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    settings = Settings(allowlist=allowlist, state_dir=tmp_path)
    for _ in range(2):
        slot = OneSlot()
        app = web.Application()
        app.router.add_get("/", slot.handle)
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            scenario = parse_scenario(
                {
                    "name": "drift",
                    "seed": 3,
                    "target": {"url": f"http://127.0.0.1:{server.port}", "api": "http",
                               "request": {"method": "GET", "path": "/"}},
                    "slo": {"e2e_ms": 300, "timeout_ms": 1000},
                    "client": {"pool_size": 64, "retry": {"policy": "none"}},
                    "phases": [{"name": "p", "role": "baseline", "duration_s": 5,
                                "arrival": {"process": "constant", "rate": 1}}],
                },
                source="test_sweep_drift",
            )  # fmt: skip
            hook = SlowsAtTheRecheck(slot, slow_s)
            async with prepare_sweep(settings, scenario, SPEC, observer=CollectingObserver(),
                                     sweep_observer=hook) as handle:  # fmt: skip
                outcome = await handle.run()
        finally:
            await server.close()
        assert outcome.status is RunStatus.SUCCEEDED, outcome.reason
        (report,) = outcome.reports
        if not any(s.generator_limited for s in report.result.steps):
            break
    return report.result


def describe(result: CapacityResult) -> str:
    return "; ".join(f"{s.rate:g}#{s.trial}{' recheck' if s.recheck else ''}: {s.on_time}/{s.offered} on time, "
                     f"p99 e2e {s.e2e_ms.get('p99')} ms, started {s.started_s}" for s in result.steps)  # fmt: skip


async def test_a_target_that_slows_down_during_the_sweep_is_reported_as_drifting(tmp_path: Path) -> None:
    result = await sweep(tmp_path, slow_s=SLOW_S)

    assert [(s.rate, s.trial, s.recheck) for s in result.steps] == [(8, 1, False), (12, 1, False), (8, 2, True)], (
        describe(result)
    )
    assert result.target_drift is not None, describe(result)
    (pair,) = result.target_drift.disagreements
    assert (pair.rate, pair.earlier.step_index, pair.later.step_index, pair.later.recheck) == (8.0, 0, 2, True)
    assert pair.earlier.started_s is not None
    assert pair.later.started_s is not None
    assert pair.later.started_s > pair.earlier.started_s + 4  # two steps of 2.5 s ran between them
    assert pair.share_change < -0.5, describe(result)
    assert pair.median_e2e_change_ms is not None
    assert pair.median_e2e_change_ms > 100, describe(result)  # the server's own time went from 20 to 200 ms
    assert re.match(
        r"the target's speed drifted during the sweep \(8 req/s: 100\.0 % on time at 0 s, [\d.]+ % at \d+ s in the "
        r"end-of-sweep recheck\): its usable capacity is its slowest period's, each of these rates judged on its "
        r"slower trial; ",
        result.verdict,
    ), result.verdict
    # At its slowest the target could not hold even the first rate: no usable rate, where pooled it was 12.
    assert result.usable_rps is None, describe(result)
    document: dict[str, Any] = result.to_dict()
    assert document["target_drift"]["rates"] == [8.0]


async def test_a_steady_target_passes_its_recheck_without_a_word_of_drift(tmp_path: Path) -> None:
    result = await sweep(tmp_path, slow_s=None)

    assert [(s.rate, s.trial, s.recheck) for s in result.steps] == [(8, 1, False), (12, 1, False), (8, 2, True)], (
        describe(result)
    )
    assert result.target_drift is None, describe(result)
    assert "drifted" not in result.verdict
    assert result.usable_rps == 12.0, describe(result)
    assert result.to_dict()["target_drift"] is None


async def test_a_target_slowed_by_the_issues_factor_still_holding_its_rate_drifted_by_its_median(
    tmp_path: Path,
) -> None:
    result = await sweep(tmp_path, slow_s=FAST_S * 1.6)

    assert [(s.rate, s.trial, s.recheck) for s in result.steps] == [(8, 1, False), (12, 1, False), (8, 2, True)], (
        describe(result)
    )
    assert result.target_drift is not None, describe(result)
    assert result.target_drift.disagreements == (), describe(result)  # 32 ms a request still holds 8 req/s
    shift = result.target_drift.latency[0]
    assert (shift.signal, shift.rate, shift.earlier.step_index, shift.later.recheck) == ("e2e", 8.0, 0, True)
    assert 0.3 < shift.change < 1.0, describe(result)  # 20 → 32 ms of service, and the client's own time on both
    assert result.verdict.startswith("the target's speed drifted during the sweep (8 req/s: median e2e "), (
        result.verdict
    )
    assert result.usable_rps == 12.0, describe(result)  # a shift judges no rate
