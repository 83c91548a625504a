"""Overrides of a scenario (the command line's flags, the API's and schedules' fields): each validated like the
file's own field, naming the flag; nothing else changes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.client_spec import AUTO_WORKERS
from cliffwatch.domain.scenario.guards import ScoreSpec
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.services.overrides import with_overrides
from scenario_documents import builtin_document, full_document, minimal_document


def test_overriding_the_target_url_normalises_it_and_drops_simulator_settings() -> None:
    scenario = parse_scenario(builtin_document())

    overridden = with_overrides(scenario, target_url="http://gpu-box:9000/")

    assert overridden.target.url == "http://gpu-box:9000"
    assert overridden.target.builtin is None
    assert not overridden.target.is_builtin
    assert overridden.target.request == scenario.target.request


def test_overriding_a_real_target_with_builtin_gives_the_simulator_its_default_settings() -> None:
    scenario = parse_scenario(full_document())

    overridden = with_overrides(scenario, target_url="builtin")

    assert overridden.target.is_builtin
    assert overridden.target.builtin == TargetModel()


def test_overriding_a_builtin_target_with_builtin_keeps_the_files_simulator_settings() -> None:
    scenario = parse_scenario(builtin_document())

    assert with_overrides(scenario, target_url="builtin").target.builtin == scenario.target.builtin


def test_overriding_seed_and_threshold_changes_only_those() -> None:
    scenario = parse_scenario(full_document())

    overridden = with_overrides(scenario, seed=99, threshold=90)

    assert overridden.seed == 99
    assert overridden.score == ScoreSpec(threshold=90.0, fast_fail_fraction=scenario.score.fast_fail_fraction)
    assert replace(overridden, seed=scenario.seed, score=scenario.score) == scenario


def test_a_whole_float_seed_override_becomes_the_int_a_file_would_give() -> None:
    overridden = with_overrides(parse_scenario(full_document()), seed=3.0)  # type: ignore[arg-type]

    assert overridden.seed == 3
    assert type(overridden.seed) is int


def test_no_overrides_leave_the_scenario_unchanged() -> None:
    scenario = parse_scenario(full_document())

    assert with_overrides(scenario) == scenario


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"target_url": "ftp://x"}, ["--target: must be 'builtin' or an http(s) URL with a host, got 'ftp://x'"]),
        ({"target_url": ""}, ["--target: must be 'builtin' or an http(s) URL"]),
        ({"seed": -1}, ["--seed: must be >= 0"]),
        ({"seed": 1.5}, ["--seed: must be a whole number, got 1.5"]),
        ({"seed": 2**64}, ["--seed: must be <= 9.22337e+18"]),
        ({"threshold": 101}, ["--threshold: must be <= 100"]),
        ({"threshold": float("nan")}, ["--threshold: must be a finite number"]),
        (
            {"target_url": "nope", "seed": -1, "threshold": -1},
            [
                "--seed: must be >= 0",
                "--target: must be 'builtin' or an http(s) URL with a host, got 'nope'",
                "--threshold: must be >= 0",
            ],
        ),
    ],
)
def test_an_invalid_override_is_reported_like_an_invalid_field(overrides: dict[str, Any], expected: list[str]) -> None:
    scenario = parse_scenario(full_document())

    with pytest.raises(ScenarioInvalid) as caught:
        with_overrides(scenario, **overrides)

    assert sorted(str(p) for p in caught.value.problems) == sorted(expected)


def test_the_workers_override_takes_a_count_or_auto_and_names_a_bad_one() -> None:
    scenario = parse_scenario(minimal_document())
    assert with_overrides(scenario, workers="2").client.workers == 2
    assert with_overrides(scenario, workers="auto").client.workers == AUTO_WORKERS
    assert replace(with_overrides(scenario, workers="2"), client=scenario.client) == scenario
    for bad in ("0", "two"):
        with pytest.raises(ScenarioInvalid) as caught:
            with_overrides(scenario, workers=bad)
        assert [p.path for p in caught.value.problems] == ["--workers"]
