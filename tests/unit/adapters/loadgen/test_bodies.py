"""Request bodies prepared ahead: the same bytes ``json.dumps`` of each request's document gave, for every API
and option, and cheap at the largest prompt validation allows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cliffwatch.adapters.loadgen import bodies as bodies_module
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.loadgen.prompts import prompt_text
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.scenario.target_spec import MAX_PROMPT_TOKENS
from cliffwatch.domain.traffic.plan import PlannedRequest

URL = "http://127.0.0.1:9"


def scenario(api: str = "openai-chat", **request: Any) -> Scenario:
    template = {} if api == "http" else {"model": "m", "prompt_tokens": 40, "max_tokens": 8}
    return parse_scenario({
        "name": "bodies",
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "target": {"url": URL, "api": api, "request": {**template, **request}},
        "phases": [{"name": "p", "role": "stress", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
    })  # fmt: skip


def document_of(plan: Scenario, request: PlannedRequest) -> bytes:
    """The body as it was first built: the whole document encoded for each request."""
    template = plan.target.request
    stream = template.stream
    document: dict[str, Any] = {"model": template.model, "max_tokens": request.max_tokens, "stream": stream}
    prompt = prompt_text(request.id, request.prompt_tokens)
    if plan.target.api.value == "openai-chat":
        document["messages"] = [{"role": "user", "content": prompt}]
    else:
        document["prompt"] = prompt
    if stream and template.include_usage:
        document["stream_options"] = {"include_usage": True}
    if template.extra_body:
        document.update(template.extra_body)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    "plan",
    [
        scenario(),
        scenario("openai-completions"),
        scenario(stream=False),
        scenario(include_usage=True),
        scenario(extra_body={"ignore_eos": True, "temperature": 0.5, "note": 'ünïcode "quoted" \\ back'}),
        scenario(extra_body={"max_tokens": 3}),  # the scenario's own value wins, as before
        scenario("openai-completions", extra_body={"prompt": "fixed"}),
    ],
    ids=["chat", "completions", "no-stream", "usage", "extra", "extra-max-tokens", "extra-prompt"],
)
@pytest.mark.parametrize("words", [0, 1, 5, 5000])
def test_a_body_is_byte_for_byte_the_encoded_document(plan: Scenario, words: int) -> None:
    executor = HttpExecutor(plan, URL)
    for request_id in (0, 7, 4096, 123_456):
        request = PlannedRequest(id=request_id, phase=0, scheduled_ns=0, prompt_tokens=words, max_tokens=17)
        assert executor.body(request) == document_of(plan, request)


@pytest.mark.parametrize(("body", "sent"), [(None, None), ({"q": [1, "two"]}, b'{"q": [1, "two"]}')])
def test_a_plain_http_body_is_the_scenarios_as_given(body: object, sent: bytes | None) -> None:
    plan = scenario("http", **({} if body is None else {"method": "POST", "body": body}))
    assert HttpExecutor(plan, URL).body(PlannedRequest(id=3, phase=0, scheduled_ns=0, prompt_tokens=0,
                                                       max_tokens=0)) == sent  # fmt: skip


def test_a_body_at_the_hard_limit_is_joined_from_prepared_pieces_without_encoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The largest prompt validation allows (1,000,000 words, ~6 MB of body) is joined from text prepared when
    the executor was made: rendering encodes nothing (json.dumps of the document held the event loop 12 ms or
    more for every attempt). What it costs: ``bench/request_bodies.py`` (about 2.4 ms with 30 bodies alive)."""
    executor = HttpExecutor(scenario(prompt_tokens=MAX_PROMPT_TOKENS), URL)

    def no_encoding(*args: object, **kwargs: object) -> str:
        raise AssertionError("a request body was encoded per request")

    monkeypatch.setattr(bodies_module.json, "dumps", no_encoding)
    request = PlannedRequest(id=7919, phase=0, scheduled_ns=0, prompt_tokens=MAX_PROMPT_TOKENS, max_tokens=8)
    body = executor.body(request)
    monkeypatch.undo()
    assert body is not None
    assert len(json.loads(body)["messages"][0]["content"].split(" ")) == MAX_PROMPT_TOKENS


def prefixed(api: str = "openai-chat", **extra: Any) -> Scenario:
    return parse_scenario({
        "name": "bodies",
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "target": {"url": URL, "api": api, "request": {"model": "m", "prompt_tokens": 6, "max_tokens": 8}},
        "prefix": {"groups": 3, "tokens": 20},
        **extra,
        "phases": [{"name": "p", "role": "stress", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
    })  # fmt: skip


def test_a_shared_prefix_is_a_system_message_the_same_for_its_group_with_the_buster_after_it() -> None:
    executor = HttpExecutor(prefixed(), URL)
    first, second, other = (json.loads(executor.body(PlannedRequest(
        id=rid, phase=0, scheduled_ns=0, prompt_tokens=6, max_tokens=8, prefix=group)) or b"")
        for rid, group in ((1, 2), (2, 2), (3, 0)))  # fmt: skip
    system, user = first["messages"]
    assert system["role"] == "system"
    assert len(system["content"].split()) == 20
    assert second["messages"][0] == system  # byte for byte the same prefix: a cache can reuse it
    assert other["messages"][0] != system
    assert user == {"role": "user", "content": prompt_text(1, 6)}  # the request's own tag after the prefix
    unprefixed = json.loads(executor.body(PlannedRequest(id=4, phase=0, scheduled_ns=0, prompt_tokens=6,
                                                         max_tokens=8)) or b"")  # fmt: skip
    assert unprefixed["messages"] == [{"role": "user", "content": prompt_text(4, 6)}]


def test_a_completions_prompt_opens_with_the_prefix_text() -> None:
    executor = HttpExecutor(prefixed("openai-completions"), URL)
    body = json.loads(executor.body(PlannedRequest(id=5, phase=0, scheduled_ns=0, prompt_tokens=6, max_tokens=8,
                                                   prefix=1)) or b"")  # fmt: skip
    words = body["prompt"].split()
    assert len(words) == 26
    assert " ".join(words[20:]) == prompt_text(5, 6)


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_a_conversations_next_turn_carries_its_history_with_the_real_reply(api: str) -> None:
    plan = prefixed(api, sessions={"turns": 3})
    bodies = bodies_module.RequestBodies(plan, prefix=plan.prefix_for(0))
    first = PlannedRequest(id=9, phase=0, scheduled_ns=0, prompt_tokens=6, max_tokens=8, prefix=1, conversation=9,
                           turn=1, turns=3)  # fmt: skip
    reply = 'Sure: "quoted", ünïcode\nand a newline'
    history = bodies.turn(first, reply)
    second = PlannedRequest(id=77, phase=0, scheduled_ns=0, prompt_tokens=6, max_tokens=8, prefix=1, conversation=9,
                            turn=2, turns=3)  # fmt: skip
    body = json.loads(bodies.render(second, history) or b"")
    if api == "openai-chat":
        assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
        assert body["messages"][1]["content"] == prompt_text(9, 6)
        assert body["messages"][2]["content"] == reply
        assert body["messages"][3]["content"] == prompt_text(77, 6)
    else:
        prompt = body["prompt"]
        assert prompt.index(prompt_text(9, 6)) < prompt.index(reply) < prompt.index(prompt_text(77, 6))


def test_the_next_prompts_never_repeat_a_plans_text() -> None:
    """A sweep's steps all number requests from 0: each step asks for fresh prompts, so a server's prefix cache
    cannot serve request 7 of one step from request 7 of the last."""
    plan = scenario()
    executor = HttpExecutor(plan, URL)
    request = PlannedRequest(id=7, phase=0, scheduled_ns=0, prompt_tokens=40, max_tokens=8)
    first = json.loads(executor.body(request) or b"")["messages"][0]["content"]
    executor.next_prompts()
    second = json.loads(executor.body(request) or b"")["messages"][0]["content"]
    assert first == prompt_text(7, 40)
    assert second == prompt_text(7 + (1 << 28), 40)
    # The tag opens the prompt, and a prefix cache's block hashes chain from the first block: nothing after it
    # can be found in the cache once the tag differs.
    assert first.split()[0] != second.split()[0]
