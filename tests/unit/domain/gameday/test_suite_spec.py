"""A game-day suite as written: experiments, hypotheses, stop rule and webhooks, every bad field named."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.gameday.hypothesis import Hypothesis
from cliffwatch.domain.gameday.suite_spec import SuiteEvent, parse_suite
from cliffwatch.domain.scenario.notify_spec import WebhookFormat
from cliffwatch.domain.security.secrets import SecretRef

SUITE: dict[str, Any] = {
    "name": "weekly-llm-gameday",
    "target": {"url": "http://127.0.0.1:8000"},
    "experiments": [
        {"scenario": "burst-storm", "expect": {"score_at_least": 60}},
        {"scenario": "scenarios/retry-storm.yaml", "expect": {"score_at_least": 20, "no_hidden_overload": True},
         "pause_before_s": 30},
        {"scenario": {"name": "inline-one", "phases": []}, "target": {"url": "http://127.0.0.1:9000"}},
    ],
    "stop_when": {"hypothesis_broken": True},
    "notify": [{"webhook": "https://hooks.example.com/T000/B000", "format": "slack",
                "on": ["finished", "hypothesis_broken"]},
               {"webhook": "http://127.0.0.1:9999/hook", "secret": {"secret": "env:GAMEDAY_KEY"}}],
}  # fmt: skip


def test_the_issues_suite_reads_as_written() -> None:
    suite = parse_suite(SUITE)
    assert suite.name == "weekly-llm-gameday"
    assert suite.target == {"url": "http://127.0.0.1:8000"}
    assert [e.name for e in suite.experiments] == ["burst-storm", "retry-storm", "inline-one"]
    first, second, third = suite.experiments
    assert first.scenario == "burst-storm"
    assert first.expect == Hypothesis(score_at_least=60)
    assert second.pause_before_s == 30.0
    assert second.expect.absent == ("hidden_overload",)
    assert third.inline == {"name": "inline-one", "phases": []}
    assert third.target == {"url": "http://127.0.0.1:9000"}
    assert suite.stop_on_broken is True
    slack, generic = suite.notify
    assert slack.format is WebhookFormat.SLACK
    assert slack.on == (SuiteEvent.FINISHED, SuiteEvent.HYPOTHESIS_BROKEN)
    assert generic.format is WebhookFormat.GENERIC
    assert generic.on == (SuiteEvent.FINISHED, SuiteEvent.HYPOTHESIS_BROKEN, SuiteEvent.FAILED)
    assert isinstance(generic.secret, SecretRef)


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"experiments": []}, "experiments", "must not be empty"),
        ({"experiments": [{"expect": {}}]}, "experiments[0].scenario", "is required"),
        ({"experiments": [{"scenario": 3}]}, "experiments[0].scenario", "a bundled scenario's name"),
        ({"experiments": [{"scenario": "a", "expect": {"score_at_least": 101}}]},
         "experiments[0].expect.score_at_least", "must be <= 100"),
        ({"experiments": [{"scenario": "a"}, {"scenario": "a"}]}, "experiments[1].name", "names another experiment"),
        ({"notify": [{"webhook": "ftp://x"}]}, "notify[0].webhook", "http(s) URL"),
        ({"notify": [{"webhook": "http://127.0.0.1/h", "on": ["sometimes"]}]}, "notify[0].on[0]", "must be one of"),
        ({"notify": [{"webhook": "http://127.0.0.1/h", "secret": "plain-text"}]}, "notify[0].secret", "reference"),
        ({"stop_when": {"hypothesis_broken": "yes"}}, "stop_when.hypothesis_broken", "true or false"),
        ({"name": "Weekly Game Day"}, "name", "lowercase"),
        ({"extra": 1}, "extra", "unknown key"),
    ],
)  # fmt: skip
def test_a_bad_suite_names_the_field_and_the_reason(change: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_suite({**SUITE, **change})
    found = {p.path: p.message for p in caught.value.problems}
    assert path in found, found
    assert message in found[path]
