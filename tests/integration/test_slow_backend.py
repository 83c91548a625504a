"""The bundled slow-backend scenario through a real Toxiproxy, as `make demo` runs it: the baseline requests still
streaming when the latency toxic comes on are spill-over, counted in the baseline's own figures and left out of
the reference the score compares with. The run lasts its 32 s, nothing shortened (the spill-over depends on the
baseline's rate, the SLO and the toxic); only its proxy is renamed, so it cannot meet another test's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.services.memory import CollectingObserver

pytestmark = pytest.mark.slow

SCENARIO = Path(__file__).parents[2] / "scenarios" / "slow-backend.yaml"


def slow_backend(proxy: str) -> dict[str, Any]:
    """The bundled document with its proxy named ``proxy`` (where it is declared, routed through and faulted)."""
    document = yaml.safe_load(SCENARIO.read_text(encoding="utf-8"))
    (declared,) = document["proxies"]
    declared["name"] = proxy
    document["target"]["via_proxy"] = proxy
    for phase in document["phases"]:
        for fault in phase.get("faults", ()):
            fault["proxy"] = proxy
    return document


async def test_the_baseline_reference_is_clean_and_its_spill_over_is_counted_apart(
    toxiproxy: Any, tmp_path: Path
) -> None:
    """The reference is 100 % on time; the baseline requests the toxic reached are left out of it, said so in the
    evidence and the summary, and still counted (late) in the baseline phase's own row."""
    scenario = parse_scenario(slow_backend(f"it-{uuid.uuid4().hex[:8]}"))
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    config = Settings(allowlist=allowlist, state_dir=tmp_path / "state", toxiproxy_url=toxiproxy.url)
    async with prepare_run(config, scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id=prepared.run_id, target_url=prepared.target_url)
    assert result.status is RunStatus.SUCCEEDED
    document = result.to_dict()
    baseline = document["phases"][0]
    preservation = next(c for c in document["score"]["components"] if c["name"] == "preservation")
    evidence = preservation["evidence"]

    assert evidence["baseline_ratio"] == 1.0
    assert evidence["baseline_on_time"] == evidence["baseline_offered"] > 0
    spill_over = evidence["baseline_spill_over"]
    assert spill_over > 0
    reason = evidence["baseline_spill_over_reason"]
    assert reason.startswith(f"{spill_over} baseline request")
    assert "still in flight when a fault came on" in reason
    assert reason.endswith("left out of the reference")
    assert reason in preservation["summary"]
    # the baseline's own row counts every request it offered, the spill-over too, and the toxic made them late
    assert baseline["offered"] == evidence["baseline_offered"] + spill_over
    assert baseline["outcomes"]["late"] > 0
    assert baseline["on_time_ratio"] < 1.0
    recovery = next(c for c in document["score"]["components"] if c["name"] == "recovery")
    assert recovery["evidence"]["reference_ratio"] == 1.0
