"""target.expect and the judgement of an answer that ended properly: what makes it a whole one."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.completeness import DEFAULT_EXPECTATION, Expectation, shortfall
from cliffwatch.domain.scenario.scenario import parse_scenario


def document(target_extra: dict[str, Any] | None = None, request_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": "expect",
        "slo": {"e2e_ms": 2000, "timeout_ms": 5000},
        "target": {
            "url": "http://127.0.0.1:8000",
            "request": {"model": "m", **(request_extra or {})},
            **(target_extra or {}),
        },
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
    }


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(doc, source="test")
    return [f"{p.path}: {p.message}" for p in caught.value.problems]


def judge(expectation: Expectation = DEFAULT_EXPECTATION, **answer: Any) -> str | None:
    answer.setdefault("finish_reason", "stop")
    answer.setdefault("output_tokens", 5)
    answer.setdefault("max_tokens", 5)
    return shortfall(expectation, **answer)


def test_without_expect_any_real_finish_reason_and_one_token_make_an_answer() -> None:
    target = parse_scenario(document(), source="test").target
    assert target.expect == DEFAULT_EXPECTATION
    for reason in ("stop", "length", "tool_calls", "repetition", "content_filter"):
        assert judge(finish_reason=reason) is None, reason


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_an_aborted_or_failed_generation_is_not_an_answer_by_default(reason: str) -> None:
    """vLLM's abort and error finish reasons end a request that produced no answer."""
    assert judge(finish_reason=reason) == f"incomplete: finish_reason {reason!r}"


def test_no_finish_reason_and_no_tokens_are_incomplete_with_the_reason() -> None:
    assert judge(finish_reason=None) == "incomplete: no finish_reason"
    assert judge(output_tokens=0) == "incomplete: 0 output tokens, expected at least 1"


def test_expect_narrows_finish_reasons_and_raises_the_least_output() -> None:
    expect = parse_scenario(
        document({"expect": {"finish_reasons": ["stop"], "min_output_tokens": 4}}), source="test"
    ).target.expect
    assert expect == Expectation(finish_reasons=frozenset({"stop"}), min_output_tokens=4)
    assert judge(expect, finish_reason="length") == "incomplete: finish_reason 'length', expected 'stop'"
    assert judge(expect, output_tokens=3) == "incomplete: 3 output tokens, expected at least 4"
    assert judge(expect, output_tokens=4) is None


def test_min_output_tokens_zero_accepts_an_empty_answer() -> None:
    expect = parse_scenario(document({"expect": {"min_output_tokens": 0}}), source="test").target.expect
    assert judge(expect, output_tokens=0) is None


def test_exact_output_needs_every_one_of_max_tokens() -> None:
    expect = parse_scenario(document({"expect": {"exact_output": True}}), source="test").target.expect
    assert judge(expect, output_tokens=9, max_tokens=10) == "incomplete: 9 of 10 output tokens (exact_output)"
    assert judge(expect, output_tokens=10, max_tokens=10) is None


def test_ignore_eos_makes_exact_output_the_default_and_it_can_be_turned_off() -> None:
    """vLLM's ignore_eos asks for every token up to max_tokens: a shorter answer was cut."""
    told = document(request_extra={"extra_body": {"ignore_eos": True}})
    assert parse_scenario(told, source="test").target.expect.exact_output is True
    told["target"]["expect"] = {"exact_output": False}
    assert parse_scenario(told, source="test").target.expect.exact_output is False


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ({"finish_reasons": []}, "target.expect.finish_reasons: must not be empty"),
        ({"finish_reasons": ["stop", ""]}, "target.expect.finish_reasons[1]: must be a non-empty string, got ''"),
        ({"finish_reasons": "stop"}, "target.expect.finish_reasons: must be a list, got a string"),
        ({"min_output_tokens": -1}, "target.expect.min_output_tokens: must be >= 0"),
        ({"min_output_tokens": 1.5}, "target.expect.min_output_tokens: must be a whole number, got 1.5"),
        ({"exact_output": "yes"}, "target.expect.exact_output: must be true or false, got a string"),
        ({"exact": True}, "target.expect.exact: unknown key"),
        ([], "target.expect: must be a mapping, got a list"),
    ],
)
def test_a_bad_expect_names_the_field_and_the_reason(expect: object, message: str) -> None:
    assert problems(document({"expect": expect})) == [message]


def test_expect_is_refused_for_plain_http() -> None:
    doc = document({"api": "http", "expect": {"min_output_tokens": 1}})
    doc["target"]["request"] = {}
    assert problems(doc) == ["target.expect: only applies to the OpenAI APIs: a plain http answer has no finish_reason"]
