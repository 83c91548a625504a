"""Capacity trends: one series per scenario, target, variant, mode and attainment target; a regression only
when the latest sweep's whole cliff bracket lies below the trailing median of the usable capacity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cliffwatch.domain.capacity.sweep_spec import SweepMode, SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import Run, RunKind, Trigger
from cliffwatch.domain.service.trends import capacity_series

T0 = datetime(2026, 12, 1, tzinfo=UTC)
SPEC = SweepSpec(start=1.0, stop=20.0)


def sweep(index: int, *variants: tuple[str, float | None, float | None], spec: SweepSpec = SPEC,
          result: Any = None) -> Run:  # fmt: skip
    document = result if result is not None else {"variants": [
        {"variant": v, "result": {"usable_rps": usable, "first_bad_rps": bad, "unit": "req/s"}}
        for v, usable, bad in variants]}  # fmt: skip
    return Run(id=f"s{index}", scenario_name="burst", scenario_hash="h", status=RunStatus.SUCCEEDED,
               trigger=Trigger.API, triggered_by="t", created_at=T0, target_url="builtin", seed=1, threshold=70,
               finished_at=T0 + timedelta(days=index), kind=RunKind.SWEEP, sweep=spec, result=document)  # fmt: skip


def test_a_series_per_variant_in_time_order() -> None:
    runs = [sweep(2, ("as-written", 9.0, 9.5), ("none", 12.0, 12.5)), sweep(1, ("as-written", 10.0, 10.5))]
    series = capacity_series(runs)
    assert [(s.variant, [p.run_id for p in s.points]) for s in series] == [
        ("as-written", ["s1", "s2"]),
        ("none", ["s2"]),
    ]
    assert series[0].summary == "latest usable capacity 9 req/s; too little history to judge (1 earlier)"


def test_a_fall_within_the_bracket_is_no_regression_and_beyond_it_is() -> None:
    history = [sweep(i, ("as-written", 10.0, 10.5)) for i in range(3)]
    within = capacity_series([*history, sweep(3, ("as-written", 9.6, 10.1))])[0]
    beyond = capacity_series([*history, sweep(3, ("as-written", 9.0, 9.5))])[0]
    assert (within.regression, within.trailing_median) == (False, 10.0)
    assert within.summary.startswith("no regression: latest usable capacity 9.6 req/s (the cliff now lies below 10.1")
    assert beyond.regression is True
    assert beyond.summary.startswith("REGRESSION: latest usable capacity 9 req/s")


def test_nothing_usable_counts_as_zero_and_no_cliff_seen_is_said() -> None:
    history = [sweep(i, ("as-written", 10.0, 10.5)) for i in range(2)]
    none_usable = capacity_series([*history, sweep(3, ("as-written", None, 1.0))])[0]
    no_cliff = capacity_series([*history, sweep(3, ("as-written", 20.0, None))])[0]
    assert none_usable.regression is True
    assert "latest usable capacity none" in none_usable.summary
    assert no_cliff.regression is False
    assert "(no cliff seen)" in no_cliff.summary


def test_other_modes_and_targets_are_other_series_and_unreadable_documents_are_skipped() -> None:
    clients = SweepSpec(mode=SweepMode.CONCURRENCY, auto=True)
    strict = SweepSpec(start=1.0, stop=20.0, target=0.999)
    runs = [sweep(1, ("as-written", 10.0, 11.0)), sweep(2, ("as-written", 4.0, 5.0), spec=clients),
            sweep(3, ("as-written", 8.0, 9.0), spec=strict), sweep(4, result={"variants": "broken"}),
            sweep(5, result={"variants": [{"variant": "none", "result": None}, 7]})]  # fmt: skip
    series = capacity_series(runs)
    assert sorted((s.mode, s.target, s.unit, len(s.points)) for s in series) == [
        ("concurrency", 0.99, "req/s", 1),
        ("rate", 0.99, "req/s", 1),
        ("rate", 0.999, "req/s", 1),
    ]
