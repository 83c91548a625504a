"""Whether the target's own speed drifted during a sweep: two trials at one rate that disagree beyond their
intervals.

A sweep assumes the target is the same server from its first step to its last. A server whose speed drifts
(a neighbour on its GPU, thermal throttling, a cache filling, an autoscaler) breaks that: the same rate holds
in one step and fails in a later one, and pooling the two hides it. The rule (docs/sweep.md, "A target whose
speed drifts"): two trials at the same rate over windows of the same length, neither generator-limited, whose
on-time shares' Wilson intervals at ``DRIFT_CONFIDENCE`` do not overlap, disagree, unless

- the slower trial was offered more requests than the faster one (a Poisson draw that brought more load explains
  a worse share: on the simulated servers that was most of the false alarms), or
- the faster trial did not hold with room: its p99 e2e (and TTFT, with a TTFT bound) above ``ROOM`` of the SLO's
  bound. A trial that passed close to its bound was at the cliff, where a steady target's windows disagree by
  chance (a queue at saturation wanders: one 30-s window holds, the next does not).

Poisson steps are read on their on-time count corrected for the luck of their draws where the sweep's correction
applies (``arrival_luck``), as their verdicts are. The recheck (``SweepSpec.recheck``: the first rate measured
once more at the end) gives every sweep one pair across its whole length, and its median latencies are compared
with the first reading's too (``speed_drift``): at that light load they are the target's own speed, which moves
before the rate fails.

The level is far above the 95 % the verdicts use: a sweep makes many comparisons, and trials near the cliff vary
more than a binomial count does (one long queue makes many late requests at once). docs/sweep.md has the
false-alarm rates measured on steady simulated servers (``bench/sweep_drift.py``).

Pure: the steps in, the disagreements out; nothing here reads a clock.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cliffwatch.domain.capacity.arrival_luck import LuckCorrection
from cliffwatch.domain.capacity.capacity_stats import Interval, StepStats, wilson
from cliffwatch.domain.capacity.capacity_steps import SettledRate, StepVerdict, pool_rates, settle
from cliffwatch.domain.capacity.speed_drift import SpeedShift, find_speed_shifts

DRIFT_CONFIDENCE = 0.999
ROOM = 0.5  # the faster trial's p99 latencies within this share of their SLO bounds: it was clear of the cliff


@dataclass(frozen=True, kw_only=True)
class DriftReading:
    """One trial of a disagreeing pair: where it sits in the sweep and what it measured."""

    rate: float
    trial: int
    step_index: int  # its position in the sweep's steps (the JSON's ``steps[]``), from 0
    started_s: float | None  # when it began, in seconds from the sweep's start; None when not known
    offered: int
    on_time: int
    corrected_on_time: float | None = None  # on time, corrected for the luck of a Poisson draw (``arrival_luck``)
    interval: Interval  # of its judged on-time share (corrected where it was), at the drift rule's confidence
    median_e2e_ms: float | None
    recheck: bool = False

    @property
    def on_time_share(self) -> float:
        """The share the trial is compared on: corrected for luck where the sweep's correction applies."""
        return (self.on_time if self.corrected_on_time is None else self.corrected_on_time) / self.offered

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "trial": self.trial,
            "step_index": self.step_index,
            "started_s": self.started_s,
            "offered": self.offered,
            "on_time": self.on_time,
            "corrected_on_time": self.corrected_on_time,
            "on_time_share": self.on_time_share,
            "interval": self.interval.to_dict(),
            "median_e2e_ms": self.median_e2e_ms,
            "recheck": self.recheck,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DriftReading:
        started, median, corrected = data.get("started_s"), data.get("median_e2e_ms"), data.get("corrected_on_time")
        return cls(
            rate=float(data["rate"]),
            trial=int(data["trial"]),
            step_index=int(data["step_index"]),
            started_s=None if started is None else float(started),
            offered=int(data["offered"]),
            on_time=int(data["on_time"]),
            corrected_on_time=None if corrected is None else float(corrected),
            interval=Interval.from_dict(data["interval"]),
            median_e2e_ms=None if median is None else float(median),
            recheck=bool(data.get("recheck", False)),
        )


@dataclass(frozen=True, kw_only=True)
class Disagreement:
    """Two trials at one rate whose intervals do not overlap, in the order they were measured."""

    earlier: DriftReading
    later: DriftReading

    def __post_init__(self) -> None:
        if not math.isclose(self.earlier.rate, self.later.rate, rel_tol=1e-9):
            raise ValueError(f"a disagreement is between trials at one rate, got {self.earlier.rate:g} and "
                             f"{self.later.rate:g}")  # fmt: skip
        if self.earlier.step_index >= self.later.step_index:
            raise ValueError("the earlier trial of a disagreement must come first")

    @property
    def rate(self) -> float:
        return self.earlier.rate

    @property
    def recheck(self) -> bool:
        """Whether the end-of-sweep recheck is one of the two."""
        return self.earlier.recheck or self.later.recheck

    @property
    def slower(self) -> DriftReading:
        """The trial with the smaller on-time share: the target's slower period at this rate."""
        return self.later if self.later.on_time_share < self.earlier.on_time_share else self.earlier

    @property
    def share_change(self) -> float:
        """The later trial's on-time share minus the earlier one's: negative when the target slowed down."""
        return self.later.on_time_share - self.earlier.on_time_share

    @property
    def median_e2e_change_ms(self) -> float | None:
        """The later trial's median e2e latency minus the earlier one's; None when either is unknown."""
        if self.earlier.median_e2e_ms is None or self.later.median_e2e_ms is None:
            return None
        return self.later.median_e2e_ms - self.earlier.median_e2e_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "recheck": self.recheck,
            "trials": [self.earlier.to_dict(), self.later.to_dict()],
            "share_change": self.share_change,
            "median_e2e_change_ms": self.median_e2e_change_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Disagreement:
        earlier, later = (DriftReading.from_dict(t) for t in data["trials"])
        return cls(earlier=earlier, later=later)


@dataclass(frozen=True, kw_only=True)
class TargetDrift:
    """Every rate whose trials disagreed, one pair a rate (the farthest apart), and every recheck whose median
    latency shifted from the first reading's (``speed_drift``), lowest rate first."""

    confidence: float
    disagreements: tuple[Disagreement, ...] = ()
    latency: tuple[SpeedShift, ...] = ()

    def __post_init__(self) -> None:
        if not self.disagreements and not self.latency:
            raise ValueError("a target drift needs a disagreement or a latency shift (no drift is None)")
        object.__setattr__(self, "disagreements", tuple(sorted(self.disagreements, key=lambda d: d.rate)))
        object.__setattr__(self, "latency", tuple(sorted(self.latency, key=lambda s: s.rate)))

    @property
    def rates(self) -> tuple[float, ...]:
        """The rates where the target was seen to drift, by their on-time shares or their medians."""
        return tuple(sorted({d.rate for d in self.disagreements} | {s.rate for s in self.latency}))

    @property
    def rechecked(self) -> bool:
        """Whether the end-of-sweep recheck disagreed with the first reading, by either test."""
        return any(d.recheck for d in self.disagreements) or any(s.recheck for s in self.latency)

    def at(self, rate: float) -> Disagreement | None:
        """The disagreement at ``rate``, if its trials disagreed."""
        return next((d for d in self.disagreements if math.isclose(d.rate, rate, rel_tol=1e-9)), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rates": list(self.rates),
            "confidence": self.confidence,
            "disagreements": [d.to_dict() for d in self.disagreements],
            "latency": [s.to_dict() for s in self.latency],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TargetDrift:
        """Reads ``to_dict``'s form back; a document older than the latency test has none."""
        return cls(
            confidence=float(data["confidence"]),
            disagreements=tuple(Disagreement.from_dict(d) for d in data["disagreements"]),
            latency=tuple(SpeedShift.from_dict(s) for s in data.get("latency") or ()),
        )


def find_drift(
    steps: Sequence[StepStats],
    *,
    e2e_slo_ms: float,
    ttft_slo_ms: float | None = None,
    luck: LuckCorrection | None = None,
    confidence: float = DRIFT_CONFIDENCE,
    closed_loop: bool = False,
) -> TargetDrift | None:
    """The sweep's disagreements and latency shifts (``steps`` in the order measured), or None when no pair of
    comparable trials disagreed and no recheck's median latency shifted (``speed_drift``; ``closed_loop``: the
    rates are clients).

    Comparable: the same rate, windows of the same length (an extended window lets a slowly growing queue reach
    further, so it may fail where a short one held without anything drifting), neither generator-limited (its
    numbers describe the client), both with requests. Two such trials disagree when the Wilson intervals of their
    on-time shares (every failure in the denominator; corrected by ``luck`` where it applies) at ``confidence``
    do not overlap, the slower was offered no more requests than the faster, and the faster held with room
    (``held_with_room``). Of the disagreeing pairs at a rate, the one farthest apart is kept. Raises
    ``ValueError`` for a confidence outside (0, 1).
    """
    readings = [_reading(index, s, confidence, luck) for index, s in enumerate(steps) if _comparable(s)]
    found: dict[float, Disagreement] = {}
    for earlier, later in itertools.combinations(readings, 2):
        first, second = steps[earlier.step_index], steps[later.step_index]
        if first.rate != second.rate or not math.isclose(first.duration_s, second.duration_s):
            continue
        if _overlap(earlier.interval, later.interval):
            continue
        pair = Disagreement(earlier=earlier, later=later)
        slower, faster = (first, second) if pair.slower is earlier else (second, first)
        # More load explains a worse share; a faster trial close to its bound was at the cliff, where windows
        # of a steady target disagree by chance (docs/sweep.md has the false alarms these two removed).
        room = held_with_room(faster, e2e_slo_ms=e2e_slo_ms, ttft_slo_ms=ttft_slo_ms)
        if slower.offered > faster.offered or not room:
            continue
        kept = found.get(pair.rate)
        if kept is None or abs(pair.share_change) > abs(kept.share_change):
            found[pair.rate] = pair
    latency = find_speed_shifts(steps, confidence=confidence, closed_loop=closed_loop)
    if not found and not latency:
        return None
    return TargetDrift(confidence=confidence, disagreements=tuple(found.values()), latency=latency)


def held_with_room(step: StepStats, *, e2e_slo_ms: float, ttft_slo_ms: float | None = None) -> bool:
    """Whether ``step``'s p99 e2e (and p99 TTFT, given a TTFT bound) stayed within ``ROOM`` of its bound: clear of
    the cliff, where a steady target would hold again. False when the p99 is not known."""
    bounds = [("e2e_ms", e2e_slo_ms)] + ([] if ttft_slo_ms is None else [("ttft_ms", ttft_slo_ms)])
    for name, bound in bounds:
        p99 = getattr(step, name).get("p99")
        if p99 is None or p99 > ROOM * bound:
            return False
    return True


def slowest_periods(
    rates: Sequence[SettledRate],
    drift: TargetDrift | None,
    *,
    target: float,
    confidence: float = 0.95,
    luck: LuckCorrection | None = None,
) -> tuple[SettledRate, ...]:
    """``rates`` (settled, every trial pooled) with each rate whose trials disagreed judged on the slower of the two
    alone (``SettledRate.slowest``): the capacity a drifting target offers is that of its slowest period, and
    pooling a fast trial with a slow one would credit the slow period with the fast one's requests.

    A rate already BAD or INVALID on every trial pooled stays so (its slowest trial is kept to show); a GOOD one
    takes the slower trial's own verdict, settled on its point estimate when its interval straddles the target.
    """
    if drift is None:
        return tuple(rates)
    judged = []
    for settled in rates:
        pair = drift.at(settled.rate)
        trials = () if pair is None else settled.pooled.trials
        slower = next((s for s in trials if pair is not None and s.trial == pair.slower.trial), None)
        if slower is None:
            judged.append(settled)
            continue
        (alone,) = pool_rates([slower], target=target, confidence=confidence, luck=luck)
        if settled.verdict is not StepVerdict.GOOD:
            judged.append(replace(settled, slowest=alone))
            continue
        own = settle(alone, target=target, max_trials=1, confidence=confidence, final=True)
        assert own is not None  # final: always settled
        judged.append(replace(settled, verdict=own.verdict, on_point_estimate=own.on_point_estimate,
                              on_growth=own.on_growth, slowest=alone))  # fmt: skip
    return tuple(judged)


def _comparable(step: StepStats) -> bool:
    return step.offered > 0 and not step.generator_limited


def _overlap(a: Interval, b: Interval) -> bool:
    return a.low <= b.high and b.low <= a.high


def _reading(index: int, step: StepStats, confidence: float, luck: LuckCorrection | None) -> DriftReading:
    missed = None if luck is None or step.reference is None else luck.corrected_missed([step.reference])
    corrected = None if missed is None else step.offered - missed
    return DriftReading(
        rate=step.rate,
        trial=step.trial,
        step_index=index,
        started_s=step.started_s,
        offered=step.offered,
        on_time=step.on_time,
        corrected_on_time=corrected,
        interval=wilson(step.on_time if corrected is None else corrected, step.offered, confidence=confidence),
        median_e2e_ms=step.e2e_ms.get("p50"),
        recheck=step.recheck,
    )
