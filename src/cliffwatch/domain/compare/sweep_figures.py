"""The figures two sweep documents are compared on: per retry-policy variant, the usable capacity with the
bracket each sweep put it in, and at every rate both sweeps settled, the on-time share (tested) and the p99
latency (shown: a sweep keeps only that percentile of a rate).

A sweep's usable capacity is not one sample's estimate but a bracket: the highest rate whose attainment
interval cleared the target, below the first rate whose interval fell short. B regressed when it fell short
at a rate A served (B's bracket lies below A's), improved when it served a rate A fell short at; brackets
that overlap are no detectable difference, however far apart the two rates read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cliffwatch.domain.capacity.capacity_stats import Interval, wilson
from cliffwatch.domain.compare.family import Better, Change, Figure, Margins, judge
from cliffwatch.domain.compare.shares import compare_shares


def sweep_figures(a: Mapping[str, Any], b: Mapping[str, Any], *, margins: Margins, alpha: float) -> list[Figure]:
    """Every figure of two alike sweep documents, judged: the rates' shares as one family, capacity by bracket."""
    rates: list[Figure] = []
    capacities: list[Figure] = []
    variants_b = {_variant_name(v): v for v in b.get("variants") or []}
    for variant_a in a.get("variants") or []:
        name = _variant_name(variant_a)
        variant_b = variants_b.get(name)
        if variant_b is None:
            continue
        result_a, result_b = variant_a["result"], variant_b["result"]
        capacities.append(_usable(f"variant {name}", result_a, result_b))
        rates += _rate_figures(f"variant {name}", result_a, result_b, margins)
    return [*capacities, *judge(rates, alpha=alpha)]


def _variant_name(variant: Mapping[str, Any]) -> str:
    return str(variant.get("variant") or "default")


def _usable(scope: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> Figure:
    usable_a, usable_b = _float(a.get("usable_rps")), _float(b.get("usable_rps"))
    bad_a, bad_b = _float(a.get("first_bad_rps")), _float(b.get("first_bad_rps"))
    change = Change.NO_DIFFERENCE
    if _below(usable_a, bad_a, bad_b):
        change = Change.REGRESSED
    elif _below(usable_b, bad_b, bad_a):
        change = Change.IMPROVED
    unit = str(a.get("unit") or "req/s")
    return Figure(scope=scope, name="usable_capacity", unit=unit, better=Better.HIGHER, a=usable_a, b=usable_b,
                  a_interval=_bracket(usable_a, bad_a), b_interval=_bracket(usable_b, bad_b), change=change,
                  note="judged by the brackets (the usable rate up to the first rate that fell short): B regressed "
                       "when it fell short at a rate A served, improved when it served one A did not")  # fmt: skip


def _below(usable: float | None, first_bad: float | None, other_bad: float | None) -> bool:
    """Whether the other sweep fell short at a rate this one served (or, where this one served none, at a
    lower rate than this one first fell short at)."""
    if other_bad is None:
        return False
    if usable is not None:
        return other_bad <= usable
    return first_bad is not None and other_bad < first_bad


def _bracket(usable: float | None, first_bad: float | None) -> Interval | None:
    """Where the capacity lies: from the usable rate (or 0) up to the first bad rate (or the usable, if none)."""
    if usable is None and first_bad is None:
        return None
    low = usable or 0.0
    return Interval(low=low, high=max(low, first_bad if first_bad is not None else low))


def _rate_figures(scope: str, a: Mapping[str, Any], b: Mapping[str, Any], margins: Margins) -> list[Figure]:
    by_rate_b = {float(r["rate"]): r for r in b.get("rates") or []}
    figures = []
    for rate_a in a.get("rates") or []:
        rate = float(rate_a["rate"])
        rate_b = next((r for x, r in by_rate_b.items() if math.isclose(x, rate, rel_tol=1e-9)), None)
        if rate_b is None:
            continue
        pooled_a, pooled_b = rate_a["pooled"], rate_b["pooled"]
        offered_a, offered_b = int(pooled_a["offered"]), int(pooled_b["offered"])
        at = f"{scope} · at {rate:g} {a.get('unit') or 'req/s'}"
        if offered_a and offered_b:
            on_a, on_b = int(pooled_a["on_time"]), int(pooled_b["on_time"])
            figures.append(Figure(scope=at, name="on_time_share", unit="share", better=Better.HIGHER,
                                  a=on_a / offered_a, b=on_b / offered_b, margin=margins.share,
                                  tested=compare_shares(on_a, offered_a, on_b, offered_b),
                                  a_interval=wilson(on_a, offered_a), b_interval=wilson(on_b, offered_b)))  # fmt: skip
        p99_a, p99_b = _float(pooled_a.get("p99_e2e_ms")), _float(pooled_b.get("p99_e2e_ms"))
        if p99_a is not None or p99_b is not None:
            figure = Figure(scope=at, name="e2e_p99_ms", unit="ms", better=Better.LOWER, a=p99_a, b=p99_b,
                            note="not tested: a sweep keeps only this percentile of a rate")  # fmt: skip
            figures.append(replace(figure, margin=None if p99_a is None else margins.latency * p99_a))
    return figures


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
