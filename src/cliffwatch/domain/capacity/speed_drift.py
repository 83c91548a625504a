"""Whether the target's own speed moved between a sweep's first reading and its recheck: their median latencies at
a light load.

The on-time test of ``drift`` sees a drift only at a rate it makes fail, and the recheck's rate (the sweep's
first, far below the cliff) rarely fails: the issue's server went from 107 to 173 ms a request and still held
0.5 req/s. At such a load queueing is small, so the median e2e latency (and TTFT, where measured) of a reading is
the target's own time a request, and the first reading and the recheck, at one rate, should agree. The rule
(docs/sweep.md, "A target whose speed drifts"): their medians **shifted** when

- the first reading was light: at most ``LIGHT_LOAD`` requests in flight on average (the rate × its median e2e,
  Little's law), or one client in a closed loop; and neither reading was generator-limited;
- each answered at least ``MIN_READING`` requests;
- one median is at least ``LATENCY_SHIFT`` times the other (a steady server's medians wander by a few per cent
  between windows, for reasons no count shows: another tenant, a cache, a GC);
- and the shift is beyond chance: a t test on the log medians at the drift rule's confidence. The standard error of
  a median of ``n`` answers is ``σ·√(π / 2n)``, with σ the spread of the log latency read from the sweep's
  lightest steps (``log_spread``): the two readings hold a handful of answers each at the default first rate, too
  few to judge their own spread, and a spread read from few answers is itself unsure, which the t test's degrees of
  freedom carry.

Latencies vary on a log scale (a slower server is slower by a factor), so σ is of the logarithm, and a drift that
scales every request keeps it. Queueing only widens it: a light step that queues a little makes the test more
careful, never less. Pure: the steps in, the shifts out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from cliffwatch.domain.capacity.capacity_stats import StepStats

LATENCY_SHIFT = 1.25  # one median at least this many times the other
# Requests in flight on average (rate × median e2e, Little's law): below a third, queueing hardly moves a median (a
# request waits for another at most a third of the time), and widens a p90 little.
LIGHT_LOAD = 1 / 3
MIN_READING = 3  # answered requests in each reading: fewer have no median to speak of
# The spread is read from the lightest steps (the least queueing) until it has SPREAD_DF degrees of freedom; with
# fewer than MIN_SPREAD_DF in every light step together, nothing is judged (a t test on 2 could call anything).
SPREAD_DF = 8.0
MIN_SPREAD_DF = 3.0
_SPREAD_FROM = 4  # a step needs this many answers for its p90 to be another answer than its p50
SIGNALS = ("e2e", "ttft")


@dataclass(frozen=True, kw_only=True)
class LatencyReading:
    """One of the two readings whose median latencies are compared: where it sits in the sweep and its median."""

    trial: int
    step_index: int  # its position in the sweep's steps, from 0
    started_s: float | None  # seconds from the sweep's start; None when not known
    requests: int  # answered requests: what its percentiles are of
    median_ms: float
    recheck: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.trial, "step_index": self.step_index, "started_s": self.started_s,
                "requests": self.requests, "median_ms": self.median_ms, "recheck": self.recheck}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyReading:
        started = data.get("started_s")
        return cls(
            trial=int(data["trial"]), step_index=int(data["step_index"]),
            started_s=None if started is None else float(started), requests=int(data["requests"]),
            median_ms=float(data["median_ms"]), recheck=bool(data.get("recheck", False)),
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SpeedShift:
    """The recheck's median latency against the first reading's at the same light rate, apart beyond the target's
    own spread: its speed moved."""

    rate: float
    signal: str  # "e2e" or "ttft"
    earlier: LatencyReading
    later: LatencyReading
    spread: float  # σ of the log latency, from the sweep's lightest steps
    df: float  # the degrees of freedom of that spread
    t: float | None  # |log ratio of the medians| in standard errors; None when the latencies did not vary at all

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"a speed shift is of {' or '.join(SIGNALS)}, got {self.signal!r}")
        if self.earlier.step_index >= self.later.step_index:
            raise ValueError("the earlier reading of a speed shift must come first")
        if not (self.earlier.median_ms > 0 and self.later.median_ms > 0):
            raise ValueError("a speed shift compares two positive medians")

    @property
    def recheck(self) -> bool:
        return self.earlier.recheck or self.later.recheck

    @property
    def change(self) -> float:
        """The later median over the earlier one, minus 1: +0.62 for 107 → 173 ms."""
        return self.later.median_ms / self.earlier.median_ms - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "signal": self.signal,
            "recheck": self.recheck,
            "trials": [self.earlier.to_dict(), self.later.to_dict()],
            "median_ms": [self.earlier.median_ms, self.later.median_ms],
            "change": self.change,
            "spread": self.spread,
            "df": self.df,
            "t": self.t,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpeedShift:
        earlier, later = (LatencyReading.from_dict(t) for t in data["trials"])
        t = data.get("t")
        return cls(rate=float(data["rate"]), signal=str(data["signal"]), earlier=earlier, later=later,
                   spread=float(data["spread"]), df=float(data["df"]), t=None if t is None else float(t))  # fmt: skip


def find_speed_shifts(
    steps: Sequence[StepStats], *, confidence: float, closed_loop: bool = False
) -> tuple[SpeedShift, ...]:
    """Each recheck in ``steps`` (in the order measured) whose median e2e or TTFT shifted from the first reading at
    its rate (the module's rule), e2e first; empty when none did or nothing could be judged. ``closed_loop``: the
    rates are clients, so only one client is light. Raises ``ValueError`` for a confidence outside (0, 1)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    found = []
    for later_index, later in enumerate(steps):
        if not later.recheck or later.generator_limited:
            continue
        earlier_index = next((i for i, s in enumerate(steps[:later_index]) if s.rate == later.rate and not s.recheck
                              and not s.generator_limited), None)  # fmt: skip
        if earlier_index is None or not light(steps[earlier_index], closed_loop=closed_loop):
            continue
        for signal in SIGNALS:
            shift = _shift(steps, earlier_index, later_index, signal, confidence=confidence, closed_loop=closed_loop)
            if shift is not None:
                found.append(shift)
    return tuple(found)


def light(step: StepStats, *, closed_loop: bool = False) -> bool:
    """Whether ``step`` ran at a light load, where queueing hardly moves a median: one client in a closed loop;
    else at most ``LIGHT_LOAD`` requests in flight on average (its rate × its median e2e). False without a median."""
    if closed_loop:
        return step.rate <= 1
    median = step.e2e_ms.get("p50")
    return median is not None and step.rate * median / 1000 <= LIGHT_LOAD


def log_spread(steps: Sequence[StepStats], signal: str, *, closed_loop: bool = False) -> tuple[float, float] | None:
    """σ of the log latency of ``signal`` ("e2e", "ttft") and its degrees of freedom, read from the light steps that
    are not generator-limited and answered at least 4 requests, lightest first, until ``SPREAD_DF``; None under
    ``MIN_SPREAD_DF`` from them all.

    A step of ``n`` answers gives ``log(p90 / p50)`` over the expected distance of those two order statistics in a
    normal sample of ``n`` (Blom's approximation; the percentiles are the answers at rank ``floor(q·(n − 1))``, as
    ``domain.histogram`` reads them): 1.28 for many answers, 0.50 for five. Two order statistics tell less than the
    whole sample: ``(n − 2) / 4`` degrees of freedom, under what a normal sample's gap shows (0.7 of them at 5
    answers, 2.9 at 10, 5.6 at 20, 11 at 40: docs/sweep.md). The steps' squares are averaged, weighted by those."""
    readable = [s for s in steps if not s.generator_limited and answered(s) >= _SPREAD_FROM
                and light(s, closed_loop=closed_loop) and getattr(s, f"{signal}_ms").get("p50")
                and getattr(s, f"{signal}_ms").get("p90")]  # fmt: skip
    df, weighted = 0.0, 0.0
    for step in sorted(readable, key=_in_flight):
        if df >= SPREAD_DF:
            break
        n, percentiles = answered(step), getattr(step, f"{signal}_ms")
        p50, p90 = percentiles["p50"], percentiles["p90"]
        sigma = math.log(max(p90, p50) / p50) / _order_gap(n)
        df += (n - 2) / 4
        weighted += (n - 2) / 4 * sigma * sigma
    if df < MIN_SPREAD_DF:
        return None
    return math.sqrt(weighted / df), df


def answered(step: StepStats) -> int:
    """The requests a step's latency percentiles are of: its answers, on time or late."""
    return step.on_time + step.late


def _in_flight(step: StepStats) -> float:
    median = step.e2e_ms.get("p50")
    return math.inf if median is None else step.rate * median


def _shift(
    steps: Sequence[StepStats], earlier_index: int, later_index: int, signal: str, *, confidence: float,
    closed_loop: bool,
) -> SpeedShift | None:  # fmt: skip
    earlier, later = steps[earlier_index], steps[later_index]
    first, second = getattr(earlier, f"{signal}_ms").get("p50"), getattr(later, f"{signal}_ms").get("p50")
    n1, n2 = answered(earlier), answered(later)
    if not first or not second or min(n1, n2) < MIN_READING:
        return None
    spread = log_spread(steps, signal, closed_loop=closed_loop)
    apart = abs(math.log(second / first))
    if spread is None or apart < math.log(LATENCY_SHIFT):
        return None
    sigma, df = spread
    error = sigma * math.sqrt(math.pi / 2 * (1 / n1 + 1 / n2))
    t = None if error == 0 else apart / error
    if t is not None and t_tail(t, df) >= 1 - confidence:
        return None
    return SpeedShift(rate=later.rate, signal=signal, earlier=_reading(earlier_index, earlier, first),
                      later=_reading(later_index, later, second), spread=sigma, df=df, t=t)  # fmt: skip


def t_tail(t: float, df: float) -> float:
    """The two-sided tail of Student's t with ``df`` degrees of freedom beyond ``t >= 0``: ``P(|T| > t)``.

    It is the regularized incomplete beta ``I_w(df / 2, 1 / 2)`` at ``w = df / (df + t²)``; with ``u = 1 − s²`` its
    integrand is smooth, ``2 (1 − s²)^(df / 2 − 1)`` from ``s = t / √(df + t²)`` to 1, and Simpson's rule on 400
    parts gives the tables' 0.1 % and 5 % points to within 0.2 % from 3 to 100 degrees of freedom. More than 100 are
    read as 100: a little wider than they are, and ``df`` under 2 is not what the rule asks of it."""
    df = min(df, 100.0)
    a = df / 2
    start = t / math.sqrt(df + t * t)
    parts = 400
    step = (1 - start) / parts

    def integrand(s: float) -> float:
        return 2 * math.pow(1 - s * s, a - 1)

    inner = sum((4 if i % 2 else 2) * integrand(start + i * step) for i in range(1, parts))
    beta = math.exp(math.lgamma(a) + math.lgamma(0.5) - math.lgamma(a + 0.5))
    return min(1.0, (integrand(start) + integrand(1.0) + inner) * step / 3 / beta)


def _reading(index: int, step: StepStats, median_ms: float) -> LatencyReading:
    return LatencyReading(trial=step.trial, step_index=index, started_s=step.started_s, requests=answered(step),
                          median_ms=median_ms, recheck=step.recheck)  # fmt: skip


def _order_gap(n: int) -> float:
    """The expected distance between the p90 and the p50 of ``n`` standard normal values, read at the ranks
    ``domain.histogram`` reads them at (Blom's approximation of a normal order statistic's mean)."""

    def expected(q: float) -> float:
        rank = math.floor(q * (n - 1)) + 1  # 1-based
        return NormalDist().inv_cdf((rank - 0.375) / (n + 0.25))

    return expected(0.9) - expected(0.5)
