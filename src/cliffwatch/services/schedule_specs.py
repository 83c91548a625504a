"""What a client sets of a schedule (``ScheduleSpec``) and how it is judged before it is stored: its name, cron
expression and time zone, and what each fire starts — a scenario's run (or sweep) with its overrides, or a game
day's suite (parsed as ``POST /gamedays`` parses one; its experiments are checked as runs when it fires)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.gameday.suite_spec import parse_suite
from cliffwatch.domain.ports import CronCalendar, ScenarioStore
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.service.runs import CatchUp, Overrides, RunKind
from cliffwatch.services.overrides import with_overrides

MAX_NAME_LENGTH = 200
_OVERRIDE_PATHS = {"--target": "overrides.target_url", "--seed": "overrides.seed", "--threshold": "overrides.threshold"}


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    """What a client sets of a schedule, on create or as a whole on update."""

    name: str
    cron: str  # five fields, minute first; day of week 0 or 7 is Sunday
    timezone: str  # IANA name
    scenario_name: str  # for a suite: its name
    overrides: Overrides = field(default_factory=Overrides)
    enabled: bool = True
    catch_up: CatchUp = CatchUp.SKIP
    sweep: SweepSpec | None = None  # given: each fire queues a sweep with these parameters, not a run
    suite: Mapping[str, Any] | None = None  # given: each fire starts this game day, not a run

    @property
    def kind(self) -> RunKind:
        return RunKind.RUN if self.sweep is None else RunKind.SWEEP


async def spec_problems(spec: ScheduleSpec, calendar: CronCalendar, scenarios: ScenarioStore) -> list[Problem]:
    """Every problem of ``spec``, by field (``name``, ``cron``, ``timezone``, ``scenario_name``, ``overrides.…``,
    ``suite.…``); [] when it may be stored."""
    problems: list[Problem] = []
    if not spec.name.strip():
        problems.append(Problem(path="name", message="must not be empty"))
    elif len(spec.name) > MAX_NAME_LENGTH:
        problems.append(Problem(path="name", message=f"is longer than {MAX_NAME_LENGTH} characters"))
    # the port gives one reason for both; asking about each alone tells which field is wrong
    zone_reason = calendar.validate("* * * * *", spec.timezone)
    cron_reason = calendar.validate(spec.cron, "UTC")
    if zone_reason is not None:
        problems.append(Problem(path="timezone", message=zone_reason))
    if cron_reason is not None:
        problems.append(Problem(path="cron", message=cron_reason))
    elif zone_reason is None and (reason := calendar.validate(spec.cron, spec.timezone)) is not None:
        problems.append(Problem(path="cron", message=reason))
    if spec.suite is not None:
        return problems + _suite_problems(spec)
    return problems + await _scenario_problems(spec, scenarios)


def _suite_problems(spec: ScheduleSpec) -> list[Problem]:
    if spec.sweep is not None:
        return [Problem(path="sweep", message="a schedule fires a suite or a sweep, not both")]
    try:
        parse_suite(spec.suite)
    except ScenarioInvalid as exc:
        return [Problem(path=f"suite.{p.path}" if p.path else "suite", message=p.message) for p in exc.problems]
    return []


async def _scenario_problems(spec: ScheduleSpec, scenarios: ScenarioStore) -> list[Problem]:
    if not spec.scenario_name:
        return [Problem(path="scenario_name", message="must not be empty")]
    version = await scenarios.latest_scenario(spec.scenario_name)
    if version is None:
        return [Problem(path="scenario_name", message=f"no scenario named {spec.scenario_name!r}")]
    o = spec.overrides
    if problems := o.credential_problems():
        return [Problem(path=_OVERRIDE_PATHS[p.path], message=p.message) for p in problems]
    try:
        with_overrides(parse_scenario(version.document), target_url=o.target_url, seed=o.seed, threshold=o.threshold)
    except ScenarioInvalid as exc:
        return [Problem(path=_OVERRIDE_PATHS.get(p.path, "scenario_name"), message=p.message) for p in exc.problems]
    return []
