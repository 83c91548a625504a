"""Two on-time shares compared: a two-proportion test, each share's Wilson interval, and the smallest
difference these sample sizes could have detected.

The question every capacity review ends with, "is B worse than A, or is it noise?", asked of the figure that
matters most: the share of requests on time, every failure in the denominator. The test is the pooled
two-proportion z test (two-sided); beside its p-value goes the minimal detectable difference at the same
level and 80 % power, so "no detectable difference" says how large a difference could have hidden in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist
from typing import Any

from cliffwatch.domain.capacity.capacity_stats import Interval, wilson

ALPHA = 0.05
POWER = 0.8


class Change(StrEnum):
    REGRESSED = "regressed"
    IMPROVED = "improved"
    NO_DIFFERENCE = "no detectable difference"


@dataclass(frozen=True, kw_only=True)
class ShareComparison:
    a: float
    b: float
    a_interval: Interval
    b_interval: Interval
    difference: float  # b − a
    p_value: float
    detectable: float  # the smallest difference these counts detect at ``ALPHA`` with ``POWER``
    change: Change

    def to_dict(self) -> dict[str, Any]:
        return {"a": round(self.a, 6), "b": round(self.b, 6), "a_interval": self.a_interval.to_dict(),
                "b_interval": self.b_interval.to_dict(), "difference": round(self.difference, 6),
                "p_value": round(self.p_value, 6), "detectable": round(self.detectable, 6),
                "change": self.change.value}  # fmt: skip


def compare_shares(on_time_a: int, offered_a: int, on_time_b: int, offered_b: int, *, alpha: float = ALPHA,
                   ) -> ShareComparison:  # fmt: skip
    """A's share against B's (B the later or the changed run): a lower share for B at ``p < alpha`` regressed."""
    if offered_a <= 0 or offered_b <= 0:
        raise ValueError("both runs need requests offered to compare their on-time shares")
    a, b = on_time_a / offered_a, on_time_b / offered_b
    pooled = (on_time_a + on_time_b) / (offered_a + offered_b)
    scale = 1 / offered_a + 1 / offered_b
    spread = math.sqrt(pooled * (1 - pooled) * scale)
    # both all on time, or both none: nothing differs
    p_value = 1.0 if spread == 0 else math.erfc(abs(b - a) / spread / math.sqrt(2))
    # the detectable difference needs a spread even where none was seen: half a request's worth at the edges
    edge = 0.5 / (offered_a + offered_b)
    planning = min(max(pooled, edge), 1 - edge)
    normal = NormalDist()
    detectable = (normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(POWER)) * math.sqrt(planning * (1 - planning) * scale)
    change = Change.NO_DIFFERENCE
    if p_value < alpha:
        change = Change.REGRESSED if b < a else Change.IMPROVED
    return ShareComparison(a=a, b=b, a_interval=wilson(on_time_a, offered_a), b_interval=wilson(on_time_b, offered_b),
                           difference=b - a, p_value=p_value, detectable=detectable, change=change)  # fmt: skip
