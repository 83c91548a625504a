"""Two shares of requests compared (on time, shed, timed out): the pooled two-proportion test and the smallest
difference these sample sizes could have detected.

The question every capacity review ends with, "is B worse than A, or is it noise?", asked first of the
figure that matters most: the share of requests on time, every failure in the denominator. The test is the
pooled two-proportion z test (two-sided); beside its p-value goes its spread under no difference, from which
``domain.compare.family`` tells the smallest difference these counts could have detected, so "no detectable
difference" says how large a difference could have hidden in it. Each share's own Wilson interval is
``capacity_stats.wilson``.
"""

from __future__ import annotations

import math

from cliffwatch.domain.compare.quantiles import Finding


def compare_shares(count_a: int, offered_a: int, count_b: int, offered_b: int) -> Finding:
    """B's share ``count_b / offered_b`` against A's (two-sided)."""
    if offered_a <= 0 or offered_b <= 0:
        raise ValueError("both runs need requests offered to compare their shares")
    if not (0 <= count_a <= offered_a and 0 <= count_b <= offered_b):
        raise ValueError("a share's count must lie between 0 and the requests offered")
    a, b = count_a / offered_a, count_b / offered_b
    pooled = (count_a + count_b) / (offered_a + offered_b)
    scale = 1 / offered_a + 1 / offered_b
    spread = math.sqrt(pooled * (1 - pooled) * scale)
    # both all counted, or both none: nothing differs
    p_value = 1.0 if spread == 0 else math.erfc(abs(b - a) / spread / math.sqrt(2))
    # what could be detected needs a spread even where none was seen: half a request's worth at the edges
    edge = 0.5 / (offered_a + offered_b)
    planning = min(max(pooled, edge), 1 - edge)
    return Finding(difference=b - a, p_value=p_value, spread=math.sqrt(planning * (1 - planning) * scale))
