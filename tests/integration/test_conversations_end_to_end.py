"""Conversations and shared prefixes end to end against the built-in target: a multi-turn run counts turns
and conversations, and a capacity sweep of the bundled shared-prefix scenario finds the capacity the
target's prefix cache is worth (docs/scenarios.md, "Conversations and shared prefixes")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.bootstrap.sweep import prepare_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.capacity import CapacityResult
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.services.memory import CollectingObserver

pytestmark = pytest.mark.slow

SCENARIOS = Path(__file__).parents[2] / "scenarios"


def bundled(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text(encoding="utf-8"))
    return loaded


async def test_a_multi_turn_run_counts_every_turn_and_each_conversation_by_how_it_ended() -> None:
    document = bundled("multi-turn-chat")
    document["phases"] = [{"name": "talk", "role": "baseline", "duration_s": 8,
                           "arrival": {"process": "poisson", "rate": 1}}]  # fmt: skip
    scenario = parse_scenario(document)
    async with prepare_run(Settings.from_env({}), scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id="turns", target_url=prepared.target_url)
    (stats,) = result.metrics.conversations
    (phase,) = result.metrics.phases
    assert stats.started >= 4
    assert stats.turns == phase.offered  # goodput counts turns: every turn is one offered request
    assert stats.turns > stats.started
    assert stats.completed + stats.failed + stats.cut == stats.started
    assert stats.failed == 0
    assert stats.completed_on_time == stats.completed  # an idle target keeps every turn on time
    document_out = result.to_dict()
    assert document_out["conversations"]["total"]["started"] == stats.started
    assert document_out["scenario"]["sessions"]["turns"] == "uniform 2..5"


def cache(on: bool) -> Any:
    document = bundled("shared-prefix")
    document["target"]["builtin"]["prefix_caching"] = on
    return parse_scenario(document)


async def sweep(scenario: Any, tmp_path: Path) -> CapacityResult:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    # 4, 6.9 and 12 req/s: without the cache the target saturates near 5.8 req/s (prefilling 2,000 tokens of
    # system prompt every time), with it near 14 (docs/scenarios.md).
    spec = SweepSpec(start=4, stop=12, coarse_steps=3, max_steps=3, target=0.95, trials=1, step_s=4, warmup_s=1,
                     cooldown_s=0.5, arrival=SweepArrival.CONSTANT, growth_check=False)  # fmt: skip
    async with prepare_sweep(Settings(allowlist=allowlist, state_dir=tmp_path), scenario, spec,
                             observer=CollectingObserver()) as handle:  # fmt: skip
        outcome = await handle.run()
    assert outcome.status is RunStatus.SUCCEEDED, outcome.reason
    (report,) = outcome.reports
    return report.result


@pytest.mark.heavy
async def test_the_shared_prefix_sweep_finds_the_capacity_the_prefix_cache_is_worth(tmp_path: Path) -> None:
    cached, uncached = await sweep(cache(True), tmp_path / "on"), await sweep(cache(False), tmp_path / "off")
    shown = [(s.rate, s.on_time, s.offered) for s in (*cached.steps, *uncached.steps)]
    assert cached.usable_rps is not None, shown
    assert uncached.usable_rps is not None, shown
    assert cached.usable_rps >= 1.5 * uncached.usable_rps, shown
    # the server's own view says why: with the cache most prompt tokens were hits, without it none
    hits = [s.server["prefix_cache_hits"]["mean"] / s.server["prefix_cache_queries"]["mean"]
            for s in cached.steps if s.server.get("prefix_cache_queries", {}).get("mean")]  # fmt: skip
    assert hits
    assert max(hits) > 0.9  # the first step starts cold: each system prompt misses once
    assert all(s.server["prefix_cache_hits"]["max"] == 0 for s in uncached.steps)
