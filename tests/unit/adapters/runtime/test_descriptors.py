"""The file descriptor budget: the soft limit raised toward the hard one at start, each run's share of what it
leaves, a start refused when the share is too small, and a pool over its share capped with a note. Limits
are lowered in child processes (``resource.setrlimit`` before the child runs), never in the test's own."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from dataclasses import replace

import pytest

from cliffwatch.adapters.runtime.descriptors import DescriptorBudget, DescriptorsTooFew, within_budget
from cliffwatch.domain.scenario.scenario import parse_scenario

SETTLE = """
import json
from cliffwatch.adapters.runtime.descriptors import DescriptorsTooFew, settle_descriptors
try:
    budget = settle_descriptors(runs={runs}, reserve={reserve})
except DescriptorsTooFew as exc:
    print(json.dumps({{"refused": str(exc)}}))
else:
    print(json.dumps({{"soft": budget.soft, "raised_from": budget.raised_from, "open": budget.open_at_start,
                      "per_run": budget.per_run}}))
"""


def settle_in_child(soft: int, hard: int, *, runs: int, reserve: int) -> dict[str, object]:
    def lowered() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run([sys.executable, "-c", SETTLE.format(runs=runs, reserve=reserve)], preexec_fn=lowered,
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_the_soft_limit_is_raised_to_the_hard_one_and_shared_by_the_runs() -> None:
    """A process started with a soft limit of 300 under a hard one of 900 raises it to 900; after what is open
    and the reserve, each of two runs gets half of the rest."""
    found = settle_in_child(300, 900, runs=2, reserve=100)
    assert (found["soft"], found["raised_from"]) == (900, 300)
    assert isinstance(found["open"], int)
    assert 3 <= found["open"] < 100
    assert found["per_run"] == (900 - found["open"] - 100) // 2


def test_a_limit_that_leaves_too_few_connections_per_run_is_refused_at_start() -> None:
    """A hard limit of 150 cannot hold 8 connections for each of 16 runs after the reserve: refused, with
    what to change."""
    found = settle_in_child(150, 150, runs=16, reserve=64)
    refused = found["refused"]
    assert isinstance(refused, str)
    assert "the file descriptor limit (150, hard 150)" in refused
    assert "at least 8 are needed" in refused
    assert "ulimit -n" in refused


SCENARIO = {
    "name": "many",
    "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
    "target": {"url": "http://127.0.0.1:9", "request": {"model": "m"}},
    "client": {"pool_size": 5_000, "max_in_flight": 20_000},
    "phases": [{"name": "a", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
}
BUDGET = DescriptorBudget(soft=1_024, hard=4_096, raised_from=None, open_at_start=24, reserve=256, runs=2)


def test_a_pool_over_the_runs_share_is_capped_and_the_cap_is_told() -> None:
    """A pool of 5,000 under a budget of 372 connections a run becomes 372, with a note naming both and the
    limit; the rest of the client is as written."""
    scenario = parse_scenario(SCENARIO)
    capped, note = within_budget(scenario, BUDGET)
    assert BUDGET.per_run == 372
    assert capped.client == replace(scenario.client, pool_size=372)
    assert note is not None
    assert "client.pool_size capped from 5,000 to 372 connections" in note
    assert "limit (1024) shared by 2 run(s)" in note


@pytest.mark.parametrize("pool", [1, 372])
def test_a_pool_within_the_share_is_left_alone(pool: int) -> None:
    """A pool the budget holds is not touched and nothing is said."""
    scenario = parse_scenario({**SCENARIO, "client": {"pool_size": pool}})
    assert within_budget(scenario, BUDGET) == (scenario, None)


def test_a_share_too_small_to_run_is_refused_rather_than_left_unlimited() -> None:
    """With a soft limit of 256 and the default reserve of 256 (macOS's defaults), a run's share is 0, which
    aiohttp would take as no limit at all: the run is refused, naming the limit and what to change."""
    budget = DescriptorBudget(soft=256, hard=None, raised_from=None, open_at_start=12, reserve=256, runs=1)
    with pytest.raises(DescriptorsTooFew, match="CLIFFWATCH_FD_RESERVE"):
        within_budget(parse_scenario(SCENARIO), budget)
