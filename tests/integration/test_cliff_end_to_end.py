"""End to end against the built-in target: the product's central claims hold on a small, fast model.

The target below (batch 4, 20 ms steps at full batch, 20-token answers) completes about 9.6 requests/s;
the burst offers twice that. Each run lasts about 15 seconds.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.outcomes import Outcome
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.results.run_metrics import merge_phases
from cliffwatch.domain.results.scoring import HIDDEN_OVERLOAD, RETRY_CONTAINMENT
from cliffwatch.domain.scenario.scenario import PhaseRole, parse_scenario
from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.services.memory import CollectingObserver
from loop_watch import frozen_heap

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # the generator must keep its schedule beside the target


@pytest.fixture(autouse=True)
def _run_heap() -> Iterator[None]:
    # The run shares pytest's process, which holds every earlier test's objects, and a full garbage collection
    # walks them all in the loop's thread (CI saw the loop stall 226 ms at 20 req/s, the generator limited).
    # A `cliffwatch run` process holds only its own; frozen, the test measures what the run does.
    with frozen_heap():
        yield


TARGET = {"max_batch": 4, "decode_base_ms": 10, "decode_per_seq_ms": 2.5, "prefill_base_ms": 4}
BURST: dict[str, Any] = {
    "name": "small-burst",
    "seed": 11,
    "target": {
        "url": "builtin",
        "builtin": TARGET,
        "request": {"model": "sim-llm", "prompt_tokens": 32, "max_tokens": 20},
    },
    "slo": {"ttft_ms": 500, "e2e_ms": 1000, "timeout_ms": 4500},
    "client": {"pool_size": 200, "attempt_timeout_ms": 1500},
    "phases": [
        {"name": "baseline", "role": "baseline", "duration_s": 4, "arrival": {"process": "poisson", "rate": 4}},
        {"name": "burst", "role": "stress", "duration_s": 5, "arrival": {"process": "poisson", "rate": 20}},
        {"name": "recovery", "role": "recovery", "duration_s": 6, "arrival": {"process": "poisson", "rate": 4}},
    ],
}


async def run(document: dict[str, Any]) -> RunResult:
    scenario = parse_scenario(document)
    async with prepare_run(Settings.from_env({}), scenario, observer=CollectingObserver()) as prepared:
        return await prepared.service.execute(scenario, run_id="e2e", target_url=prepared.target_url)


def stress_of(result: RunResult) -> Any:
    return merge_phases(result.metrics.by_role(PhaseRole.STRESS))


async def test_the_simulated_capacity_matches_its_model() -> None:
    """The parameters above imply about 9.6 requests/s at saturation: the burst is twice that."""
    model = TargetModel(**TARGET)
    assert model.saturation_rps(32, 20) == pytest.approx(9.6, rel=0.02)


@pytest.mark.alone  # beside the rest of the suite it failed in each of three runs; alone it passes
async def test_a_burst_beyond_capacity_hides_behind_steady_tokens_per_second() -> None:
    """Tokens/s holds near its peak while the on-time share collapses: the hidden-overload flag is raised, and
    quotes the queue the target's own /metrics showed growing meanwhile."""
    watched = copy.deepcopy(BURST)
    watched["target"]["metrics"] = {"interval_ms": 250}
    result = await run(watched)
    assert result.status is RunStatus.SUCCEEDED
    assert not result.generator.limited, result.generator.reasons
    baseline = merge_phases(result.metrics.by_role(PhaseRole.BASELINE))
    stress = stress_of(result)
    assert baseline is not None
    assert baseline.on_time_ratio is not None
    assert baseline.on_time_ratio >= 0.9
    assert stress.on_time_ratio < 0.5 * baseline.on_time_ratio
    assert stress.tokens_per_s > 1.5 * baseline.tokens_per_s
    flag = next(f for f in result.score.flags if f.name == HIDDEN_OVERLOAD)
    assert flag.raised, flag.summary
    assert not result.passed
    server = result.server
    assert server is not None
    assert server.failed == 0
    assert len(server.times_s) >= 4 * 15 - 2  # a scrape every 250 ms of the 15-s run
    # the burst offers twice what the target completes: its own queue grew, and the flag says so
    peak, before = flag.evidence["server_waiting_stress_max"], flag.evidence["server_waiting_baseline"]
    assert isinstance(peak, float)
    assert isinstance(before, float)
    assert before < 1 < 10 < peak
    assert re.search(rf"the server's waiting queue grew from [0-9.]+ to {peak:,.0f} "
                     r"\(cliffwatch_target_waiting_requests\)", flag.summary), flag.summary  # fmt: skip
    document = result.to_dict()
    assert document["phases"][1]["server"]["waiting"]["max"] == peak
    assert all("server" in row for row in document["timeseries"])


async def test_immediate_retries_amplify_the_burst_and_lower_the_score() -> None:
    """With clients retrying immediately, attempts per request in the burst exceed 1.5 and the score falls."""
    plain = await run(BURST)
    storm = copy.deepcopy(BURST)
    storm["client"]["retry"] = {"policy": "immediate", "max_retries": 3, "retry_on": ["timeout", "5xx", "429"]}
    stormy = await run(storm)
    assert stress_of(stormy).amplification > 1.5
    assert stress_of(plain).amplification == pytest.approx(1.0)
    containment = next(c for c in stormy.score.components if c.name == RETRY_CONTAINMENT)
    assert containment.value is not None
    assert containment.value < 0.5
    assert plain.score.value is not None
    assert stormy.score.value is not None
    assert stormy.score.value < plain.score.value


async def test_every_stream_the_built_in_target_interrupts_is_incomplete_and_none_is_on_time() -> None:
    """The built-in target with interrupt_when_full (llama-cpp-python's interrupt_requests) ends streams early
    with [DONE] and no finish_reason. Its own count of them (/metrics) is exactly cliffwatch's incomplete
    count, so not one was taken for an answer; the hidden-overload flag names them."""
    document = copy.deepcopy(BURST)
    document["target"]["builtin"] = {**TARGET, "interrupt_when_full": True}
    scenario = parse_scenario(document)
    async with prepare_run(Settings.from_env({}), scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id="e2e-hollow", target_url=prepared.target_url)
        async with aiohttp.ClientSession() as session, session.get(f"{prepared.target_url}/metrics") as response:
            metrics = await response.text()
    interrupted = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith('cliffwatch_target_requests_total{result="interrupted"}')
    )
    incomplete = sum(p.outcomes[Outcome.INCOMPLETE] for p in result.metrics.phases)
    assert interrupted > 10
    assert incomplete == interrupted
    stress = stress_of(result)
    assert stress.outcomes[Outcome.INCOMPLETE] > 0.3 * stress.offered
    flag = next(f for f in result.score.flags if f.name == HIDDEN_OVERLOAD)
    assert flag.raised
    assert "without a whole answer" in flag.summary
