"""A trace's requests and a dataset's entries against the caps: what is sent, each refusal naming the file's line
and field, never a value; clamping where the scenario asks for it."""

from __future__ import annotations

import dataclasses

from cliffwatch.domain.scenario.dataset import DatasetSizes, LoadedDataset, with_dataset
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.scenario.trace import TraceRequest, TraceRequests, with_traces
from cliffwatch.domain.service.caps import Caps, cap_violations
from cliffwatch.domain.service.file_caps import clamp_dataset, clamp_traces

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
    return with_traces(scenario, {0: TraceRequests.of(requests, digest="d")})


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


def drawing(prompts: list[int], outputs: list[int | None], *, clamp: bool = False, recorded: bool = True) -> object:
    request: dict[str, object] = {"model": "m", "dataset": {"path": "users.jsonl", "format": "jsonl",
                                                             "clamp_to_caps": clamp}}  # fmt: skip
    if not recorded:
        request["max_tokens"] = 50
    scenario = parse_scenario({
        "name": "users", "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "target": {"url": "http://127.0.0.1:8000", "request": request},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 10, "arrival": {"process": "constant", "rate": 1}}],
    })  # fmt: skip
    sizes = DatasetSizes(prompt_tokens=tuple(prompts), output_tokens=tuple(outputs), digest="d",
                         lines=tuple(range(3, 3 + len(prompts))), prompt_fields=("prompt",) * len(prompts))  # fmt: skip
    return with_dataset(scenario, sizes)


def test_a_dataset_entry_over_a_cap_is_named_by_its_line_and_field_never_its_value() -> None:
    problems = cap_violations(drawing([10, 5_000, 20, 7_000], [5, 50_000_000, 5, 5]), CAPS)  # type: ignore[arg-type]
    assert [str(p) for p in problems] == [
        "target.request.dataset.path: users.jsonl line 4: prompt is over the cap of 1,000 tokens a request "
        "(CLIFFWATCH_MAX_PROMPT_TOKENS) (and 1 more entries); clamp_to_caps: true leaves such entries out (prompts) "
        "or clamps them (max_tokens)",
        "target.request.dataset.path: users.jsonl line 4: max_tokens is over the cap of 200 tokens a request "
        "(CLIFFWATCH_MAX_OUTPUT_TOKENS); clamp_to_caps: true leaves such entries out (prompts) or clamps them "
        "(max_tokens)",
    ]
    assert not any("50,000,000" in str(p) or "5,000" in str(p) for p in problems)


def test_recorded_outputs_are_not_judged_when_the_request_sets_max_tokens() -> None:
    """With request.max_tokens the entries' recorded lengths are never sent; the request's own is capped as ever."""
    assert cap_violations(drawing([10, 20], [5, 50_000_000], recorded=False), CAPS) == []  # type: ignore[arg-type]


def test_a_dataset_that_clamps_refuses_nothing_and_clamping_leaves_out_long_prompts_and_clamps_outputs() -> None:
    scenario = drawing([10, 5_000, 20, 30], [5, 5, 900, None], clamp=True)
    assert cap_violations(scenario, CAPS) == []  # type: ignore[arg-type]
    spec = scenario.target.request.dataset  # type: ignore[attr-defined]
    dataset = LoadedDataset(sizes=spec.loaded, prompts=(b"a", b"b", b"c", b"d"), read=4, path="users.jsonl")
    within, left_out, clamped = clamp_dataset(dataset, spec, max_prompt=1_000, max_output=200)
    assert (left_out, clamped) == (1, 1)
    assert within is not None
    assert within.prompts == (b"a", b"c", b"d")
    assert within.sizes.prompt_tokens == (10, 20, 30)
    assert within.sizes.output_tokens == (5, 200, None)
    assert within.sizes.lines == (3, 5, 6)


def test_a_trace_that_clamps_is_clamped_and_counted_within_its_replay() -> None:
    requests = [TraceRequest(time_s=float(i), prompt_tokens=10, output_tokens=5, line=i + 2) for i in range(12)]
    requests[1] = TraceRequest(time_s=1.0, prompt_tokens=5_000, output_tokens=900, line=3)
    requests[11] = TraceRequest(time_s=11.0, prompt_tokens=5_000, output_tokens=5, line=13)  # past the phase
    scenario = replay(requests)
    arrival = scenario.phases[0].arrival  # type: ignore[attr-defined]
    scenario = dataclasses.replace(
        scenario,
        phases=(
            dataclasses.replace(  # type: ignore[type-var]
                scenario.phases[0], arrival=dataclasses.replace(arrival, clamp_to_caps=True)
            ),
        ),
    )  # type: ignore[attr-defined]
    assert cap_violations(scenario, CAPS) == []  # type: ignore[arg-type]
    clamped, prompts, outputs = clamp_traces(scenario, max_prompt=1_000, max_output=200)  # type: ignore[arg-type]
    assert (prompts, outputs) == (1, 1)
    sent = clamped.phases[0].arrival.loaded.requests  # type: ignore[union-attr]
    assert (sent[1].prompt_tokens, sent[1].output_tokens, sent[1].line) == (1_000, 200, 3)
