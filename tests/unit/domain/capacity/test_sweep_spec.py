"""Sweep parameters: the API's JSON and the CLI's options read into one ``SweepSpec``, every bad field named
by its path (``sweep.trials``) or its option (``--to``), and the retry-policy variants a sweep repeats under."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.capacity.sweep_spec import (
    AS_WRITTEN,
    MAX_VARIANTS,
    SweepArrival,
    SweepMode,
    SweepSpec,
    parse_sweep_options,
    parse_sweep_spec,
    variant_policy,
)
from cliffwatch.domain.errors import ScenarioInvalid, SweepInvalid
from cliffwatch.domain.scenario.retry import RetryBudget, RetryKind, RetryPolicy

RANGE: dict[str, Any] = {"start": 2, "stop": 10}


def problems(data: object, path: str = "sweep") -> dict[str, str]:
    """Every problem ``parse_sweep_spec`` finds, by path."""
    with pytest.raises(SweepInvalid) as caught:
        parse_sweep_spec(data, path)
    found = {p.path: p.message for p in caught.value.problems}
    assert len(found) == len(caught.value.problems), "one problem per path"
    return found


def test_a_range_takes_the_defaults_for_everything_else() -> None:
    spec = parse_sweep_spec(RANGE)
    assert spec == SweepSpec(start=2.0, stop=10.0)
    assert (spec.mode, spec.arrival, spec.target, spec.trials, spec.variants) == (
        SweepMode.RATE, SweepArrival.POISSON, 0.99, 3, (AS_WRITTEN,))  # fmt: skip
    assert (spec.first_rate, spec.highest_rate) == (2.0, 10.0)


def test_every_field_is_read() -> None:
    data = {"mode": "rate", "start": 1.5, "stop": 30, "target": 0.95, "trials": 2, "step_s": 10, "warmup_s": 2,
            "cooldown_s": 1, "arrival": "constant", "coarse_steps": 4, "resolution": 0.1, "max_steps": 12,
            "max_rate": 40, "variants": ["none", "budget:3"], "confidence": 0.9, "extend_s": 25,
            "growth_check": True, "luck_correction": False, "drain_timeout_s": 45}  # fmt: skip
    spec = parse_sweep_spec(data)
    assert spec == SweepSpec(start=1.5, stop=30.0, target=0.95, trials=2, step_s=10.0, warmup_s=2.0, cooldown_s=1.0,
                             arrival=SweepArrival.CONSTANT, coarse_steps=4, resolution=0.1, max_steps=12,
                             max_rate=40.0, variants=("none", "budget:3"), confidence=0.9,
                             extend_s=25.0, luck_correction=False, drain_timeout_s=45.0)  # fmt: skip
    assert spec.to_dict()["luck_correction"] is False
    assert isinstance(spec.trials, int)
    # every step at its full length, each over the extended window (a growing queue, or the usable rate confirmed)
    assert spec.max_duration_s() == 2 * 12 * (2 + 25 + 1)
    assert spec.to_dict()["drain_timeout_s"] == 45.0


def test_an_extended_step_measures_three_windows_unless_told_otherwise() -> None:
    assert SweepSpec(step_s=10.0).extended_s == 30.0
    assert SweepSpec(step_s=10.0, extend_s=45.0).extended_s == 45.0


def test_to_dict_reads_back_as_the_same_spec() -> None:
    for spec in (SweepSpec(start=2.0, stop=10.0, variants=("as-written", "exponential:4")),
                 SweepSpec(mode=SweepMode.CONCURRENCY, auto=True, max_rate=32.0),
                 SweepSpec(auto=True, start=3.0)):  # fmt: skip
        assert parse_sweep_spec(spec.to_dict()) == spec


def test_the_recheck_is_on_for_auto_sweeps_off_for_ranges_unless_asked_and_counts_one_step_more() -> None:
    auto, ranged = parse_sweep_spec({"auto": True}), parse_sweep_spec(RANGE)
    asked = parse_sweep_spec({**RANGE, "recheck": True})
    refused = parse_sweep_spec({"auto": True, "recheck": False})

    assert [s.recheck for s in (auto, ranged, asked, refused)] == [None, None, True, False]
    assert [s.rechecks for s in (auto, ranged, asked, refused)] == [True, False, True, False]
    assert parse_sweep_spec({"auto": True, "recheck": None}) == auto  # an explicit null is the default
    assert all(parse_sweep_spec(s.to_dict()) == s for s in (auto, asked, refused))
    assert auto.max_duration_s() == (auto.max_steps + 1) * auto.longest_step_s
    assert refused.max_duration_s() == refused.max_steps * refused.longest_step_s
    assert parse_sweep_options({"auto": True, "recheck": False}) == refused


def test_auto_starts_at_the_modes_default_and_goes_up_to_max_rate() -> None:
    rate = parse_sweep_spec({"auto": True})
    clients = parse_sweep_spec({"auto": True, "mode": "concurrency", "max_rate": 64})
    assert (rate.start, rate.first_rate, rate.highest_rate) == (None, 0.5, 1_000.0)
    assert (clients.first_rate, clients.highest_rate) == (1.0, 64.0)
    assert parse_sweep_spec({"auto": True, "start": None, "stop": None}) == rate  # explicit nulls are absent


BAD_FIELDS: list[tuple[dict[str, Any], str, str]] = [
    ({"extend_s": 10}, "sweep.extend_s", "must be > step_s (10): an extended step measures longer"),
    ({"extend_s": 0}, "sweep.extend_s", "must be > 0"),
    ({"growth_check": "yes"}, "sweep.growth_check", "must be true or false, got a string"),
    ({"luck_correction": 1}, "sweep.luck_correction", "must be true or false, got a number"),
    ({"recheck": "no"}, "sweep.recheck", "must be true or false, got a string"),
    ({"mode": "closed"}, "sweep.mode", "must be one of rate, concurrency; got 'closed'"),
    ({"mode": 3}, "sweep.mode", "must be a string, got a number"),
    ({"start": 0}, "sweep.start", "must be > 0"),
    ({"start": "2"}, "sweep.start", "must be a number, got a string"),
    ({"stop": -1}, "sweep.stop", "must be > 0"),
    ({"auto": "yes"}, "sweep.auto", "must be true or false, got a string"),
    ({"target": 1}, "sweep.target", "must be < 1 (an attainment of 100 % can never be shown)"),
    ({"target": 0}, "sweep.target", "must be > 0"),
    ({"trials": 0}, "sweep.trials", "must be >= 1"),
    ({"trials": 11}, "sweep.trials", "must be <= 10"),
    ({"trials": 2.5}, "sweep.trials", "must be a whole number, got 2.5"),
    ({"step_s": 0.5}, "sweep.step_s", "must be >= 1"),
    ({"step_s": 601}, "sweep.step_s", "must be <= 600"),
    ({"warmup_s": -1}, "sweep.warmup_s", "must be >= 0"),
    ({"warmup_s": 301}, "sweep.warmup_s", "must be <= 300"),
    ({"cooldown_s": -0.1}, "sweep.cooldown_s", "must be >= 0"),
    ({"cooldown_s": True}, "sweep.cooldown_s", "must be a number, got a boolean"),
    ({"arrival": "gamma"}, "sweep.arrival", "must be one of poisson, constant; got 'gamma'"),
    ({"coarse_steps": 1}, "sweep.coarse_steps", "must be >= 2"),
    ({"coarse_steps": 51}, "sweep.coarse_steps", "must be <= 50"),
    ({"resolution": 0}, "sweep.resolution", "must be > 0"),
    ({"resolution": 0.6}, "sweep.resolution", "must be <= 0.5"),
    ({"max_steps": 1}, "sweep.max_steps", "must be >= 2"),
    ({"max_steps": 201}, "sweep.max_steps", "must be <= 200"),
    ({"max_rate": 0}, "sweep.max_rate", "must be > 0"),
    ({"confidence": 0.4}, "sweep.confidence", "must be >= 0.5"),
    ({"confidence": 0.9999}, "sweep.confidence", "must be <= 0.999"),
    ({"variants": "none"}, "sweep.variants", "must be a list, got a string"),
    ({"variants": []}, "sweep.variants", "must not be empty"),
    ({"variants": ["sometimes"]}, "sweep.variants[0]",
     "must be as-written, none, immediate:N, exponential:N or budget:N (N from 1 to 10); got 'sometimes'"),
    ({"variants": ["none", "immediate:11"]}, "sweep.variants[1]",
     "must be as-written, none, immediate:N, exponential:N or budget:N (N from 1 to 10); got 'immediate:11'"),
    ({"variants": ["none", "none"]}, "sweep.variants[1]", "none is listed twice"),
    ({"variants": ["as-written", "none", "immediate:1", "immediate:2", "exponential:3", "budget:3"]},
     "sweep.variants", f"at most {MAX_VARIANTS} retry policies per sweep"),
    ({"steps": 4}, "sweep.steps", "unknown key"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "path", "message"), BAD_FIELDS, ids=[p + ":" + str(c) for c, p, _ in BAD_FIELDS])
def test_each_bad_field_is_named_with_what_is_wrong(change: dict[str, Any], path: str, message: str) -> None:
    found = problems({**RANGE, **change})
    # Only the bad field: a wrong start or stop is not also reported as a missing range.
    assert found == {path: message}


def test_a_spec_that_is_not_a_mapping_is_named_by_its_path() -> None:
    assert problems([1, 2]) == {"sweep": "must be a mapping, got a list"}
    assert problems(None, "body.sweep") == {"body.sweep": "must be a mapping, got null"}


def test_every_problem_is_reported_at_once() -> None:
    found = problems({**RANGE, "trials": 0, "arrival": "gamma", "max_steps": 1, "extra": True})
    assert set(found) == {"sweep.trials", "sweep.arrival", "sweep.max_steps", "sweep.extra"}


RULES: list[tuple[dict[str, Any], str, str]] = [
    ({}, "sweep", "give a range (start and stop) or set auto: true"),
    ({"start": 2}, "sweep", "give a range (start and stop) or set auto: true"),
    ({"start": 10, "stop": 10}, "sweep.stop", "must be > start (10)"),
    ({"start": 10, "stop": 5}, "sweep.stop", "must be > start (10)"),
    ({"auto": True, "stop": 10}, "sweep.stop", "give either a range (start and stop) or auto, not both"),
    ({"auto": True, "start": 50, "max_rate": 40}, "sweep.start", "must be < max_rate (40)"),
    ({"auto": True, "mode": "concurrency", "arrival": "constant"}, "sweep.arrival",
     "applies to rate sweeps; a concurrency sweep's clients send back to back"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "path", "message"), RULES, ids=[str(d) for d, _, _ in RULES])
def test_the_rules_between_fields_name_the_field_to_change(data: dict[str, Any], path: str, message: str) -> None:
    assert problems(data) == {path: message}


def test_sweep_invalid_is_a_scenario_invalid_and_says_sweep() -> None:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_sweep_spec({**RANGE, "trials": 0})
    assert isinstance(caught.value, SweepInvalid)
    assert "invalid sweep (1 problem(s))" in str(caught.value)
    assert "sweep.trials: must be >= 1" in str(caught.value)


def test_cli_options_read_as_the_api_json_with_none_for_not_given() -> None:
    options = {"start": 2.0, "stop": 8.0, "auto": None, "target": 0.95, "trials": None, "step_s": 5.0,
               "warmup_s": None, "variants": ["none", "budget:2"]}  # fmt: skip
    assert parse_sweep_options(options) == SweepSpec(start=2.0, stop=8.0, target=0.95, step_s=5.0,
                                                     variants=("none", "budget:2"))  # fmt: skip


OPTION_PROBLEMS: list[tuple[dict[str, Any], str, str]] = [
    ({"start": 4.0, "stop": 2.0}, "--to", "must be > start (4)"),
    ({"start": 1.0, "stop": 2.0, "mode": "open"}, "--concurrency", "must be one of rate, concurrency; got 'open'"),
    ({"start": 1.0, "stop": 2.0, "target": 1.5}, "--attainment",
     "must be < 1 (an attainment of 100 % can never be shown)"),
    ({"start": 1.0, "stop": 2.0, "step_s": 0.1}, "--step-seconds", "must be >= 1"),
    ({"start": 1.0, "stop": 2.0, "warmup_s": -1.0}, "--warmup-seconds", "must be >= 0"),
    ({"start": 1.0, "stop": 2.0, "cooldown_s": -1.0}, "--cooldown-seconds", "must be >= 0"),
    ({"start": 1.0, "stop": 2.0, "max_rate": -1.0}, "--max-rate", "must be > 0"),
    ({"start": 1.0, "stop": 2.0, "trials": 0}, "--trials", "must be >= 1"),
    ({"start": 1.0, "stop": 2.0, "arrival": "burst"}, "--arrival", "must be one of poisson, constant; got 'burst'"),
    ({"auto": True, "stop": 2.0}, "--to", "give either a range (start and stop) or auto, not both"),
    ({"start": 1.0}, "", "give a range (start and stop) or set auto: true"),
    ({"auto": True, "recheck": "no"}, "--recheck", "must be true or false, got a string"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "flag", "message"), OPTION_PROBLEMS, ids=[f for _, f, _ in OPTION_PROBLEMS])
def test_cli_problems_name_the_option(options: dict[str, Any], flag: str, message: str) -> None:
    with pytest.raises(SweepInvalid) as caught:
        parse_sweep_options(options)
    assert [(p.path, p.message) for p in caught.value.problems] == [(flag, message)]
    assert caught.value.source == "sweep options"


def test_cli_variant_problems_name_the_option_and_the_item() -> None:
    with pytest.raises(SweepInvalid) as caught:
        parse_sweep_options({"auto": True, "variants": ["none", "often"]})
    [problem] = caught.value.problems
    assert problem.path == "--retry-variants[1]"
    assert "got 'often'" in problem.message


VARIANTS: list[tuple[str, RetryPolicy | None]] = [
    ("as-written", None),
    ("none", RetryPolicy()),
    ("immediate:3", RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=3)),
    ("exponential:4", RetryPolicy(kind=RetryKind.EXPONENTIAL, max_retries=4, honour_retry_after=True)),
    ("budget:10", RetryPolicy(kind=RetryKind.EXPONENTIAL, max_retries=10, honour_retry_after=True,
                              budget=RetryBudget(ratio=0.1, reserve=10.0))),
]  # fmt: skip


@pytest.mark.parametrize(("variant", "policy"), VARIANTS, ids=[v for v, _ in VARIANTS])
def test_each_variant_stands_for_its_policy(variant: str, policy: RetryPolicy | None) -> None:
    assert variant_policy(variant) == policy


@pytest.mark.parametrize("variant", ["", "sometimes", "immediate", "immediate:0", "budget:11", "exponential:x"])
def test_an_unknown_variant_is_a_value_error_listing_the_choices(variant: str) -> None:
    with pytest.raises(ValueError, match=r"unknown retry variant .* use as-written, none, immediate:N"):
        variant_policy(variant)
