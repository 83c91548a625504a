"""A scenario's ``notify:``: webhooks for its runs and sweeps, the events each hears, every bad field named."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.notify_spec import (
    RUN_DEFAULTS,
    SWEEP_DEFAULTS,
    RunEvent,
    SweepEvent,
    WebhookFormat,
    WebhookSpec,
    listening,
)
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.secrets import SecretRef
from scenario_documents import minimal_document

HOOK = "http://127.0.0.1:9000/hooks/runs"


def with_notify(notify: object) -> dict[str, Any]:
    return {**minimal_document(), "notify": notify}


def test_a_scenarios_webhooks_read_as_written() -> None:
    scenario = parse_scenario(with_notify([
        {"webhook": HOOK, "on": ["finished", "not_passed"], "secret": {"secret": "env:RUN_KEY"}},
        {"webhook": "https://hooks.example.com/T0/B0", "format": "slack"},
    ]))  # fmt: skip
    signed, slack = scenario.notify
    assert signed == WebhookSpec(url=HOOK, on=("finished", "not_passed"), secret=signed.secret)
    assert isinstance(signed.secret, SecretRef)
    assert slack.format is WebhookFormat.SLACK
    assert slack.on is None  # the defaults of whatever is told: a run's or a sweep's


def test_a_webhook_without_on_hears_a_runs_defaults_for_runs_and_a_sweeps_for_sweeps() -> None:
    (hook,) = parse_scenario(with_notify([{"webhook": HOOK}])).notify
    assert [e for e in RunEvent if hook.listens(e, RUN_DEFAULTS)] == [RunEvent.NOT_PASSED, RunEvent.FAILED,
                                                                       RunEvent.INTERRUPTED]  # fmt: skip
    assert [e for e in SweepEvent if hook.listens(e, SWEEP_DEFAULTS)] == list(SweepEvent)
    (resolved,) = listening([hook], RunEvent.FAILED, RUN_DEFAULTS)
    assert resolved.on == RUN_DEFAULTS


def test_a_webhook_that_names_its_events_hears_only_those_from_runs_and_sweeps_alike() -> None:
    (hook,) = parse_scenario(with_notify([{"webhook": HOOK, "on": ["finished"]}])).notify
    assert hook.listens(RunEvent.FINISHED, RUN_DEFAULTS)
    assert hook.listens(SweepEvent.FINISHED, SWEEP_DEFAULTS)
    assert not hook.listens(RunEvent.FAILED, RUN_DEFAULTS)
    assert listening([hook], SweepEvent.INTERRUPTED, SWEEP_DEFAULTS) == []


def test_a_scenario_without_notify_tells_no_one() -> None:
    assert parse_scenario(minimal_document()).notify == ()


@pytest.mark.parametrize(
    ("notify", "path", "message"),
    [
        ({"webhook": HOOK}, "notify", "must be a list"),
        ([{"webhook": "ftp://127.0.0.1/h"}], "notify[0].webhook", "must be an http(s) URL with a host"),
        ([{}], "notify[0].webhook", "is required"),
        ([{"webhook": HOOK, "on": ["finished", "hypothesis_broken"]}], "notify[0].on[1]",
         "must be one of finished, not_passed, failed, interrupted"),
        ([{"webhook": HOOK, "on": []}], "notify[0].on", "must not be empty"),
        ([{"webhook": HOOK, "format": "teams"}], "notify[0].format", "must be one of"),
        ([{"webhook": HOOK, "secret": "plain-text-key"}], "notify[0].secret", "reference"),
        ([{"webhook": HOOK, "retries": 5}], "notify[0].retries", "unknown key"),
        ([{"webhook": HOOK}] * 11, "notify", "at most 10 webhooks"),
    ],
)  # fmt: skip
def test_a_bad_webhook_names_its_field_and_the_reason(notify: object, path: str, message: str) -> None:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(with_notify(notify))
    found = {p.path: p.message for p in caught.value.problems}
    assert path in found, found
    assert message in found[path], found[path]
