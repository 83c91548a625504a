"""One pass of the generator loop alone, as a process: ``bench/whole_run.py``'s ``loop`` path.

``bench/generator_fidelity.py`` measures ``OpenLoopGenerator`` in-process against its own server, judged on
schedule lag; ``bench/whole_run.py`` measures ``cliffwatch run`` against the Go arrivals server, judged on
what the server saw. To say how far the whole run path falls behind the loop, both must be measured the same
way in the same sitting: this script is the loop, alone, run the way ``whole_run.py`` runs the CLI — a
process pinned to the client's core, the same scenario file, the same server, no warm-up (the CLI has none)
— with the generator-fidelity benchmark's listener, which keeps only lag and latency. What it leaves out
is exactly the run path: the run's aggregates and time series, live progress, the result, its file.

    .venv/bin/python bench/loop_pass.py SCENARIO.json OUT.json

It writes a result shaped like the parts of ``cliffwatch run --json`` that ``whole_run.from_result`` reads.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.scenario.target_spec import Api
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan

NS_PER_MS = 1_000_000
START_LEAD_NS = 50 * NS_PER_MS  # the schedule starts a moment after set-up, as in the runner


class Latencies:
    """A ``GeneratorListener`` that keeps little more than the generator-fidelity benchmark's does: each
    request's latency the way a run reads it (from its scheduled time: e2e, or ``ttft`` for streams) and
    the counts."""

    def __init__(self, ttft: bool) -> None:
        self.ttft = ttft
        self.latency_ns: list[int] = []
        self.sent = 0
        self.not_sent = 0
        self.failed = 0

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        return None

    def finished(self, record: RequestRecord) -> None:
        if not record.attempts:
            self.not_sent += 1
            return
        self.sent += 1
        last = record.attempts[-1]
        if not last.succeeded:
            self.failed += 1
        elif self.ttft and last.first_token_ns is not None:
            self.latency_ns.append(last.first_token_ns - record.scheduled_ns)
        elif not self.ttft:
            self.latency_ns.append(last.end_ns - record.scheduled_ns)


def percentile(values: list[int], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / NS_PER_MS


async def one_pass(document: dict[str, Any]) -> dict[str, Any]:
    scenario = parse_scenario(document, source="bench")
    streams = scenario.target.api is not Api.HTTP
    clock = MonotonicClock()
    listener = Latencies(ttft=streams)
    async with HttpExecutor(scenario, scenario.target.url) as executor:
        generator = OpenLoopGenerator(scenario, executor, clock)
        await generator.preflight()
        start = clock.now_ns() + START_LEAD_NS
        report = await generator.run(iter_plan(scenario), start_ns=start, listener=listener)
    p99 = percentile(listener.latency_ns, 0.99)
    outcomes = {"ok": listener.sent - listener.failed, "failed": listener.failed, "not_sent": listener.not_sent}
    phase = {"sent": listener.sent, "latency_ms": {"ttft" if streams else "e2e": {"p99": p99}}, "outcomes": outcomes}
    return {"generator": report.to_dict(), "phases": [phase]}


def main(argv: list[str]) -> int:
    scenario_path, out = Path(argv[0]), Path(argv[1])
    document = json.loads(scenario_path.read_text())
    out.write_text(json.dumps(asyncio.run(one_pass(document))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
