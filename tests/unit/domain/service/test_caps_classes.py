"""Caps with traffic classes: every class's retries and request sizes count, and the problem names the
field that sets them."""

from __future__ import annotations

from typing import Any

from cliffwatch.domain.capacity.sweep_plan import step_scenario
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec, variant_policy
from cliffwatch.domain.scenario.retry import RetryKind
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.service.caps import Caps, cap_violations, class_peaks, sweep_cap_violations

CAPS = Caps(max_offered_rate=100, max_attempt_rate=50, max_prompt_tokens=4096)


def tenants(**batch: Any) -> Any:
    return parse_scenario({
        "name": "tenants",
        "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "prompt_tokens": 100, "max_tokens": 8}},
        "slo": {"e2e_ms": 2000, "timeout_ms": 4000},
        "client": {"retry": {"policy": "none"}},
        "classes": {"chat": {}, "batch": batch},
        "phases": [
            {"name": "mixed", "role": "stress", "duration_s": 10,
             "arrival": {"chat": {"process": "constant", "rate": 10}, "batch": {"process": "constant", "rate": 10}}},
            {"name": "shared", "role": "stress", "duration_s": 10,
             "arrival": {"process": "constant", "rate": 20, "share": {"chat": 3, "batch": 1}}},
        ],
    })  # fmt: skip


def test_each_class_peak_is_its_own_process_or_its_share_of_one() -> None:
    scenario = tenants()
    assert class_peaks(scenario, 0) == [(0, 10.0), (1, 10.0)]
    assert class_peaks(scenario, 1) == [(0, 15.0), (1, 5.0)]


def test_a_class_retrying_under_its_own_policy_is_counted_and_named() -> None:
    """chat 10/s without retries + batch 10/s × (1 + 4): 60 attempts/s over a cap of 50."""
    [problem] = cap_violations(tenants(retry={"policy": "immediate", "max_retries": 4}), CAPS)
    assert problem.path == "classes.batch.retry.max_retries"
    assert "up to 60 attempts/s" in problem.message
    assert "each × (1 + its class's retries, up to 4)" in problem.message


def test_classes_within_the_attempt_cap_pass() -> None:
    """batch 10/s × (1 + 3) + chat 10/s = 50 attempts/s in phase 0; phase 1: 15 + 5 × 4 = 35."""
    assert cap_violations(tenants(retry={"policy": "immediate", "max_retries": 3}), CAPS) == []


def test_a_class_asking_for_a_prompt_over_the_cap_is_named_by_its_own_field() -> None:
    [problem] = cap_violations(tenants(request={"prompt_tokens": 10_000}), CAPS)
    assert problem.path == "classes.batch.request.prompt_tokens"
    assert "up to 10,000 tokens" in problem.message


def test_a_sweep_as_written_counts_each_classs_retries_at_its_share_of_the_step() -> None:
    """The scenario sends 250 chat and 150 batch requests: at 60 req/s, 37.5 % batch with 4 retries each,
    60 × (1 + 0.375 × 4) = 150 attempts/s."""
    spec = parse_sweep_spec({"start": 10, "stop": 60, "variants": ["as-written", "none"]})
    scenario = tenants(retry={"policy": "immediate", "max_retries": 4})
    problems = sweep_cap_violations(scenario, spec, Caps(max_attempt_rate=100))
    assert [p.path for p in problems] == ["sweep.variants[0]"]
    assert "up to 150 attempts/s" in problems[0].message


def test_a_sweep_variant_replaces_a_classs_own_retry_policy() -> None:
    scenario = tenants(retry={"policy": "immediate", "max_retries": 4})
    spec = parse_sweep_spec({"start": 10, "stop": 40, "variants": ["none"]})
    step = step_scenario(scenario, 10.0, spec, variant_policy("none"), variant="none")
    assert all(step.retry_for(0, klass).kind is RetryKind.NONE for klass in range(2))
    as_written = step_scenario(scenario, 10.0, spec, None)
    assert as_written.retry_for(0, 1).max_retries == 4


def test_a_conversation_that_resends_its_history_is_capped_by_its_last_turns_prompt() -> None:
    """6 turns of up to 1,000-token prompts and 500-token answers, after a 2,000-token prefix: the last turn
    carries 2,000 + 6 × 1,000 + 5 × 500 = 10,500 tokens, over a 8,192 cap."""
    scenario = parse_scenario({
        "name": "chats",
        "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "prompt_tokens": 1000,
                                                               "max_tokens": 500}},
        "slo": {"e2e_ms": 2000, "timeout_ms": 4000},
        "sessions": {"turns": 6},
        "prefix": {"groups": 2, "tokens": 2000},
        "phases": [{"name": "p", "role": "stress", "duration_s": 10, "arrival": {"process": "constant", "rate": 1}}],
    })  # fmt: skip
    [problem] = cap_violations(scenario, Caps(max_prompt_tokens=8192))
    assert problem.path == "sessions.turns"
    assert "up to 10,500 tokens" in problem.message
    assert "a 2,000-token prefix and 6 turns" in problem.message
    assert cap_violations(scenario, Caps(max_prompt_tokens=10_500)) == []


def test_a_conversations_turns_count_against_the_request_and_attempt_caps() -> None:
    """20 conversations/s of 4 turns on average (2–6) is about 80 requests/s: over a 50/s attempt cap."""
    scenario = parse_scenario({
        "name": "chats",
        "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "prompt_tokens": 10, "max_tokens": 5}},
        "slo": {"e2e_ms": 2000, "timeout_ms": 4000},
        "sessions": {"turns": {"dist": "uniform", "min": 2, "max": 6}},
        "phases": [{"name": "p", "role": "stress", "duration_s": 10, "arrival": {"process": "constant", "rate": 20}}],
    })  # fmt: skip
    [problem] = cap_violations(scenario, Caps(max_offered_rate=1000, max_attempt_rate=50))
    assert "up to 80 attempts/s" in problem.message
    assert cap_violations(scenario, Caps(max_offered_rate=1000, max_attempt_rate=80)) == []
