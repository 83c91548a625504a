"""What a sweep's rate counts: requests, closed-loop clients, or conversations started."""

from __future__ import annotations

from cliffwatch.domain.capacity.sweep_plan import step_scenario
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.services.sweep import unit_of

DOCUMENT = {
    "name": "plain",
    "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 8}},
    "slo": {"e2e_ms": 2000, "timeout_ms": 4000},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson", "rate": 1}}],
}
RATE = parse_sweep_spec({"start": 1, "stop": 8})


def test_a_sweep_of_conversations_counts_its_rate_in_conversations_started() -> None:
    chats = parse_scenario({**DOCUMENT, "sessions": {"turns": 3}})
    assert unit_of(RATE, chats) == "conv/s"
    assert unit_of(RATE, parse_scenario(DOCUMENT)) == "req/s"
    assert unit_of(parse_sweep_spec({"mode": "concurrency", "start": 1, "stop": 4}), chats) == "clients"
    step = step_scenario(chats, 2.0, RATE, None)
    assert step.sessions_for(0) == chats.sessions_for(0)  # the step's arrivals start conversations too
