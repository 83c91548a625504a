"""target.cost: the target's hourly cost, as a whole or per replica, and every bad form named."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.cost_spec import CostSpec, money
from cliffwatch.domain.scenario.scenario import parse_scenario

BASE: dict[str, Any] = {
    "name": "priced",
    "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
    "target": {"url": "builtin", "request": {"model": "m"}},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
}


def with_cost(cost: Any) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document["target"]["cost"] = cost
    return document


def test_a_cost_per_hour_or_per_replica_hour_is_the_whole_targets() -> None:
    assert parse_scenario(with_cost({"per_hour": 12.5})).target.cost == CostSpec(per_hour=12.5)
    per_replica = parse_scenario(with_cost({"per_replica_hour": 3.125, "replicas": 4, "currency": "EUR"})).target.cost
    assert per_replica == CostSpec(per_hour=12.5, currency="EUR", per_replica_hour=3.125, replicas=4)
    assert per_replica.describe() == "12.50 EUR an hour (4 × 3.125 EUR)"
    assert parse_scenario(BASE).target.cost is None


@pytest.mark.parametrize(
    ("cost", "path", "message"),
    [
        ({"per_hour": -1}, "target.cost.per_hour", "must be > 0"),
        ({"per_hour": 1, "per_replica_hour": 2}, "target.cost.per_replica_hour", "not both"),
        ({"per_replica_hour": 2}, "target.cost.replicas", "is required with per_replica_hour"),
        ({"replicas": 2}, "target.cost", "give per_hour, or per_replica_hour with replicas"),
        ({}, "target.cost", "give per_hour, or per_replica_hour with replicas"),
        ({"per_hour": 1, "currency": "usd"}, "target.cost.currency", "three-letter ISO 4217"),
        ({"per_hour": 1, "dollars": 1}, "target.cost.dollars", "unknown key"),
        (12.5, "target.cost", "must be a mapping"),
    ],
)
def test_a_bad_cost_names_its_field(cost: Any, path: str, message: str) -> None:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(with_cost(cost))
    found = {p.path: p.message for p in caught.value.problems}
    assert path in found, found
    assert message in found[path]


def test_money_shows_a_price_in_cents_and_a_given_figure_as_given() -> None:
    assert money(0.6013, "USD") == "$0.60"
    assert money(0.004172, "USD") == "$0.00417"
    assert money(1234.5, "EUR") == "1,234.50 EUR"
    assert money(3.125, "USD", exact=True) == "$3.125"
    assert money(12.5, "USD", exact=True) == "$12.50"
