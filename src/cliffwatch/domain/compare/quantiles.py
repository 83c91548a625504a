"""Two latency percentiles compared: the bootstrap distribution of their difference, drawn exactly from the
runs' stored histograms.

A bootstrap resample of n values from a sample is ``F⁻¹(U₁) … F⁻¹(Uₙ)`` for n uniform draws, and ``F⁻¹`` keeps
order, so the resample's r-th smallest value is ``F⁻¹(U₍ᵣ₎)``, where the r-th smallest of n uniforms follows
Beta(r, n − r + 1). One Beta draw per run and resample therefore gives the resampled percentile itself, with
no n-value resample built: thousands of resamples of a million-request phase cost milliseconds. ``F`` is the
run's latency histogram (``domain.histogram``: within 0.1 % of every recorded value), which the result
document keeps per phase (``distributions``).

The difference's interval is the resamples' percentile interval; its p-value is the normal test of the
observed difference over the resamples' standard deviation (a percentile p-value could not go below one over
the resample count, too coarse for a family of thirty figures corrected together); that deviation is also
the spread from which ``domain.compare.family`` tells the smallest difference these samples could detect.

Requests of one run are not independent (a queue ties neighbours together), so these intervals are narrower
than the truth; ``domain.compare.family`` sets a practical margin beside the test for that reason.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from statistics import fmean, pstdev

from cliffwatch.domain.capacity.capacity_stats import Interval
from cliffwatch.domain.histogram import Histogram

RESAMPLES = 4000
# A bootstrap of a percentile near the sample's edge is degenerate (resamples of the maximum repeat the few
# largest values), so a percentile is tested only with this many values beyond it on either side in both runs:
# p50 from 10 answers, p99 from 500.
MIN_TAIL = 5


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One figure's test, before the family's correction: B − A, its p-value, its spread and interval."""

    difference: float
    p_value: float
    spread: float  # the difference's standard error: what could be detected is a multiple of it
    interval: Interval | None = None  # of the difference, where the test gives one


class _Sampler:
    """Draws a bootstrap resample's percentile of one histogram (see the module's docstring)."""

    def __init__(self, histogram: Histogram, q: float) -> None:
        buckets = histogram.buckets()
        self.values = [value for value, _ in buckets]
        self.cumulative = list(accumulate(count for _, count in buckets))
        self.count = histogram.count
        # the rank ``Histogram.quantile`` reads: the value after floor(q·(n − 1)) others
        self.rank = math.floor(q * (self.count - 1)) + 1

    def draw(self, rng: random.Random) -> float:
        u = rng.betavariate(self.rank, self.count - self.rank + 1)
        # F⁻¹(u): the first bucket whose cumulative count reaches ⌈u·n⌉
        wanted = max(1, math.ceil(u * self.count))
        return self.values[min(bisect_left(self.cumulative, wanted), len(self.values) - 1)]


def answers_needed(q: float) -> int:
    """How many values a run needs for its percentile ``q`` to be tested (``MIN_TAIL`` beyond it each side)."""
    return math.ceil(MIN_TAIL / min(q, 1 - q) - 1e-9)


def compare_quantiles(a: Histogram, b: Histogram, q: float, *, rng: random.Random, resamples: int = RESAMPLES,
                      ) -> Finding | None:  # fmt: skip
    """B's percentile ``q`` against A's; None when either run has too few values (``answers_needed``)."""
    if not 0 < q < 1:
        raise ValueError(f"the percentile must be in (0, 1), got {q}")
    if min(a.count, b.count) < answers_needed(q):
        return None
    observed_a, observed_b = a.quantile(q), b.quantile(q)
    if observed_a is None or observed_b is None:  # both counted above: never, but typed so
        return None
    sample_a, sample_b = _Sampler(a, q), _Sampler(b, q)
    differences = sorted(sample_b.draw(rng) - sample_a.draw(rng) for _ in range(resamples))
    spread = pstdev(differences, mu=fmean(differences))
    difference = observed_b - observed_a
    # a single value on each side (or a single bucket): nothing varies, so any difference is certain
    p_value = (1.0 if difference == 0 else 0.0) if spread == 0 else math.erfc(abs(difference) / spread / math.sqrt(2))
    tail = 0.025  # a 95 % interval of the difference
    low, high = differences[int(tail * (resamples - 1))], differences[math.ceil((1 - tail) * (resamples - 1))]
    return Finding(difference=difference, p_value=p_value, spread=spread, interval=Interval(low=low, high=high))
