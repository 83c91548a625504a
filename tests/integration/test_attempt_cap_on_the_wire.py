"""The caps count what is really sent: issue 10's reproductions against a loopback server that answers 503 at
once and counts every arrival itself. Through the composition root that ``cliffwatch run``, ``cliffwatch
sweep`` and the service's worker all use, with the settings an operator sets."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.bootstrap.sweep import prepare_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec
from cliffwatch.domain.errors import RunRefused
from cliffwatch.domain.ports import Progress
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist

CAP = 5.0  # attempts/s: the cap of the reproduction


class Quiet:
    def progress(self, progress: Progress) -> None:
        pass

    def note(self, message: str) -> None:
        pass


@dataclass
class Refusing:
    """A server answering every request 503 at once, with the monotonic time of every arrival."""

    url: str = ""
    arrivals: list[float] = field(default_factory=list)  # of the load, not the preflights' GET /

    def most_in_any_second(self) -> int:
        return max((sum(1 for t in self.arrivals[i:] if t < start + 1.0) for i, start in enumerate(self.arrivals)),
                   default=0)  # fmt: skip


@pytest.fixture
async def refusing() -> AsyncIterator[Refusing]:
    server_state = Refusing()

    async def refuse(request: web.Request) -> web.Response:
        if request.method == "POST":
            server_state.arrivals.append(time.monotonic())
        await request.read()
        return web.json_response({"error": {"message": "overloaded"}}, status=503)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    server_state.url = str(server.make_url("")).rstrip("/")
    yield server_state
    await server.close()


def settings(tmp_path: Path, cap: float = CAP) -> Settings:
    """An operator's settings with a cap of ``cap`` requests/s (and so, by default, attempts/s)."""
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    return Settings(allowlist=allowlist, state_dir=tmp_path, max_offered_rate=cap)


def retrying(url: str, *, retry: dict[str, Any], duration_s: float = 2.0) -> Scenario:
    return parse_scenario({
        "name": "retry-flood",
        "seed": 1,
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": url, "api": "openai-chat", "request": {"model": "m", "prompt_tokens": 4, "max_tokens": 4,
                                                                 "stream": False}},
        "client": {"retry": {"policy": "immediate", "max_retries": 100, **retry}},
        "phases": [{"name": "flood", "role": "stress", "duration_s": duration_s,
                    "arrival": {"process": "constant", "rate": CAP}}],
    })  # fmt: skip


async def test_immediate_retries_against_503_are_refused_before_any_load(refusing: Refusing, tmp_path: Path) -> None:
    """5/s with 100 immediate retries under a 5/s cap sent 1,010 attempts in 2 s; its worst case, 505
    attempts/s, is now refused before a single request leaves, naming the field."""
    scenario = retrying(refusing.url, retry={})
    with pytest.raises(RunRefused) as refused:
        async with prepare_run(settings(tmp_path), scenario, observer=Quiet()) as prepared:
            await prepared.service.execute(scenario, run_id=prepared.run_id, target_url=prepared.target_url)
    assert [p.path for p in refused.value.problems] == ["client.retry.max_retries"]
    assert "505 attempts/s" in str(refused.value)
    assert refusing.arrivals == []


@pytest.mark.slow
async def test_a_run_whose_retries_burst_beyond_the_cap_sends_at_most_the_cap(
    refusing: Refusing, tmp_path: Path
) -> None:
    """A budget bounds retries to 10 % sustained (5.5 attempts/s: within a 6/s cap, so the run is accepted),
    but its reserve of 1,000 lets them burst: the generator's limiter holds what the server receives to the
    cap (6/s plus a second's burst), records the refused retries and marks the run capped."""
    cap = 6.0
    scenario = retrying(refusing.url, retry={"budget": {"ratio": 0.1, "reserve": 1_000}})
    async with prepare_run(settings(tmp_path, cap), scenario, observer=Quiet()) as prepared:
        began = time.monotonic()
        result = await prepared.service.execute(scenario, run_id=prepared.run_id, target_url=prepared.target_url)
        elapsed = time.monotonic() - began
    received = len(refusing.arrivals)
    assert received <= cap * elapsed + cap, (received, elapsed)  # the bucket's bound: rate × T + burst
    assert refusing.most_in_any_second() <= 2 * cap
    assert received >= 10  # it did send: the planned requests and some retries
    assert result.capped
    assert not result.passed
    assert "capped" in [v.name for v in result.verdicts()]
    document = result.to_dict()
    assert document["capped"] is True
    held = document["generator"]["attempt_cap"]
    assert held["rate"] == cap
    assert held["retries_not_sent"] > 0
    # every request the server received is in the result: the attempts, and the calibration probe (refused)
    assert sum(p["attempts"] for p in document["phases"]) + document["prompt_tokens"]["probes"] == received
    assert document["phases"][0]["capped"] > 0


@pytest.mark.slow
async def test_a_concurrency_sweep_against_503_sends_at_most_the_cap(refusing: Refusing, tmp_path: Path) -> None:
    """Two closed-loop clients against an instant 503 sent 1,059 req/s under a 5/s cap; their clients now wait
    for the cap, so the server receives at most the cap, and every step says it was capped (invalid)."""
    sweep = parse_sweep_spec({"mode": "concurrency", "start": 2, "stop": 4, "coarse_steps": 2, "max_steps": 2,
                              "step_s": 1, "warmup_s": 0, "cooldown_s": 0, "variants": ["none"]})  # fmt: skip
    scenario = parse_scenario(_closed_loop_document(refusing.url))
    async with prepare_sweep(settings(tmp_path), scenario, sweep, observer=Quiet()) as handle:
        began = time.monotonic()
        outcome = await handle.run()
        elapsed = time.monotonic() - began
    received = len(refusing.arrivals)
    assert received <= CAP * elapsed + CAP, (received, elapsed)
    assert refusing.most_in_any_second() <= 2 * CAP
    steps = [s for report in outcome.reports for s in report.result.steps]
    assert steps
    assert all(s.generator_limited for s in steps)
    assert all(any("attempt cap" in r for r in s.generator_reasons) for s in steps)


def _closed_loop_document(url: str) -> dict[str, Any]:
    return {
        "name": "closed-flood",
        "seed": 1,
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {
            "url": url,
            "api": "openai-chat",
            "request": {"model": "m", "prompt_tokens": 4, "max_tokens": 4, "stream": False},
        },
        "phases": [{"name": "p", "role": "stress", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
    }
