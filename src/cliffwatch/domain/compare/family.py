"""A comparison's figures judged together: Holm's correction over the family, a practical margin, and a
verdict per figure (B regressed, improved, within the margin, or no detectable difference).

Thirty figures tested at 5 % each would call one or two "changes" between two runs of the same scenario by
chance alone, so the p-values are corrected together (Holm's step-down, which controls the chance of any
false call at 5 %) and each figure's detectable difference is given at the strictest level of that
correction. Even so, two sittings of the same scenario differ by a little that is real but not news
(another process woke, the requests of one run are not independent as the tests assume), and with
thousands of requests a test finds it. A difference is therefore called a change only when it is also at
least the margin: one percentage point of a share, 5 % of A's latency, unless the caller sets others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import NormalDist
from typing import Any

from cliffwatch.domain.capacity.capacity_stats import Interval
from cliffwatch.domain.compare.quantiles import Finding

ALPHA = 0.05
POWER = 0.8


class Change(StrEnum):
    REGRESSED = "regressed"
    IMPROVED = "improved"
    WITHIN_MARGIN = "within margin"  # the test found a difference smaller than the margin
    NO_DIFFERENCE = "no detectable difference"
    NOT_TESTED = "not tested"  # one value per run (the score), or a document without the figure's data


class Better(StrEnum):
    HIGHER = "higher"
    LOWER = "lower"


@dataclass(frozen=True, kw_only=True)
class Margins:
    """The smallest differences worth calling a change: of a share (absolute) and of a latency (relative to A)."""

    share: float = 0.01
    latency: float = 0.05

    def __post_init__(self) -> None:
        if not (0 <= self.share < 1 and 0 <= self.latency < 10):
            raise ValueError("a share's margin must lie in [0, 1) and a latency's in [0, 10)")

    def to_dict(self) -> dict[str, float]:
        return {"share": self.share, "latency": self.latency}


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One figure of A and B in one scope (a phase, a class's phase, a sweep's rate), and how it was judged."""

    scope: str
    name: str  # on_time_share, goodput_rps, e2e_p99_ms, score, usable_rps, ...
    unit: str  # share, req/s, ms, points
    better: Better
    a: float | None
    b: float | None
    tested: Finding | None = None
    margin: float | None = None  # in the figure's unit; None where no difference is judged (the score)
    a_interval: Interval | None = None
    b_interval: Interval | None = None
    same_test_as: str | None = None  # judged by another figure's test in its scope (goodput by the on-time share)
    note: str | None = None  # why it was not tested, or how
    p_adjusted: float | None = None
    detectable: float | None = None
    change: Change = Change.NOT_TESTED

    @property
    def difference(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    def to_dict(self) -> dict[str, Any]:
        tested = self.tested
        return {
            "scope": self.scope, "figure": self.name, "unit": self.unit, "better": self.better.value,
            "a": _round(self.a), "b": _round(self.b), "difference": _round(self.difference),
            "a_interval": _interval(self.a_interval), "b_interval": _interval(self.b_interval),
            "difference_interval": None if tested is None else _interval(tested.interval),
            "p_value": None if tested is None else _round(tested.p_value),
            "p_adjusted": _round(self.p_adjusted), "detectable": _round(self.detectable),
            "margin": _round(self.margin), "change": self.change.value, "note": self.note,
        }  # fmt: skip


def judge(figures: Sequence[Figure], *, alpha: float = ALPHA) -> tuple[Figure, ...]:
    """Each figure with its Holm-corrected p-value, its detectable difference and its change."""
    family = [i for i, f in enumerate(figures) if f.tested is not None and f.same_test_as is None]
    level = alpha / max(len(family), 1)  # Holm's strictest step, at which "detectable" is told
    normal = NormalDist()
    reach = normal.inv_cdf(1 - level / 2) + normal.inv_cdf(POWER)
    adjusted = _holm([figures[i].tested.p_value for i in family])  # type: ignore[union-attr]
    by_index = dict(zip(family, adjusted, strict=True))
    by_scope = {(figures[i].scope, figures[i].name): by_index[i] for i in family}
    judged = []
    for index, figure in enumerate(figures):
        p = by_index.get(index)
        if figure.same_test_as is not None:
            p = by_scope.get((figure.scope, figure.same_test_as))
        if figure.tested is None or p is None:
            judged.append(replace(figure, change=Change.NOT_TESTED))
            continue
        change = Change.NO_DIFFERENCE
        difference = figure.tested.difference
        if p < alpha:
            change = Change.WITHIN_MARGIN
            if abs(difference) >= (figure.margin or 0.0) and difference != 0:
                worse = difference < 0 if figure.better is Better.HIGHER else difference > 0
                change = Change.REGRESSED if worse else Change.IMPROVED
        judged.append(replace(figure, p_adjusted=p, detectable=reach * figure.tested.spread, change=change))
    return tuple(judged)


def overall(figures: Sequence[Figure]) -> Change:
    """The comparison's one word: regressed when any figure did, else improved when any did, else no change."""
    changes = {f.change for f in figures}
    for change in (Change.REGRESSED, Change.IMPROVED):
        if change in changes:
            return change
    return Change.NO_DIFFERENCE


def _holm(p_values: Sequence[float]) -> list[float]:
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - step) * p_values[index]))
        adjusted[index] = running
    return adjusted


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _interval(interval: Interval | None) -> dict[str, float] | None:
    return None if interval is None else {"low": round(interval.low, 6), "high": round(interval.high, 6)}
