"""target.cost prices a real run's on-time work: against the built-in target, through ``prepare_run``, into the
result, the scorecard and the report."""

from __future__ import annotations

import pytest
from rich.console import Console

from cliffwatch.adapters.report.render import render_report
from cliffwatch.adapters.terminal.console import scorecard
from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.services.memory import CollectingObserver

SCENARIO = parse_scenario({
    "name": "priced", "seed": 7,
    "slo": {"e2e_ms": 5000, "timeout_ms": 10000},
    "target": {"url": "builtin", "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 8},
               "cost": {"per_replica_hour": 9.0, "replicas": 4}},
    "phases": [{"name": "calm", "role": "baseline", "duration_s": 2, "arrival": {"process": "constant", "rate": 5}}],
})  # fmt: skip


async def test_a_runs_on_time_work_is_priced_by_the_targets_hourly_cost() -> None:
    async with prepare_run(Settings.from_env({}), SCENARIO, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(SCENARIO, run_id="priced", target_url=prepared.target_url)
    document = result.to_dict()
    cost = document["cost"]
    on_time = document["phases"][0]["outcomes"]["on_time"]
    assert on_time == 10  # an idle built-in target serves every request on time
    assert cost["per_hour"] == 36.0
    assert cost["run"]["cost"] == pytest.approx(36.0 * 2 / 3600)  # the phases' two seconds
    assert cost["run"]["per_1000_on_time"] == pytest.approx(1000 * 0.02 / on_time)
    assert cost["run"]["on_time_output_tokens"] == 8 * on_time  # the built-in answers max_tokens each
    assert cost["run"]["per_million_on_time_output_tokens"] == pytest.approx(1e6 * 0.02 / (8 * on_time))
    assert cost["phases"][0]["name"] == "calm"
    assert cost["sentence"] == "$2.00 per 1,000 on-time requests ($250.00 per million on-time output tokens)"

    console = Console(record=True, width=200)
    console.print(scorecard(result))
    assert f"cost: {cost['sentence']}, at $36.00 an hour (4 × $9.00)" in console.export_text()
    assert 'id="cost">Cost: $2.00 per 1,000 on-time requests' in render_report(document)
