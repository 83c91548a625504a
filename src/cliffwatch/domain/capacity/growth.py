"""Is the queue growing inside a sweep step? Two tests, one per side of the wire, judged the same way.

Above saturation (service rate μ) a queue ahead of the server grows without end, and every request waits
``(λ − μ)/μ`` seconds longer than one scheduled a second before it: the wait's slope against the scheduled
time *is* the overload ratio. Below saturation the slope is zero on average, however long the queue. So:

- **latency trend** (client side, always): each answered request's wait (TTFT when streamed, else its whole
  answer) against its scheduled time, in up to ``BLOCKS`` blocks of equal count; the least-squares slope of
  the blocks' medians. Medians of blocks, not every request, so one slow answer moves one point of ten;
- **server queue** (when ``target.metrics`` is scraped): the slope of the server's waiting queue, in requests
  per second; divided by the step's rate it is the same overload ratio.

A trend is *growing* when three things hold, each against a way a stable queue fools a slope:

1. its overload ratio is above ``THRESHOLD`` (3 %): smaller growth is within the sweep's resolution;
2. the slope is ``MIN_T`` standard errors above zero: a wandering queue makes slopes of either sign;
3. the queue never emptied in the window's second half: the server's queue never read zero there, and no
   request waited as little as one that found no queue (the least wait of the step, warm-up included) or
   within a quarter of what the slope added over that half. A queue below saturation empties again and again
   (at load ρ, a share 1 − ρ of arrivals find the server free); one that grows without end never does. This
   is what keeps a Poisson queue's bursts from reading as growth.

On simulated single-server queues (tests/unit/domain/capacity/test_growth.py, docs/sweep.md) this never fires on
constant arrivals below saturation, fires on every one at 3 % overload, and fires on at most 1 in 40 Poisson
steps at 70 % load. Pure: points in, a verdict out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

THRESHOLD = 0.03  # overload ratio: the wait grows 30 ms every second, the queue by 3 % of the arrivals
MIN_T = 2.0  # the slope's standard errors above zero
EMPTIED_SHARE = 0.25  # of the slope's rise over the second half: a floor that close means the queue emptied
BLOCKS = 10  # the window's requests in at most this many blocks of equal count …
MIN_PER_BLOCK = 3  # … of at least this many requests each
MIN_POINTS = 5  # a trend needs this many blocks (or scrapes) to be judged at all


class GrowthSignal(StrEnum):
    LATENCY_TREND = "latency_trend"
    SERVER_QUEUE = "server_queue"


@dataclass(frozen=True, kw_only=True)
class Trend:
    """One test's reading of a window: the slope, the overload ratio it stands for, and the verdict."""

    signal: GrowthSignal
    slope: float  # seconds of wait per second (latency trend), or requests per second (server queue)
    overload: float  # the overload ratio the slope stands for: (λ − μ)/μ
    t_stat: float  # the slope over its standard error
    rise: float  # the fitted growth over the window: seconds of wait, or requests queued
    emptied: bool  # the wait (or queue) came back to the window's floor in its second half
    points: int  # blocks (latency trend) or scrapes (server queue) it was fitted on
    growing: bool

    def describe(self, rate_text: str = "") -> str:
        """A clause for a verdict: "the wait grew 62 ms a second, a 6.2 % overload"."""
        if self.signal is GrowthSignal.SERVER_QUEUE:
            what = f"the server's queue grew by {self.slope:,.2f} requests a second"
        else:
            what = f"the wait grew {self.slope * 1000:,.0f} ms a second"
        return f"{what}{rate_text}, a {self.overload * 100:.1f} % overload"

    def to_dict(self) -> dict[str, Any]:
        t_stat = self.t_stat if math.isfinite(self.t_stat) else None  # an exact line has no error at all
        return {"signal": self.signal.value, "slope": self.slope, "overload": self.overload, "t_stat": t_stat,
                "rise": self.rise, "emptied": self.emptied, "points": self.points, "growing": self.growing}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trend:
        t_stat = data.get("t_stat")
        return cls(signal=GrowthSignal(data["signal"]), slope=float(data["slope"]), overload=float(data["overload"]),
                   t_stat=math.inf if t_stat is None else float(t_stat), rise=float(data["rise"]),
                   emptied=bool(data["emptied"]), points=int(data["points"]),
                   growing=bool(data["growing"]))  # fmt: skip


def _fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares slope of ``points`` (x, y) and its t statistic (inf for an exact line that rises);
    needs two distinct x."""
    n = len(points)
    mean_x = math.fsum(x for x, _ in points) / n
    mean_y = math.fsum(y for _, y in points) / n
    spread = math.fsum((x - mean_x) ** 2 for x, _ in points)
    slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    intercept = mean_y - slope * mean_x
    residual = math.fsum((y - intercept - slope * x) ** 2 for x, y in points)
    error = math.sqrt(residual / (n - 2) / spread) if n > 2 else 0.0
    if error <= 1e-12 * max(1.0, abs(slope)):
        return slope, math.inf if slope > 0 else (-math.inf if slope < 0 else 0.0)
    return slope, slope / error


def _judge(
    signal: GrowthSignal,
    points: Sequence[tuple[float, float]],
    readings: Sequence[tuple[float, float]],
    *,
    scale: float,
    threshold: float,
    floor: float,
    margin: float,
) -> Trend:
    """A trend fitted on ``points``, its overload ``slope / scale``, judged by the three rules above; whether the
    queue emptied is read from ``readings`` (every one, not the blocks' medians): one in the second half came
    within ``margin`` of ``floor``, or within a quarter of what the slope added over that half."""
    slope, t_stat = _fit(points)
    first, last = min(x for x, _ in points), max(x for x, _ in points)
    span = last - first
    middle = (first + last) / 2
    late = [y for x, y in readings if x >= middle]
    emptied = not late or min(late) - floor <= max(margin, EMPTIED_SHARE * max(0.0, slope) * span / 2)
    overload = slope / scale
    return Trend(signal=signal, slope=slope, overload=overload, t_stat=t_stat, rise=slope * span, emptied=emptied,
                 points=len(points), growing=overload > threshold and t_stat > MIN_T and not emptied)  # fmt: skip


def latency_trend(
    waits: Sequence[tuple[float, float]],
    *,
    start_s: float,
    end_s: float,
    floor_s: float | None = None,
    threshold: float = THRESHOLD,
) -> Trend | None:
    """The latency trend of the window ``[start_s, end_s)`` from ``(scheduled_s, wait_s)`` of its answered
    requests; None when too few requests to judge (fewer than ``MIN_POINTS`` blocks of ``MIN_PER_BLOCK``).

    ``floor_s`` is the wait of a request that found no queue: the least wait of the whole step, warm-up
    included, when the caller has it (the step began with an empty queue); else the window's least."""
    inside = sorted((t, w) for t, w in waits if start_s <= t < end_s and math.isfinite(w))
    count = min(BLOCKS, len(inside) // MIN_PER_BLOCK)
    if count < MIN_POINTS:
        return None
    blocks = [inside[i * len(inside) // count : (i + 1) * len(inside) // count] for i in range(count)]
    points = [(math.fsum(t for t, _ in block) / len(block), statistics.median(w for _, w in block)) for block in blocks]
    if len({t for t, _ in points}) < 2:
        return None
    floor = min(w for _, w in inside) if floor_s is None else min(floor_s, min(w for _, w in inside))
    return _judge(GrowthSignal.LATENCY_TREND, points, inside, scale=1.0, threshold=threshold, floor=floor, margin=0.0)


def queue_trend(queue: Sequence[tuple[float, float]], *, rate: float, threshold: float = THRESHOLD) -> Trend | None:
    """The server-queue trend from ``(time_s, waiting)`` scrapes of a window at an arrival ``rate`` (req/s);
    None with fewer than ``MIN_POINTS`` scrapes or no arrivals."""
    if len(queue) < MIN_POINTS or rate <= 0 or len({t for t, _ in queue}) < 2:
        return None
    # a queue that reached zero (or less than one: a scrape reads whole requests) emptied
    return _judge(GrowthSignal.SERVER_QUEUE, queue, queue, scale=rate, threshold=threshold, floor=0.0, margin=0.5)


@dataclass(frozen=True, kw_only=True)
class Growth:
    """A step's growth verdict: each test's reading (None where it could not judge) and the decision."""

    latency: Trend | None
    queue: Trend | None

    @property
    def growing(self) -> bool:
        """Either test saw the queue grow: the server's own queue, or the wait of the requests."""
        return any(t is not None and t.growing for t in (self.queue, self.latency))

    @property
    def evidence(self) -> Trend | None:
        """The reading that decided: the server's queue when it grew, else the latency trend when it did."""
        for trend in (self.queue, self.latency):
            if trend is not None and trend.growing:
                return trend
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"growing": self.growing,
                "latency": None if self.latency is None else self.latency.to_dict(),
                "queue": None if self.queue is None else self.queue.to_dict()}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Growth:
        latency, queue = data.get("latency"), data.get("queue")
        return cls(latency=None if latency is None else Trend.from_dict(latency),
                   queue=None if queue is None else Trend.from_dict(queue))  # fmt: skip
