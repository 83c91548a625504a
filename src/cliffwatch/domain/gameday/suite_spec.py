"""A game-day suite as written: its experiments, their hypotheses, when to stop, whom to tell.

```yaml
name: weekly-llm-gameday
target: {url: http://127.0.0.1:8000}      # default for every experiment, each may override
experiments:
  - scenario: burst-storm                 # a bundled name, a file, or an inline scenario (a mapping)
    expect: {score_at_least: 60}
  - scenario: scenarios/retry-storm.yaml
    expect: {score_at_least: 20, no_hidden_overload: true}
    pause_before_s: 30                    # let the target settle between experiments
stop_when: {hypothesis_broken: false}     # true: stop at the first broken hypothesis
notify:
  - webhook: https://hooks.example.com/T000/B000
    format: slack                         # or generic: a JSON body signed with an HMAC header
    "on": [finished, hypothesis_broken, failed]   # quoted: YAML 1.1 reads a bare on as true
    secret: {secret: "env:GAMEDAY_WEBHOOK_KEY"}
```

Parsing is pure: a scenario given by name or file is kept as that reference, read later by the adapters (with
the data-directory rules of any file a scenario names), and every problem names its field
(``experiments[1].expect.score_at_least: must be <= 100``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.gameday.hypothesis import Hypothesis, parse_hypothesis
from cliffwatch.domain.scenario.notify_spec import WebhookSpec, parse_webhooks
from cliffwatch.domain.validation import Problems, Reader

MAX_EXPERIMENTS = 50
MAX_PAUSE_S = 3600.0
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


class SuiteEvent(StrEnum):
    STARTED = "started"
    FINISHED = "finished"  # every experiment ran (whatever their hypotheses)
    HYPOTHESIS_BROKEN = "hypothesis_broken"
    FAILED = "failed"  # an experiment could not run (the environment), or the suite was stopped


_DEFAULT_EVENTS = (SuiteEvent.FINISHED, SuiteEvent.HYPOTHESIS_BROKEN, SuiteEvent.FAILED)


@dataclass(frozen=True, kw_only=True)
class ExperimentSpec:
    name: str
    scenario: str | None = None  # a bundled scenario's name or a file's path
    inline: Mapping[str, Any] | None = None  # or the scenario itself
    expect: Hypothesis = field(default_factory=Hypothesis)
    pause_before_s: float = 0.0
    target: Mapping[str, Any] | None = None  # this experiment's own target overrides, over the suite's


@dataclass(frozen=True, kw_only=True)
class SuiteSpec:
    name: str
    experiments: tuple[ExperimentSpec, ...]
    target: Mapping[str, Any] | None = None  # overrides every experiment's scenario target (url, api, …)
    stop_on_broken: bool = False
    notify: tuple[WebhookSpec, ...] = ()


def parse_suite(data: object, *, source: str = "suite") -> SuiteSpec:
    """The suite in ``data``; raises ``ScenarioInvalid`` naming every bad field."""
    problems = Problems()
    reader = Reader.of(data, "", problems)
    if reader is None:
        raise ScenarioInvalid(problems.items or [Problem(path="", message="not a suite")], source=source)
    name = reader.string("name")
    if isinstance(name, str) and not _NAME.fullmatch(name):
        reader.error("name", "must be lowercase letters, digits, '.', '_' or '-' (at most 100), starting with a "
                             "letter or digit")  # fmt: skip
    target = _mapping(reader, "target")
    experiments = _experiments(reader)
    stop = reader.mapping("stop_when", None)
    stop_on_broken = False
    if stop is not None:
        stop_on_broken = bool(stop.boolean("hypothesis_broken", False))
        stop.done()
    notify = parse_webhooks(reader, events=tuple(SuiteEvent), defaults=_DEFAULT_EVENTS)
    reader.done()
    if problems or not isinstance(name, str):
        raise ScenarioInvalid(problems.items, source=source)
    return SuiteSpec(name=name, experiments=experiments, target=target, stop_on_broken=stop_on_broken,
                     notify=notify)  # fmt: skip


def with_target(document: Mapping[str, Any], suite: SuiteSpec, experiment: ExperimentSpec) -> dict[str, Any]:
    """``document`` (a scenario's) with the suite's ``target`` and then the experiment's own laid over its target,
    key by key; a copy, deep enough that the document given is left as it was."""
    made = copy.deepcopy(dict(document))
    for overrides in (suite.target, experiment.target):
        if overrides:
            target = made.get("target")
            merged = dict(target) if isinstance(target, Mapping) else {}
            merged.update(copy.deepcopy(dict(overrides)))
            made["target"] = merged
    return made


def target_overrides(suite: SuiteSpec, experiment: ExperimentSpec) -> dict[str, Any]:
    """What the suite and then the experiment lay over the experiment's scenario target."""
    return {**(suite.target or {}), **(experiment.target or {})}


def _mapping(reader: Reader, key: str) -> Mapping[str, Any] | None:
    if not reader.has(key):
        return None
    value = reader.raw(key)
    if not isinstance(value, Mapping):
        reader.error(key, "must be a mapping")
        return None
    return dict(value)


def _experiments(reader: Reader) -> tuple[ExperimentSpec, ...]:
    found: list[ExperimentSpec] = []
    items = list(reader.items("experiments", nonempty=True))
    if len(items) > MAX_EXPERIMENTS:
        reader.error("experiments", f"at most {MAX_EXPERIMENTS} experiments a suite")
    names: set[str] = set()
    for index, (path, item) in enumerate(items):
        one = Reader.of(item, path, reader.problems)
        if one is None:
            continue
        scenario, inline = None, None
        given = one.raw("scenario")
        if isinstance(given, str) and given.strip():
            scenario = given
        elif isinstance(given, Mapping):
            inline = dict(given)
        elif given is not None:
            one.error("scenario", "must be a bundled scenario's name, a file's path, or the scenario itself")
        expect_reader = one.mapping("expect", None)
        expect = Hypothesis() if expect_reader is None else parse_hypothesis(expect_reader)
        pause = one.number("pause_before_s", 0.0, ge=0, le=MAX_PAUSE_S)
        target = _mapping(one, "target")
        name = one.string("name", None) or _default_name(scenario, inline, index)
        if name in names:
            one.error("name", f"{name!r} names another experiment too: give each a name of its own")
        names.add(name)
        one.done()
        if (scenario is None and inline is None) or expect is None or pause is None:
            continue
        found.append(ExperimentSpec(name=name, scenario=scenario, inline=inline, expect=expect,
                                    pause_before_s=float(pause), target=target))  # fmt: skip
    return tuple(found)


def _default_name(scenario: str | None, inline: Mapping[str, Any] | None, index: int) -> str:
    if scenario is not None:
        return scenario.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml")
    named = inline.get("name") if inline is not None else None
    return named if isinstance(named, str) else f"experiment-{index + 1}"
