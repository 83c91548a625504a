"""A sweep whose prompts cannot be sized says so: the capacity it finds is another workload's.

The loopback server refuses the calibration probes (HTTP 503 to every non-streamed request) and answers the
load, counting three tokens a word: the sweep's prompts go out one word a token, unmeasured, and about three
times the sizes asked by the server's own count. The sweep still measures, and its document, console and
report carry ``workload_mismatch`` with the reason, as a run's do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from rich.console import Console

from cliffwatch.adapters.report.render import render_sweep_report
from cliffwatch.adapters.terminal.sweep_console import sweep_report
from cliffwatch.bootstrap.sweep import prepare_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.services.memory import CollectingObserver
from engines.unsized_server import refuses_probes

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # a sweep: each step must keep its schedule

SPEC = SweepSpec(start=4.0, stop=8.0, coarse_steps=2, trials=1, max_steps=2, step_s=1.5, warmup_s=0.5, cooldown_s=0,
                 arrival=SweepArrival.CONSTANT, recheck=False, drain_timeout_s=5)  # fmt: skip


async def test_a_sweep_whose_calibration_failed_says_its_capacity_is_another_workloads(tmp_path: Path) -> None:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuses_probes)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        scenario = parse_scenario({
            "name": "unsized", "seed": 3,
            "target": {"url": f"http://127.0.0.1:{server.port}", "api": "openai-chat",
                       "request": {"model": "m", "prompt_tokens": 64, "max_tokens": 1, "include_usage": True}},
            "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
            "phases": [{"name": "p", "role": "baseline", "duration_s": 5,
                        "arrival": {"process": "constant", "rate": 1}}],
        }, source="test_sweep_workload")  # fmt: skip
        async with prepare_sweep(Settings(allowlist=allowlist, state_dir=tmp_path), scenario, SPEC,
                                 observer=CollectingObserver()) as handle:  # fmt: skip
            outcome = await handle.run()
    finally:
        await server.close()

    assert outcome.status is RunStatus.SUCCEEDED, outcome.reason
    document = outcome.to_dict()
    assert document["workload_mismatch"] is True
    assert document["workload_mismatch_reason"].startswith("calibration failed: 0 of 4 probes answered")
    assert document["prompt_tokens"]["source"] == "words"
    assert document["prompt_tokens"]["error"]["answers"] > 0
    step = document["variants"][0]["result"]["steps"][0]
    assert step["prompt_error"]["answers"] > 0

    console = Console(record=True, width=250)
    console.print(sweep_report(outcome))
    assert "⚠ workload_mismatch: the prompts sent are not the sizes the scenario asks for" in console.export_text()
    assert 'id="workload-mismatch"' in render_sweep_report(document)
