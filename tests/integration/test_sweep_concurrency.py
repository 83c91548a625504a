"""``cliffwatch sweep --concurrency`` against the real built-in target: levels of closed-loop clients.

The target is configured so that each extra client lengthens every step of the batch a lot (5 ms on 15):
throughput grows with the number of clients, and the e2e SLO breaks sharply between 3 clients (p99 about
330 ms) and 4 (every request about 370 ms or more). The scenario's client pool holds only 2 connections:
a concurrency sweep must still give every client a connection of its own, or the levels above 2 would
queue in the client and send no more than 2 do.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.heavy  # sweeps: each step must keep its schedule, two at most at once

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = tempfile.mkdtemp(prefix="cliffwatch-sweep-concurrency-")

SCENARIO = {
    "name": "closed-loop",
    "seed": 3,
    "target": {
        "url": "builtin",
        "builtin": {
            "max_batch": 64,
            "decode_base_ms": 15,
            "decode_per_seq_ms": 5,
            "prefill_base_ms": 2,
            "prefill_per_token_ms": 0,
        },
        "request": {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": 10},
    },
    "slo": {"e2e_ms": 360, "timeout_ms": 3000},
    "client": {"pool_size": 2, "retry": {"policy": "none"}},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 2, "arrival": {"process": "poisson", "rate": 2}}],
}


@pytest.mark.slow
def test_a_concurrency_sweep_finds_a_usable_whole_number_of_clients(tmp_path: Path) -> None:
    scenario = tmp_path / "closed-loop.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "sweep.json"
    env = {**os.environ, "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_STATE_DIR": STATE_DIR}
    env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)

    done = subprocess.run(
        [sys.executable, "-m", "cliffwatch", "sweep", str(scenario), "--concurrency", "--auto",
         "--step-seconds", "3", "--warmup-seconds", "1", "--cooldown-seconds", "0", "--trials", "1",
         "--attainment", "0.9", "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=env, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "closed-loop clients" in done.stdout
    document = json.loads(out.read_text())
    [variant] = document["variants"]
    result = variant["result"]
    steps = {step["rate"]: step for step in result["steps"]}
    summary = {rate: (s["sent_rate"], s["on_time"], s["offered"], s["e2e_ms"]["p99"]) for rate, s in steps.items()}
    assert result["unit"] == "clients"
    assert all(rate == int(rate) and rate >= 1 for rate in steps), summary
    assert result["usable_rps"] is not None, summary
    usable = result["usable_rps"]
    assert usable == int(usable)
    assert 2 <= usable <= 3, summary  # the model's cliff lies between 3 and 4 clients
    assert result["first_bad_rps"] == usable + 1, summary
    assert result["finished_because"] == "bracketed within 1 client"
    # Each level up to the usable one sends more than the one below it (levels above 2 included: the pool
    # was widened to the level); past the cliff, latency, not throughput, is what changes.
    below = sorted(rate for rate in steps if rate <= usable)
    assert below[0] == 1
    sent = [steps[rate]["sent_rate"] for rate in below]
    assert all(later > earlier * 1.1 for earlier, later in itertools.pairwise(sent)), summary
    assert steps[result["first_bad_rps"]]["sent_rate"] > sent[-1], summary
    assert document["usable_rps"] == usable
