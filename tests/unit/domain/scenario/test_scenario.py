"""Scenario documents: what a valid one parses into, every way an invalid one is reported, overrides, hashes."""

from __future__ import annotations

import copy
import datetime
import itertools
import random
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.outcomes import Outcome, Slo
from cliffwatch.domain.scenario.arrivals import Constant, Poisson, RateStep, Spike, Steps, plan_offsets
from cliffwatch.domain.scenario.client_spec import AUTO_WORKERS, ClientSpec
from cliffwatch.domain.scenario.completeness import Expectation
from cliffwatch.domain.scenario.distributions import Choice, Fixed, Uniform
from cliffwatch.domain.scenario.faults import FaultSpec, ProxySpec, Stream, ToxicType
from cliffwatch.domain.scenario.guards import AbortSpec, BaselineGuard, ErrorRateGuard, ScoreSpec
from cliffwatch.domain.scenario.retry import DEFAULT_RETRY_ON, Jitter, RetryBudget, RetryKind, RetryPolicy
from cliffwatch.domain.scenario.scenario import Phase, PhaseRole, Scenario, content_hash, parse_scenario
from cliffwatch.domain.scenario.target_model import Admission, TargetModel
from cliffwatch.domain.scenario.target_spec import HOST_HEADER, Api, RequestTemplate, Target
from cliffwatch.domain.security.redaction import redact_document
from cliffwatch.services.overrides import with_overrides
from scenario_documents import builtin_document, full_document, http_document, minimal_document

DELETE = object()
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _changed(document: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``document`` with each dotted path (``phases[1].arrival.rate``) set, or deleted with DELETE."""
    out = copy.deepcopy(document)
    for path, value in changes.items():
        keys: list[str | int] = [k if k else int(i) for k, i in _PATH_PART.findall(path)]
        node: Any = out
        for key in keys[:-1]:
            node = node[key]
        if value is DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = copy.deepcopy(value)
    return out


def _problems(document: object) -> list[str]:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(document)
    return sorted(str(p) for p in caught.value.problems)


# -- valid documents -------------------------------------------------------------------------------


def test_a_full_document_parses_into_exactly_the_values_it_states() -> None:
    scenario = parse_scenario(full_document())

    expected = Scenario(
        name="burst-and-back",
        description="A burst against a slow target, then the way back.",
        seed=7,
        slo=Slo(e2e_ms=2000, timeout_ms=6000, ttft_ms=500, tpot_ms=40),
        proxies=(ProxySpec(name="llm", listen="127.0.0.1:0", upstream="localhost:8000"),),
        target=Target(
            url="http://localhost:8000",
            api=Api.OPENAI_CHAT,
            via_proxy="llm",
            expect=Expectation(exact_output=True),  # from ignore_eos in extra_body
            request=RequestTemplate(
                method="POST",
                path="/v1/chat/completions",
                headers=(("Authorization", "Bearer token"),),
                model="sim-llm",
                prompt_tokens=Uniform(low=64, high=256),
                max_tokens=Choice(values=(32, 128), weights=(3.0, 1.0)),
                stream=True,
                include_usage=True,
                extra_body={"ignore_eos": True},
            ),
        ),
        client=ClientSpec(
            pool_size=64,
            connect_timeout_ms=1000,
            read_timeout_ms=3000,
            attempt_timeout_ms=5000,
            max_in_flight=2000,
            follow_redirects=True,
            max_redirects=3,
            retry=RetryPolicy(
                kind=RetryKind.EXPONENTIAL,
                max_retries=2,
                retry_on=frozenset({"timeout", "503"}),
                base_ms=50,
                cap_ms=800,
                multiplier=2,
                jitter=Jitter.EQUAL,
                honour_retry_after=True,
                retry_after_cap_ms=30_000,
                budget=RetryBudget(ratio=0.2, reserve=10),
            ),
        ),
        phases=(
            Phase(name="warmup", role=PhaseRole.BASELINE, duration_s=30, arrival=Constant(rate=4)),
            Phase(
                name="burst",
                role=PhaseRole.STRESS,
                duration_s=60,
                arrival=Spike(base_rate=4, burst_rate=40, burst_s=5, period_s=20, offset_s=0),
                retry=RetryPolicy(
                    kind=RetryKind.IMMEDIATE, max_retries=1, base_ms=0, cap_ms=0, multiplier=1, jitter=Jitter.NONE
                ),
                faults=(
                    FaultSpec(
                        proxy="llm",
                        type=ToxicType.LATENCY,
                        stream=Stream.DOWNSTREAM,
                        toxicity=1.0,
                        attributes={"latency": 300, "jitter": 50},
                    ),
                ),
            ),
            Phase(name="cooldown", role=PhaseRole.RECOVERY, duration_s=30, arrival=Poisson(rate=4)),
        ),
        abort=AbortSpec(
            baseline=BaselineGuard(min_on_time_ratio=0.8),
            error_rate=ErrorRateGuard(
                window_s=5, max_ratio=0.5, min_requests=10, outcomes=frozenset({Outcome.ERROR, Outcome.SHED})
            ),
        ),
        score=ScoreSpec(threshold=75, fast_fail_fraction=0.2),
    )
    assert replace(scenario, content_hash="") == expected


def test_a_full_document_answers_its_derived_questions() -> None:
    scenario = parse_scenario(full_document())

    assert scenario.duration_s == 120
    assert scenario.phase_starts() == (0, 30, 90)
    assert scenario.attempt_timeout_ms == 5000
    assert scenario.retry_for(0) is scenario.client.retry
    assert scenario.retry_for(1).kind is RetryKind.IMMEDIATE
    assert scenario.needs_faults()
    assert not scenario.target.is_builtin


def test_a_minimal_document_takes_every_default() -> None:
    scenario = parse_scenario(minimal_document())

    assert scenario.description == ""
    assert scenario.seed == 0
    assert scenario.proxies == ()
    assert scenario.client == ClientSpec()
    assert scenario.client.pool_size == 100
    assert scenario.client.retry.kind is RetryKind.NONE
    assert scenario.client.retry.max_retries == 0
    assert scenario.client.retry.retry_on == DEFAULT_RETRY_ON
    assert scenario.target.api is Api.OPENAI_CHAT
    assert scenario.target.builtin == TargetModel()
    assert scenario.target.via_proxy is None
    assert scenario.target.request == RequestTemplate(
        method="POST",
        path="/v1/chat/completions",
        model="sim-llm",
        prompt_tokens=Fixed(value=128),
        max_tokens=Fixed(value=128),
        stream=True,
        include_usage=False,
    )
    assert scenario.slo == Slo(e2e_ms=2000, timeout_ms=5000)
    assert scenario.attempt_timeout_ms == 5000  # no client override: the SLO's timeout
    assert scenario.phases[0].retry is None
    assert scenario.phases[0].faults == ()
    assert scenario.abort == AbortSpec()
    assert scenario.score == ScoreSpec(threshold=70.0, fast_fail_fraction=0.1)
    assert not scenario.needs_faults()


def test_a_plain_http_target_sends_its_body_as_given_and_never_streams() -> None:
    scenario = parse_scenario(http_document())

    assert scenario.target.api is Api.HTTP
    assert scenario.target.url == "https://api.example.test/base"
    assert scenario.target.request == RequestTemplate(
        method="POST", path="/echo", headers=(("X-Run", "1"),), stream=False, body={"q": [1, "a", None]}
    )
    assert scenario.phases[0].arrival == Steps(steps=(RateStep(rate=1, duration_s=10), RateStep(rate=9, duration_s=10)))


@pytest.mark.parametrize(
    ("api", "method", "path"),
    [
        ("http", "GET", "/"),
        ("openai-completions", "POST", "/v1/completions"),
        ("openai-chat", "POST", "/v1/chat/completions"),
    ],
)
def test_each_api_has_its_own_default_method_and_path(api: str, method: str, path: str) -> None:
    request: dict[str, Any] = {} if api == "http" else {"model": "m"}
    document = _changed(
        minimal_document(), {"target.url": "http://127.0.0.1:8000", "target.api": api, "target.request": request}
    )

    template = parse_scenario(document).target.request

    assert (template.method, template.path) == (method, path)


def test_a_builtin_target_carries_its_simulator_settings() -> None:
    scenario = parse_scenario(builtin_document())

    assert scenario.target.is_builtin
    assert scenario.target.builtin == TargetModel(max_batch=8, admission=Admission.QUEUE_LIMIT, max_queue=16)
    assert scenario.phases[1].faults[1].stream is Stream.UPSTREAM
    assert scenario.phases[1].faults[1].toxicity == pytest.approx(0.1)


# -- invalid documents -----------------------------------------------------------------------------

_ALL_TOXICS = "latency, bandwidth, timeout, reset_peer, slow_close, slicer, limit_data"
_FAILURES = "late, shed, timeout, incomplete, error, redirect"
_RETRY_WORDS = "timeout, connection, truncated, incomplete, 429, 5xx, 4xx or a 4xx/5xx status code"


_INVALID: list[tuple[dict[str, Any], list[str]]] = [
    # numbers and their bounds
    ({"phases[1].arrival": {"process": "poisson", "rate": 0}}, ["phases[1].arrival.rate: must be > 0"]),
    ({"phases[0].duration_s": float("nan")}, ["phases[0].duration_s: must be a finite number"]),
    ({"phases[0].duration_s": float("inf")}, ["phases[0].duration_s: must be a finite number"]),
    ({"phases[0].duration_s": 10**400}, ["phases[0].duration_s: is too large"]),
    ({"phases[0].arrival.rate": 10**400}, ["phases[0].arrival.rate: is too large"]),
    ({"seed": -1}, ["seed: must be >= 0"]),
    ({"seed": 1.5}, ["seed: must be a whole number, got 1.5"]),
    ({"seed": 2**63}, ["seed: must be <= 9.22337e+18"]),
    ({"client.pool_size": 0}, ["client.pool_size: must be >= 1"]),
    ({"score.threshold": 101}, ["score.threshold: must be <= 100"]),
    # cross-field rules
    (
        {"slo.timeout_ms": 1500},
        ["slo.timeout_ms: must be >= e2e_ms (2000): a request cannot be late after it was given up"],
    ),
    (
        {"slo.timeout_ms": 1500, "slo.ttft_ms": 2500},
        [
            "slo.timeout_ms: must be >= e2e_ms (2000): a request cannot be late after it was given up",
            "slo.ttft_ms: must be <= e2e_ms (2000)",
        ],
    ),
    ({"client.attempt_timeout_ms": 7000}, ["client.attempt_timeout_ms: must be <= slo.timeout_ms (6000)"]),
    # unknown keys, at every level
    ({"nmae": "x"}, ["nmae: unknown key"]),
    ({"slo.p99_ms": 100}, ["slo.p99_ms: unknown key"]),
    ({"proxies[0].port": 1}, ["proxies[0].port: unknown key"]),
    ({"target.timeout": 1}, ["target.timeout: unknown key"]),
    ({"target.request.temperature": 0.7}, ["target.request.temperature: unknown key"]),
    ({"target.request.prompt_tokens.mean": 100}, ["target.request.prompt_tokens.mean: unknown key"]),
    ({"client.retries": 3}, ["client.retries: unknown key"]),
    ({"client.retry.budget.burst": 5}, ["client.retry.budget.burst: unknown key"]),
    ({"phases[0].weight": 1}, ["phases[0].weight: unknown key"]),
    ({"phases[0].arrival.burstiness": 2}, ["phases[0].arrival.burstiness: unknown key"]),
    ({"phases[1].retry.jitter": "full"}, ["phases[1].retry.jitter: unknown key"]),
    ({"phases[1].faults[0].severity": 1}, ["phases[1].faults[0].severity: unknown key"]),
    ({"phases[1].faults[0].attributes.delay": 5}, ["phases[1].faults[0].attributes.delay: unknown key"]),
    (
        {"phases[2].arrival": {"process": "step", "steps": [{"rate": 1, "duration_s": 30, "ramp": True}]}},
        ["phases[2].arrival.steps[0].ramp: unknown key"],
    ),
    ({"abort.latency": {}}, ["abort.latency: unknown key"]),
    ({"abort.error_rate.window": 3}, ["abort.error_rate.window: unknown key"]),
    ({"score.pass": 50}, ["score.pass: unknown key"]),
    ({"target.url": "builtin", "target.builtin": {"batch": 8}}, ["target.builtin.batch: unknown key"]),
    # wrong types, missing keys, explicit nulls
    ({"name": 5}, ["name: must be a string, got a number"]),
    ({"name": None}, ["name: must be a string, got null"]),
    ({"description": None}, ["description: must be a string, got null"]),
    ({"slo.ttft_ms": None}, ["slo.ttft_ms: must be a number, got null"]),
    ({"proxies[0].upstream": None}, ["proxies[0].upstream: must be a string, got null"]),
    ({"client": None}, ["client: must be a mapping, got null"]),
    ({"seed": "7"}, ["seed: must be a number, got a string"]),
    ({"slo": [1]}, ["slo: must be a mapping, got a list"]),
    ({"phases": {}}, ["phases: must be a list, got a mapping"]),
    ({"phases": []}, ["phases: must not be empty"]),
    ({"phases[0]": "warmup"}, ["phases[0]: must be a mapping, got a string"]),
    ({"client.pool_size": True}, ["client.pool_size: must be a number, got a boolean"]),
    ({"target.request.stream": "yes"}, ["target.request.stream: must be true or false, got a string"]),
    ({"phases[0].role": "warmup"}, ["phases[0].role: must be one of baseline, stress, recovery; got 'warmup'"]),
    ({"slo.e2e_ms": DELETE}, ["slo.e2e_ms: is required"]),
    ({"target": DELETE}, ["target: is required"]),
    ({"phases[0].arrival": DELETE}, ["phases[0].arrival: is required"]),
    ({"target.request.model": DELETE}, ["target.request.model: is required"]),
    ({"target.request.model": "  "}, ["target.request.model: must not be empty"]),
    (
        {"name": "Burst Test"},
        ["name: must be lowercase letters, digits, '.', '_' or '-' (at most 100), starting with a letter or digit"],
    ),
    (
        {"name": "burst\n"},
        ["name: must be lowercase letters, digits, '.', '_' or '-' (at most 100), starting with a letter or digit"],
    ),
    # an unknown api: only the api is reported, not every request key it would have judged
    (
        {"target.api": "grpc"},
        ["target.api: must be one of openai-chat, openai-completions, http; got 'grpc'"],
    ),
    # phase names and order
    ({"phases[2].name": "warmup"}, ["phases[2].name: duplicate phase name 'warmup'"]),
    (
        {"phases[0].duration_s": 0, "phases[2].name": "burst"},
        ["phases[0].duration_s: must be > 0", "phases[2].name: duplicate phase name 'burst'"],
    ),
    ({"phases[1].role": "baseline"}, ["phases[2].role: a recovery phase must come after a stress phase"]),
    (
        {"phases[0].role": "recovery"},
        ["phases[0].role: a recovery phase must come after a stress phase"],
    ),
    # a stress phase invalid for another reason still counts as the stress before the recovery
    ({"phases[1].duration_s": -5}, ["phases[1].duration_s: must be > 0"]),
    # proxies and the references to them
    ({"phases[1].faults[0].proxy": "db"}, ["phases[1].faults[0].proxy: names no declared proxy (llm)"]),
    ({"target.via_proxy": "db"}, ["target.via_proxy: names no declared proxy (llm)"]),
    (
        {"proxies": DELETE},
        [
            "phases[1].faults[0].proxy: names no declared proxy (none declared)",
            "target.via_proxy: names no declared proxy (none declared)",
        ],
    ),
    (
        {
            "phases[1].faults": [
                {"proxy": "llm", "type": "jitter"},
                {"proxy": "db", "type": "timeout", "attributes": {"timeout": 0}},
            ]
        },
        [
            f"phases[1].faults[0].type: must be one of {_ALL_TOXICS}; got 'jitter'",
            "phases[1].faults[1].proxy: names no declared proxy (llm)",
        ],
    ),
    # a proxy that is invalid for another reason is still declared
    ({"proxies[0].listen": "nowhere"}, ["proxies[0].listen: must be host:port, got 'nowhere'"]),
    ({"proxies": [{"name": "llm"}, {"name": "llm"}]}, ["proxies[1].name: duplicate proxy name 'llm'"]),
    ({"proxies[0].upstream": "localhost:http"}, ["proxies[0].upstream: must be host:port, got 'localhost:http'"]),
    # the target
    ({"target.builtin": {"max_batch": 8}}, ["target.builtin: only applies when url is 'builtin'"]),
    ({"target.url": "builtin", "target.builtin": {"max_batch": 0}}, ["target.builtin.max_batch: must be >= 1"]),
    ({"target.url": "ftp://files"}, ["target.url: must be 'builtin' or an http(s) URL with a host, got 'ftp://files'"]),
    ({"target.url": "http://"}, ["target.url: must be 'builtin' or an http(s) URL with a host, got 'http://'"]),
    ({"target.url": ""}, ["target.url: must be 'builtin' or an http(s) URL"]),
    ({"target.url": 8000}, ["target.url: must be 'builtin' or an http(s) URL"]),
    ({"target.url": "http://host:99999"}, ["target.url: has an invalid port: 'http://host:99999'"]),
    ({"target.url": "http://host/v1?x=1"}, ["target.url: must not carry a query or fragment"]),
    ({"target.url": "http://host/v1#top"}, ["target.url: must not carry a query or fragment"]),
    ({"target.url": "http://[::1"}, ["target.url: is not a valid URL (Invalid IPv6 URL): 'http://[::1'"]),
    (
        {"target.url": "http://host\n/v1"},
        ["target.url: must not contain spaces or control characters, got 'http://host\\n/v1'"],
    ),
    ({"target.request.path": "v1/chat"}, ["target.request.path: must start with '/'"]),
    (
        {"target.request.method": "FETCH"},
        ["target.request.method: must be one of GET, POST, PUT, PATCH, DELETE, HEAD; got 'FETCH'"],
    ),
    # headers
    (
        {"target.request.headers": {"Bad Header": "x"}},
        ["target.request.headers.Bad Header: is not a valid header name"],
    ),
    ({"target.request.headers": {"X-Trace\n": "x"}}, ["target.request.headers.X-Trace\n: is not a valid header name"]),
    (
        {"target.request.headers": {"X-Trace": "a\r\nInjected: yes"}},
        ["target.request.headers.X-Trace: must be a single-line string"],
    ),
    ({"target.request.headers": {"X-Retries": 3}}, ["target.request.headers.X-Retries: must be a single-line string"]),
    (
        {"target.request.headers": {"X-Trace": "a\x00b"}},
        ["target.request.headers.X-Trace: must be a single-line string"],
    ),
    ({"target.request.headers": ["Authorization: x"]}, ["target.request.headers: must be a mapping, got a list"]),
    # the Host is the URL's: the allowlist checks that one, whatever its case in the document
    ({"target.request.headers": {"Host": "prod.internal"}}, [f"target.request.headers.Host: {HOST_HEADER}"]),
    ({"target.request.headers": {"hOsT": "127.0.0.1:8000"}}, [f"target.request.headers.hOsT: {HOST_HEADER}"]),
    # redirects
    ({"client.follow_redirects": "yes"}, ["client.follow_redirects: must be true or false, got a string"]),
    (
        {"client.follow_redirects": False, "client.max_redirects": 3},
        ["client.max_redirects: only applies with follow_redirects: true"],
    ),
    (
        {"client.follow_redirects": True, "client.max_redirects": 21},
        ["client.max_redirects: must be <= 20"],
    ),
    # what carries the load
    ({"client.transport": "curl"}, ["client.transport: must be one of aiohttp, lean; got 'curl'"]),
    # which request keys belong to which api
    ({"target.request.body": {"x": 1}}, ["target.request.body: unknown key"]),
    (
        {"target.api": "http"},
        [
            "target.request.extra_body: unknown key",
            "target.request.include_usage: unknown key",
            "target.request.max_tokens: unknown key",
            "target.request.model: unknown key",
            "target.request.prompt_tokens: unknown key",
            "target.request.stream: unknown key",
        ],
    ),
    # request bodies must be JSON
    ({"target.request.extra_body": [1]}, ["target.request.extra_body: must be a mapping"]),
    (
        {"target.request.extra_body": {"temperature": float("nan")}},
        ["target.request.extra_body.temperature: must be a finite number that fits in a float"],
    ),
    (
        {"target.request.extra_body": {"when": datetime.date(2024, 1, 2)}},
        [
            "target.request.extra_body.when: must be null, true/false, a number, a string, a list or a mapping, "
            "got datetime.date(2024, 1, 2)"
        ],
    ),
    (
        {"target.api": "http", "target.request": {"body": {"ids": [1, {2: "two"}]}}},
        ["target.request.body.ids[1]: keys must be strings, got 2"],
    ),
    # retries and guards
    (
        {"client.retry.retry_on": ["timeout", 200]},
        [f"client.retry.retry_on[1]: must be one of {_RETRY_WORDS}, got 200"],
    ),
    (
        {"abort.error_rate.outcomes": ["error", "on_time", "late", "bogus"]},
        [
            f"abort.error_rate.outcomes[1]: must be one of {_FAILURES}, got 'on_time'",
            f"abort.error_rate.outcomes[3]: must be one of {_FAILURES}, got 'bogus'",
        ],
    ),
    # request sizes: a hard limit, so that building one request's body stays bounded
    (
        {"target.request.prompt_tokens": 1_000_000_000},
        ["target.request.prompt_tokens: must be <= 1e+06"],
    ),
    (
        {"target.request.max_tokens": {"dist": "uniform", "min": 1, "max": 2_000_000}},
        ["target.request.max_tokens.max: must be <= 1e+06"],
    ),
    (
        {"target.request.prompt_tokens": {"dist": "lognormal", "median": 5_000_000, "sigma": 1}},
        ["target.request.prompt_tokens.median: must be <= 1e+06"],
    ),
    (
        {"target.request.prompt_tokens": {"dist": "choice", "values": [64, 10_000_000]}},
        ["target.request.prompt_tokens.values[1]: must be <= 1e+06"],
    ),
    # the plan's size
    (
        {"phases[1].arrival": {"process": "constant", "rate": 40_000}},
        ["phases: plan about 2,400,240 requests; the limit is 2,000,000"],
    ),
    (
        {"phases[0].duration_s": 30_000, "phases[1].duration_s": 30_000, "phases[2].duration_s": 30_000},
        ["phases: last 90000s in all; the limit is 86400s"],
    ),
]


def _case_id(changes: dict[str, Any]) -> str:
    return ",".join(f"{path}={'DELETE' if value is DELETE else repr(value)[:24]}" for path, value in changes.items())


@pytest.mark.parametrize(
    ("changes", "expected"), [pytest.param(changes, expected, id=_case_id(changes)) for changes, expected in _INVALID]
)
def test_an_invalid_document_is_reported_with_path_qualified_messages(
    changes: dict[str, Any], expected: list[str]
) -> None:
    assert _problems(_changed(full_document(), changes)) == sorted(expected)


@pytest.mark.parametrize("document", [None, [], "name: x", 3, True])
def test_a_document_that_is_not_a_mapping_is_reported_as_such(document: object) -> None:
    problems = _problems(document)

    assert len(problems) == 1
    assert problems[0].startswith("must be a mapping, got ")


def test_every_independent_problem_is_reported_at_once() -> None:
    document = _changed(
        full_document(),
        {
            "name": "Not A Slug",
            "slo.e2e_ms": -1,
            "target.url": "ftp://files",
            "phases[0].arrival.rate": -2,
            "score.threshold": 150,
        },
    )

    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(document, source="burst.yaml")

    assert sorted(p.path for p in caught.value.problems) == [
        "name",
        "phases[0].arrival.rate",
        "score.threshold",
        "slo.e2e_ms",
        "target.url",
    ]
    assert caught.value.source == "burst.yaml"
    assert str(caught.value).startswith("burst.yaml: invalid scenario (5 problem(s)):\n  ")


# -- content hash ----------------------------------------------------------------------------------


def _reversed_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed_keys(v) for v in value]
    return value


def test_the_content_hash_ignores_key_order_at_every_depth() -> None:
    document = full_document()
    reordered = _reversed_keys(document)
    assert list(reordered) != list(document)

    assert parse_scenario(reordered).content_hash == parse_scenario(document).content_hash
    assert content_hash(reordered) == content_hash(document)


@pytest.mark.parametrize(
    "changes",
    [{"seed": 8}, {"phases[0].arrival.rate": 5}, {"description": "other"}, {"target.request.headers": {}}],
)
def test_a_different_document_has_a_different_content_hash(changes: dict[str, Any]) -> None:
    assert (
        parse_scenario(_changed(full_document(), changes)).content_hash != parse_scenario(full_document()).content_hash
    )


def test_the_content_hash_is_a_sha256_hex_digest_of_the_document_with_its_credentials_masked() -> None:
    """The hash covers the document as shown (its Authorization masked), so it cannot confirm a guessed key."""
    scenario = parse_scenario(full_document())

    assert re.fullmatch(r"[0-9a-f]{64}", scenario.content_hash)
    assert scenario.content_hash == content_hash(redact_document(full_document()).document)
    assert scenario.content_hash != content_hash(full_document())
    without = _changed(full_document(), {"target.request.headers": {"X-Trace": "1"}})
    assert parse_scenario(without).content_hash == content_hash(without)


# -- properties: no input makes the parser fail in any other way ------------------------------------

_WORDS = (
    "constant", "poisson", "gamma", "step", "spike", "none", "immediate", "exponential", "full", "equal",
    "fixed", "uniform", "lognormal", "choice", "builtin", "http", "openai-chat", "openai-completions",
    "baseline", "stress", "recovery", "latency", "bandwidth", "timeout", "reset_peer", "slow_close", "slicer",
    "limit_data", "upstream", "downstream", "queue_limit", "deadline", "llm", "sim", "warmup", "burst",
    "http://localhost:8000", "http://[::1", "http://h:99999", "host:²", "127.0.0.1:0", "5xx", "429", "503",
    "X-A", "/v1", "error", "shed", "late", "", " ",
)  # fmt: skip
_KEYS = (
    "rate", "process", "name", "role", "steps", "dist", "values", "weights", "min", "max", "median", "sigma",
    "retry", "faults", "attributes", "budget", "builtin", "headers", "body", "extra_body", "via_proxy", "policy",
    "outcomes", "duration_s", "burstiness", "url", "api", "request", "model", "on", "proxy", "type",
)  # fmt: skip
_FRAGMENTS = (
    {"process": "gamma", "rate": 2, "burstiness": 0.25},
    {"process": "step", "steps": [{"rate": 0, "duration_s": 5}, {"rate": 3, "duration_s": 25}]},
    {"process": "spike", "base_rate": 0, "burst_rate": 9, "burst_s": 1, "period_s": 4, "offset_s": 2},
    {"dist": "lognormal", "median": 1e300, "sigma": 5},
    {"dist": "choice", "values": [1, 2], "weights": [1e308, 1e308]},
    {"dist": "uniform", "min": 5, "max": 1},
    {"policy": "exponential", "max_retries": 100, "multiplier": 10, "cap_ms": 1e300, "budget": {"ratio": 1}},
    {"proxy": "llm", "type": "slicer", "attributes": {"average_size": 0}},
    {"proxy": "llm", "type": "bandwidth", "attributes": {"rate": 0}},
    {"max_batch": 4096, "admission": "deadline", "step_jitter": 0.9},
    {"name": "p2", "listen": "[::1]:0"},
    {"name": "x", "role": "recovery", "duration_s": 1, "arrival": {"process": "constant", "rate": 1e9}},
)  # fmt: skip

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=10**6),
    st.sampled_from([0, -1, 2**63, -(2**63), 10**400, 1e-300, 1e308, -0.0]),
    st.sampled_from([5000]).map(lambda digits: 10**digits),  # no repr: built lazily so hypothesis never prints it
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(_WORDS),
)
_json_like = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) in a document, depth first."""
    out: list[tuple[Any, Any]] = []
    keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
    for key in keys:
        out.append((node, key))
        out.extend(_slots(node[key]))
    return out


def _dicts(node: Any) -> list[dict[Any, Any]]:
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    own = [node] if isinstance(node, dict) else []
    return own + [d for child in children for d in _dicts(child)]


def _mangle(document: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    for _ in range(data.draw(st.integers(min_value=1, max_value=5), label="mutations")):
        action = data.draw(st.sampled_from(["delete", "replace", "fragment", "add_key", "duplicate"]), label="action")
        slots = _slots(document)
        if action == "add_key":
            target = data.draw(st.sampled_from(_dicts(document)), label="where")
            target[data.draw(st.sampled_from(_KEYS) | st.text(max_size=6))] = data.draw(_json_like)
            continue
        if not slots:
            continue
        container, key = data.draw(st.sampled_from(slots), label="slot")
        if action == "delete":
            del container[key]
        elif action == "replace":
            container[key] = data.draw(_json_like, label="value")
        elif action == "fragment":
            container[key] = copy.deepcopy(data.draw(st.sampled_from(_FRAGMENTS), label="fragment"))
        elif isinstance(container[key], list) and container[key]:
            container[key].append(copy.deepcopy(container[key][0]))
    return document


def _exercise(scenario: Scenario) -> None:
    """Uses what a run would use first, so a value that validates but cannot be used still fails the property."""
    rng = random.Random(0)
    for phase in scenario.phases:
        list(itertools.islice(plan_offsets(phase.arrival, phase.duration_s, rng), 200))
    for distribution in (scenario.target.request.prompt_tokens, scenario.target.request.max_tokens):
        if distribution is not None:
            for _ in range(50):
                distribution.sample(rng)


def _parses_or_reports(document: object) -> None:
    """The property: a usable Scenario, or ScenarioInvalid with only non-empty messages; any other exception escapes."""
    result: Scenario | ScenarioInvalid
    try:
        result = parse_scenario(document)
    except ScenarioInvalid as exc:
        result = exc
    event("parsed" if isinstance(result, Scenario) else "reported")
    if isinstance(result, ScenarioInvalid):
        assert result.problems
        assert all(isinstance(p.message, str) and p.message.strip() for p in result.problems)
        assert str(result)
    else:
        assert re.fullmatch(r"[0-9a-f]{64}", result.content_hash)
        _exercise(result)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(base=st.sampled_from([full_document, minimal_document, http_document, builtin_document]), data=st.data())
def test_a_mangled_document_either_parses_or_is_reported_never_anything_else(base: Any, data: st.DataObject) -> None:
    _parses_or_reports(_mangle(base(), data))


_top_level = st.one_of(
    _json_like,
    st.dictionaries(
        st.sampled_from(("name", "slo", "target", "phases", "client", "proxies", "abort", "score", "seed")),
        _json_like,
        max_size=9,
    ),
)


@settings(max_examples=500, deadline=None)
@given(document=_top_level)
def test_any_json_like_value_either_parses_or_is_reported_never_anything_else(document: object) -> None:
    _parses_or_reports(document)


def test_the_builtin_target_cannot_be_used_with_the_plain_http_api() -> None:
    """The simulator speaks only the OpenAI API, so `url: builtin` with `api: http` is refused, in the file
    and as a `--target builtin` override of an http scenario."""
    document = {
        "name": "plain",
        "target": {"url": "builtin", "api": "http"},
        "slo": {"e2e_ms": 100, "timeout_ms": 200},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
    }
    with pytest.raises(ScenarioInvalid, match=r"target\.api: the built-in target speaks the OpenAI API"):
        parse_scenario(document)
    document["target"]["url"] = "http://127.0.0.1:8000"  # type: ignore[index]
    scenario = parse_scenario(document)
    with pytest.raises(ScenarioInvalid, match=r"--target: the built-in target speaks the OpenAI API"):
        with_overrides(scenario, target_url="builtin")


def test_slo_ttfa_is_the_first_answer_tokens_bound_between_ttft_and_e2e() -> None:
    document = minimal_document()
    document["slo"] = {"e2e_ms": 2000, "timeout_ms": 5000, "ttft_ms": 300, "ttfa_ms": 1500}
    assert parse_scenario(document).slo == Slo(e2e_ms=2000, timeout_ms=5000, ttft_ms=300, ttfa_ms=1500)
    document["slo"] = {"e2e_ms": 2000, "timeout_ms": 5000, "ttft_ms": 300, "ttfa_ms": 200}
    assert _problems(document) == ["slo.ttfa_ms: must be >= ttft_ms (300): the first answer token is a token too"]
    document["slo"] = {"e2e_ms": 2000, "timeout_ms": 5000, "ttfa_ms": 2500}
    assert _problems(document) == ["slo.ttfa_ms: must be <= e2e_ms (2000)"]
    document["slo"] = {"e2e_ms": 2000, "timeout_ms": 5000, "ttfa_ms": 0}
    assert _problems(document) == ["slo.ttfa_ms: must be > 0"]


# -- client.workers --------------------------------------------------------------------------------


def test_workers_default_to_the_runs_own_process_and_take_a_count_or_auto() -> None:
    assert parse_scenario(minimal_document()).client.workers is None
    assert parse_scenario(_changed(minimal_document(), {"client": {"workers": 3}})).client.workers == 3
    assert parse_scenario(_changed(minimal_document(), {"client": {"workers": "auto"}})).client.workers == AUTO_WORKERS


@pytest.mark.parametrize(
    ("value", "problem"),
    [(0, "client.workers: must be >= 1"), (1.5, "client.workers: must be a whole number"),
     ("many", "client.workers: must be a whole number of processes or auto, got 'many'")],
)  # fmt: skip
def test_a_bad_workers_value_is_named(value: object, problem: str) -> None:
    problems = _problems(_changed(minimal_document(), {"client": {"workers": value}}))
    assert len(problems) == 1
    assert problems[0].startswith(problem)
