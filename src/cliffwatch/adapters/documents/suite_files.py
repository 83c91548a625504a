"""Game-day suite files, and each experiment's scenario as the suite makes it.

An experiment names a bundled scenario or a file (read as ``cliffwatch run`` reads one), or holds the scenario
itself; the suite's ``target`` and then the experiment's own are laid over the scenario's target, key by key
(``url`` most often). Every scenario is made before anything runs, so a suite with a bad experiment is
refused whole (exit 2) rather than failing halfway through a game day.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cliffwatch.adapters.documents import SCENARIO_LIMITS, DocumentInvalid, load_yaml
from cliffwatch.adapters.documents.scenario_files import MAX_SCENARIO_BYTES, load_document
from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.gameday.suite_spec import ExperimentSpec, SuiteSpec, parse_suite, with_target
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.security.redaction import DEFAULT_RULES, RedactionRules


def load_suite(path: Path) -> SuiteSpec:
    """The suite in the YAML (or JSON) file ``path``; raises ``ScenarioInvalid`` naming the file and field."""
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_SCENARIO_BYTES + 1)
    except OSError as exc:
        raise ScenarioInvalid([Problem(path="", message=f"cannot read: {exc.strerror}")], source=str(path)) from exc
    try:
        document = load_yaml(text, SCENARIO_LIMITS)
    except DocumentInvalid as exc:
        raise ScenarioInvalid([Problem(path="", message=str(exc))], source=str(path)) from exc
    return parse_suite(document, source=str(path))


def experiment_scenarios(suite: SuiteSpec, *, rules: RedactionRules = DEFAULT_RULES) -> list[Scenario]:
    """Each experiment's scenario, in order; raises ``ScenarioInvalid`` for the first that cannot be made,
    naming the experiment."""
    return [experiment_scenario(suite, experiment, rules=rules) for experiment in suite.experiments]


def experiment_scenario(suite: SuiteSpec, experiment: ExperimentSpec, *, rules: RedactionRules = DEFAULT_RULES,
                        ) -> Scenario:  # fmt: skip
    source = f"{suite.name}: experiment {experiment.name}"
    if experiment.inline is not None:
        document: Mapping[str, Any] = experiment.inline
    else:
        assert experiment.scenario is not None
        try:
            document = load_document(experiment.scenario)
        except ScenarioInvalid as exc:
            raise ScenarioInvalid(exc.problems, source=f"{source} ({experiment.scenario})") from exc
    return parse_scenario(with_target(document, suite, experiment), source=source, rules=rules)
