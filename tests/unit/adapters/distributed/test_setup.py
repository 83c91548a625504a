"""Where a run's workers go on this machine: `client.workers: auto` takes one a usable core."""

from __future__ import annotations

import pytest

from cliffwatch.adapters.distributed import setup
from cliffwatch.domain.scenario.client_spec import AUTO_WORKERS
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario


def scenario(workers: int | str | None) -> Scenario:
    return parse_scenario({
        "name": "workers",
        "slo": {"e2e_ms": 2000, "timeout_ms": 5000},
        "target": {"url": "builtin", "request": {"model": "sim-llm"}},
        "client": {} if workers is None else {"workers": workers},
        "phases": [{"name": "steady", "role": "baseline", "duration_s": 10,
                    "arrival": {"process": "constant", "rate": 5}}],
    })  # fmt: skip


@pytest.mark.parametrize(("cores", "most", "count"), [(2, 16, 2), (8, 16, 8), (32, 16, 16), (1, 16, 0), (4, 1, 0)])
async def test_auto_takes_one_worker_a_usable_core_and_says_when_this_process_sends(
    monkeypatch: pytest.MonkeyPatch, cores: int, most: int, count: int
) -> None:
    monkeypatch.setattr(setup, "usable_cores", lambda: cores)
    placed = await setup.placement(scenario("auto"), most=most)
    assert placed.count == count
    assert placed.launcher is None
    assert placed.note == (setup.AUTO_IN_PROCESS if count == 0 else None)


async def test_a_count_is_taken_as_asked_and_no_workers_means_this_process() -> None:
    assert (await setup.placement(scenario(3))).count == 3
    assert (await setup.placement(scenario(None))) == setup.Placement(count=0)
    assert scenario("auto").client.workers == AUTO_WORKERS
