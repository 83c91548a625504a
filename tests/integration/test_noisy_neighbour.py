"""The bundled noisy-neighbour scenarios against the built-in target, as `make demo` runs them: first come,
first served lets the batch tenant's burst take the interactive tenant's SLO; a fair share keeps it. Each
run lasts about 35 seconds; the two run side by side (each against its own built-in target, neither
generator-limited), so the test takes about 40."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cliffwatch.adapters.documents.scenario_files import load_scenario
from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.results.result import RunResult
from cliffwatch.services.memory import CollectingObserver

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # the generator must keep its schedule

SCENARIOS = Path(__file__).parents[2] / "scenarios"


async def run(name: str) -> RunResult:
    scenario = load_scenario(str(SCENARIOS / f"{name}.yaml"))
    async with prepare_run(Settings.from_env({}), scenario, observer=CollectingObserver()) as prepared:
        return await prepared.service.execute(scenario, run_id=name, target_url=prepared.target_url)


def isolation(result: RunResult) -> float | None:
    return next(c.value for c in result.score.components if c.name == "isolation")


def burst_on_time(result: RunResult, klass: str) -> float | None:
    metrics = dict(result.metrics.classes)[klass]
    return next(p.on_time_ratio for p in metrics.phases if p.window.name == "batch-burst")


async def test_first_come_first_served_lets_the_burst_take_the_interactive_slo_and_fair_share_keeps_it() -> None:
    # side by side, each against its own built-in target: the two runs share nothing but the machine
    fifo, fair = await asyncio.gather(run("noisy-neighbour"), run("noisy-neighbour-fair"))
    assert not fifo.generator.limited
    assert not fair.generator.limited
    document = fifo.to_dict()
    assert [c["name"] for c in document["classes"]] == ["interactive", "batch"]
    assert [c.name for c in fifo.score.classes] == ["interactive", "batch"]
    # the victim: its rate never rose, yet most of its burst-time requests missed the SLO under FIFO
    fifo_victim, fair_victim = burst_on_time(fifo, "interactive"), burst_on_time(fair, "interactive")
    assert fifo_victim is not None
    assert fair_victim is not None
    assert fifo_victim < 0.6
    assert fair_victim > 0.9
    fifo_isolation, fair_isolation = isolation(fifo), isolation(fair)
    assert fifo_isolation is not None
    assert fair_isolation is not None
    assert fair_isolation > fifo_isolation + 0.3
    assert fair.score.value > fifo.score.value
    interactive = next(c for c in fifo.score.classes if c.name == "interactive")
    assert "interactive" in interactive.summary
