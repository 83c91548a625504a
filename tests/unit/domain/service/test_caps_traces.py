"""A trace's requests against the caps: what the replay sends, each refusal naming the file's line and column."""

from __future__ import annotations

from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.scenario.trace import TraceRequest, TraceRequests, with_traces
from cliffwatch.domain.service.caps import Caps, cap_violations

CAPS = Caps(max_prompt_tokens=1_000, max_output_tokens=200)


def replay(requests: list[TraceRequest], *, form: str = "azure", window_s: float | None = None) -> object:
    arrival = {"process": "trace", "path": "prod.csv", "format": form}
    if window_s is not None:
        arrival["duration_s"] = window_s
    scenario = parse_scenario({
        "name": "replay", "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m"}},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 10, "arrival": arrival}],
    })  # fmt: skip
    return with_traces(scenario, {0: TraceRequests(requests=tuple(requests), digest="d")})


def test_the_largest_request_over_each_cap_is_named_by_its_line_and_column_never_its_value() -> None:
    requests = [TraceRequest(time_s=float(i), prompt_tokens=10, output_tokens=5, line=i + 2) for i in range(6)]
    requests[2] = TraceRequest(time_s=2.0, prompt_tokens=5_000, output_tokens=5, line=4)
    requests[4] = TraceRequest(time_s=4.0, prompt_tokens=9_000, output_tokens=500, line=6)
    problems = cap_violations(replay(requests), CAPS)  # type: ignore[arg-type]

    assert [str(p) for p in problems] == [
        "phases[0].arrival.path: prod.csv line 6: ContextTokens is over the cap of 1,000 tokens a request "
        "(CLIFFWATCH_MAX_PROMPT_TOKENS) (and 1 more requests of the replay)",
        "phases[0].arrival.path: prod.csv line 6: GeneratedTokens is over the cap of 200 tokens a request "
        "(CLIFFWATCH_MAX_OUTPUT_TOKENS)",
    ]
    assert not any("9,000" in str(p) or "9000" in str(p) for p in problems)


def test_only_what_the_replay_sends_is_judged() -> None:
    """A request of the file outside the phase's window of it is never sent, so it refuses nothing."""
    requests = [TraceRequest(time_s=0.0, prompt_tokens=10, output_tokens=5, line=2),
                TraceRequest(time_s=5.0, prompt_tokens=5_000, output_tokens=5, line=3)]  # fmt: skip
    assert cap_violations(replay(requests, form="jsonl", window_s=2), CAPS) == []  # type: ignore[arg-type]
    assert [p.message.split(":")[0] for p in cap_violations(replay(requests, form="jsonl"), CAPS)] == [  # type: ignore[arg-type]
        "prod.csv line 3"
    ]
