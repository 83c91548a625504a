"""Traffic classes: what a class inherits and overrides, how phases give them arrivals, and what the plan sends."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.arrivals import Mix, Poisson
from cliffwatch.domain.scenario.distributions import Fixed
from cliffwatch.domain.scenario.retry import RetryKind
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.scenario.traffic_classes import DEFAULT
from cliffwatch.domain.security.secrets import SecretRef, SecretScheme
from cliffwatch.domain.traffic.plan import iter_plan

BASE: dict[str, Any] = {
    "name": "tenants",
    "seed": 4,
    "target": {"url": "http://127.0.0.1:8000", "request": {"model": "base", "prompt_tokens": 64, "max_tokens": 32,
                                                           "headers": {"X-Team": "core", "Authorization": "Bearer a"}}},
    "slo": {"ttft_ms": 500, "e2e_ms": 2000, "timeout_ms": 6000},
    "client": {"retry": {"policy": "none"}},
    "classes": {
        "interactive": {},
        "batch": {
            "request": {"model": "batch-lora", "prompt_tokens": 2000, "max_tokens": 256,
                        "headers": {"authorization": {"secret": "env:TENANT_B"}}, "extra_body": {"user": "b"}},
            "slo": {"e2e_ms": 20000, "timeout_ms": 30000},
            "retry": {"policy": "immediate", "max_retries": 2},
            "priority": 5,
        },
    },
    "phases": [
        {"name": "calm", "role": "baseline", "duration_s": 20,
         "arrival": {"interactive": {"process": "poisson", "rate": 4}, "batch": {"process": "constant", "rate": 1}}},
        {"name": "burst", "role": "stress", "duration_s": 20,
         "arrival": {"process": "poisson", "rate": 20, "share": {"interactive": 1, "batch": 3}}},
    ],
}  # fmt: skip


def document(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc.update(changes)
    return doc


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(doc)
    return [str(p) for p in caught.value.problems]


def test_a_class_takes_the_targets_request_and_slo_and_overrides_only_what_it_names() -> None:
    scenario = parse_scenario(document())
    interactive, batch = scenario.classes
    assert interactive.request == scenario.target.request
    assert interactive.slo == scenario.slo
    assert (batch.request.model, batch.request.prompt_tokens, batch.request.max_tokens) == ("batch-lora", Fixed(
        value=2000), Fixed(value=256))  # fmt: skip
    # a header the class names replaces the target's of that name, whatever its case; the others stay
    assert dict(batch.request.headers) == {
        "X-Team": "core",
        "authorization": SecretRef(scheme=SecretScheme.ENV, name="TENANT_B"),
    }
    assert batch.request.extra_body == {"user": "b", "priority": 5}  # the priority travels in the body
    assert (batch.slo.e2e_ms, batch.slo.timeout_ms, batch.slo.ttft_ms) == (20000.0, 30000.0, 500.0)
    assert batch.retry is not None
    assert batch.retry.kind is RetryKind.IMMEDIATE
    assert scenario.retry_for(1, 1).max_retries == 2
    assert scenario.retry_for(1, 0).kind is RetryKind.NONE  # the client's, for a class without its own


def test_a_phase_gives_each_class_its_process_or_shares_one_out() -> None:
    calm, burst = parse_scenario(document()).phases
    assert isinstance(calm.arrival, Mix)
    assert calm.arrival.mean_rate(20) == pytest.approx(5.0)
    assert calm.arrival.class_rate("batch", 20) == pytest.approx(1.0)
    assert calm.arrival.describe() == "interactive: poisson 4/s; batch: constant 1/s"
    assert isinstance(burst.arrival, Mix)
    assert burst.arrival.whole == Poisson(rate=20)
    assert dict(burst.arrival.shares) == {"interactive": 0.25, "batch": 0.75}
    assert burst.arrival.class_rate("batch", 20) == pytest.approx(15.0)


def test_the_plan_sends_each_class_at_its_rate_with_its_own_shape() -> None:
    scenario = parse_scenario(document())
    plan = list(iter_plan(scenario))
    counts = Counter((r.phase, r.klass) for r in plan)
    assert counts[0, 1] == 20  # constant 1/s for 20 s
    assert 50 <= counts[0, 0] <= 110  # poisson 4/s
    assert 0.65 < counts[1, 1] / (counts[1, 0] + counts[1, 1]) < 0.85  # three quarters of the burst
    assert {r.max_tokens for r in plan if r.klass == 1} == {256}
    assert {r.prompt_tokens for r in plan if r.klass == 0} == {64}
    assert [r.scheduled_ns for r in plan] == sorted(r.scheduled_ns for r in plan)
    assert plan == list(iter_plan(scenario))  # the same seed, the same plan


def test_the_first_class_of_a_mix_keeps_the_shapes_a_scenario_without_classes_draws() -> None:
    doc = document()
    doc["target"]["request"]["prompt_tokens"] = {"dist": "uniform", "min": 10, "max": 900}
    with_classes = [r for r in iter_plan(parse_scenario(doc)) if r.klass == 0 and r.phase == 0]
    plain = copy.deepcopy(doc)
    del plain["classes"]
    for phase in plain["phases"]:
        phase["arrival"] = {"process": "poisson", "rate": 4}
    alone = [r for r in iter_plan(parse_scenario(plain)) if r.phase == 0]
    assert [r.prompt_tokens for r in with_classes[:20]] == [r.prompt_tokens for r in alone[:20]]


def test_a_scenario_without_classes_has_its_one_implicit_class() -> None:
    doc = document()
    del doc["classes"]
    for phase in doc["phases"]:
        phase["arrival"] = {"process": "constant", "rate": 2}
    scenario = parse_scenario(doc)
    assert scenario.classes == ()
    (only,) = scenario.traffic_classes
    assert (only.name, only.declared, only.request) == (DEFAULT, False, scenario.target.request)
    assert {r.klass for r in iter_plan(scenario)} == {0}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson",
                                                                                    "rate": 2}}]},
         "phases[0].arrival: with traffic classes, give each class its own process"),
        ({"phases": [{"name": "p", "role": "baseline", "duration_s": 5,
                      "arrival": {"chat": {"process": "poisson", "rate": 2}}}]},
         "phases[0].arrival.chat: names no declared class (interactive, batch)"),
        ({"phases": [{"name": "p", "role": "baseline", "duration_s": 5,
                      "arrival": {"process": "poisson", "rate": 2, "share": {"batch": 0}}}]},
         "phases[0].arrival.share.batch: must be > 0"),
        ({"classes": {"Interactive": {}}}, "classes.Interactive: a class name is lowercase letters"),
        ({"classes": {}}, "classes: must name at least one class"),
        ({"classes": {"a": {"slo": {"e2e_ms": 9000}}}},
         "classes.a.slo.timeout_ms: must be >= e2e_ms (9000): a request cannot be late after it was given up"),
        ({"classes": {"a": {"request": {"stream": False}}}}, "classes.a.request.stream: unknown key"),
        ({"classes": {"a": {"priority": 1.5}}}, "classes.a.priority: must be a whole number, got 1.5"),
        ({"classes": {"a": {"retry": {"policy": "sometimes"}}}}, "classes.a.retry.policy: must be one of"),
    ],
)  # fmt: skip
def test_a_bad_class_or_mix_is_named_with_its_reason(change: dict[str, Any], expected: str) -> None:
    found = problems(document(**change))
    assert any(p.startswith(expected) for p in found), found


def test_a_mix_without_declared_classes_is_refused() -> None:
    doc = document()
    del doc["classes"]
    found = problems(doc)
    assert "phases[0].arrival: gives classes their processes (interactive, batch), but the scenario declares no " \
           "classes" in found  # fmt: skip
    assert "phases[1].arrival.share: shares a process out among traffic classes: declare classes first" in found


def test_a_plain_http_class_may_set_headers_and_a_body_but_no_priority() -> None:
    doc = document(target={"url": "http://127.0.0.1:8000", "api": "http", "request": {"body": {"q": 1}}})
    doc["classes"] = {"a": {"request": {"body": {"q": 2}}}, "b": {"priority": 1}}
    found = problems(doc)
    assert "classes.b.priority: is a field of the OpenAI APIs' bodies (vLLM's priority)" in found
    del doc["classes"]["b"]
    doc["phases"] = [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"a": {"process": "constant",
                                                                                         "rate": 1}}}]  # fmt: skip
    (only,) = parse_scenario(doc).classes
    assert only.request.body == {"q": 2}
