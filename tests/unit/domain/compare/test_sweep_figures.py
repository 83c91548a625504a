"""Two sweeps compared: usable capacity by the brackets each found, and the on-time share at shared rates."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

from cliffwatch.domain.compare.comparison import Side, compare
from cliffwatch.domain.compare.family import Change

FIXTURE = Path(__file__).parents[3] / "fixtures" / "reports" / "sweep-retries.json"  # a real sweep's document


def sweep() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(FIXTURE.read_text())
    return document


def by_name(document: dict[str, Any], scope: str, name: str) -> dict[str, Any]:
    return next(f for f in document["figures"] if f["scope"] == scope and f["figure"] == name)


def test_the_same_sweep_finds_no_difference_in_capacity_or_at_any_rate() -> None:
    found = compare(Side(label="a", document=sweep()), Side(label="b", document=sweep()), rng=random.Random(0))
    assert found.kind == "sweep"
    assert found.verdict is Change.NO_DIFFERENCE
    usable = by_name(found.to_dict(), "variant none", "usable_capacity")
    assert usable["a"] == usable["b"] == 13.5
    assert usable["a_interval"] == {"low": 13.5, "high": 14.0}  # usable up to the first bad rate
    assert (
        by_name(found.to_dict(), "variant none · at 14 req/s", "on_time_share")["change"] == "no detectable difference"
    )


def test_a_sweep_that_fell_short_where_a_served_regressed() -> None:
    b = sweep()
    result = b["variants"][0]["result"]
    result["usable_rps"], result["first_bad_rps"] = 8.0, 12.0
    for rate in result["rates"]:
        if rate["rate"] >= 12.0:
            rate["verdict"], rate["pooled"] = "bad", {**rate["pooled"], "on_time": rate["pooled"]["offered"] // 3}
    found = compare(Side(label="a", document=sweep()), Side(label="b", document=b), rng=random.Random(0)).to_dict()
    assert found["verdict"] == "regressed"
    assert by_name(found, "variant none", "usable_capacity")["change"] == "regressed"
    assert by_name(found, "variant none · at 13 req/s", "on_time_share")["change"] == "regressed"
    assert by_name(found, "variant immediate:3", "usable_capacity")["change"] == "no detectable difference"
    improved = compare(Side(label="b", document=b), Side(label="a", document=copy.deepcopy(sweep())),
                       rng=random.Random(0)).to_dict()  # fmt: skip
    assert by_name(improved, "variant none", "usable_capacity")["change"] == "improved"


def test_brackets_that_overlap_are_no_detectable_difference() -> None:
    b = sweep()
    b["variants"][0]["result"]["usable_rps"] = 13.0  # 13–14 against 13.5–14: B never fell short where A served
    found = compare(Side(label="a", document=sweep()), Side(label="b", document=b), rng=random.Random(0)).to_dict()
    assert by_name(found, "variant none", "usable_capacity")["change"] == "no detectable difference"


def test_a_sweep_whose_target_drifted_is_said_to_have() -> None:
    b = sweep()
    b["variants"][0]["result"]["target_drift"] = {"rates": [13.5]}
    found = compare(Side(label="a", document=sweep()), Side(label="b", document=b), rng=random.Random(0))
    assert found.notes == ("B: its target's speed drifted while it was swept, so its capacity is its slowest period's",)
