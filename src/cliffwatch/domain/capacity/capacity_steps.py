"""Whether a capacity sweep's steps met the SLO attainment target: judging, pooling and settling a rate.

A rate is judged on the Wilson score interval of its attainment (``capacity_stats``), pooled over every
trial at the rate, so the verdict reflects how many requests were measured as well as their ratio. Poisson
steps read beside a reference queue that fits the sweep are judged on their attainment corrected for the luck
of their draws (``arrival_luck``, fitted on every step of the sweep: ``fit_luck``). Where the
interval straddles the target and no further trial could move it clear, the rate is settled on its point
estimate, and says so (``settle``). The step itself (``StepStats``, ``Interval``, ``wilson``) lives in
``capacity_stats`` and is re-exported here. ``capacity`` re-exports everything here; import from there. The
formulas and the reasons for them are in docs/sweep.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cliffwatch.domain.capacity.arrival_luck import LuckCorrection, fit
from cliffwatch.domain.capacity.capacity_stats import (
    LATE_BOUNDS,
    PERCENTILES,
    Interval,
    StepStats,
    share,
    wilson,
)
from cliffwatch.domain.capacity.growth import Growth

__all__ = [
    "LATE_BOUNDS",
    "PERCENTILES",
    "Interval",
    "PooledRate",
    "SettledRate",
    "StepStats",
    "StepVerdict",
    "fit_luck",
    "judge",
    "pool_rates",
    "settle",
    "wilson",
]


class StepVerdict(StrEnum):
    GOOD = "good"  # the interval's low end >= target (or, settled on the point estimate, attainment >= target)
    BAD = "bad"  # the interval's high end < target (or, settled on the point estimate, attainment < target)
    UNSURE = "unsure"  # the interval straddles the target: measure again (pooled), or settle on the estimate
    INVALID = "invalid"  # the generator could not keep its schedule (or nothing was offered): neither good nor bad


def fit_luck(steps: Sequence[StepStats]) -> LuckCorrection:
    """The sweep's arrival-luck correction, fitted on every step with a reference reading whose generator kept
    its schedule (``arrival_luck.fit``)."""
    return fit(s.reference for s in steps if s.reference is not None and not s.generator_limited)


def judged_on_time(steps_at_rate: Sequence[StepStats], luck: LuckCorrection | None) -> float:
    """The on-time requests a rate is judged on: counted, or corrected for the luck of its draws when ``luck``
    applies to every trial at the rate."""
    counted = sum(s.on_time for s in steps_at_rate)
    missed = None if luck is None else luck.corrected_missed(s.reference for s in steps_at_rate)
    return float(counted) if missed is None else sum(s.offered for s in steps_at_rate) - missed


def judge(
    steps_at_rate: Sequence[StepStats], target: float, confidence: float = 0.95, luck: LuckCorrection | None = None
) -> StepVerdict:
    """The verdict on one rate, from every trial at it pooled (sums of on_time and offered) before judging,
    the on-time count corrected by ``luck`` when it applies (``judged_on_time``).

    INVALID when any trial was generator-limited: that trial's requests left late, so its numbers describe
    the client, and pooling it with good trials would hide that. Raises ``ValueError`` for no steps, steps
    at different rates, or a target outside (0, 1).
    """
    if not steps_at_rate:
        raise ValueError("judge needs at least one step")
    if not 0 < target < 1:
        raise ValueError(f"the attainment target must be in (0, 1), got {target}")
    rate = steps_at_rate[0].rate
    if any(not math.isclose(s.rate, rate, rel_tol=1e-9) for s in steps_at_rate):
        raise ValueError(f"judge pools one rate; got {sorted({s.rate for s in steps_at_rate})}")
    if any(s.generator_limited for s in steps_at_rate):
        return StepVerdict.INVALID
    interval = wilson(judged_on_time(steps_at_rate, luck), sum(s.offered for s in steps_at_rate), confidence=confidence)
    if interval.low >= target:
        return StepVerdict.GOOD
    if interval.high < target:
        return StepVerdict.BAD
    return StepVerdict.UNSURE


@dataclass(frozen=True, kw_only=True)
class PooledRate:
    """Every trial at one rate pooled: the row the search and the summary reason about.

    ``verdict`` is ``judge``'s, on the interval alone (it may be UNSURE); ``settle`` turns it into a final one.
    ``interval`` is of the judged attainment: ``corrected_on_time`` when the sweep's arrival-luck correction
    applied to the rate, else the counted ``on_time``.
    """

    rate: float
    trials: tuple[StepStats, ...]
    verdict: StepVerdict
    offered: int
    on_time: int
    interval: Interval
    tokens_per_s: float  # duration-weighted mean over the trials
    completions_per_s: float
    timeout_share: float | None
    p99_e2e_ms: float | None  # the worst trial's: percentiles cannot be pooled from percentiles
    p99_ttft_ms: float | None = None  # likewise the worst trial's
    corrected_on_time: float | None = None  # on time, corrected for the luck of the draws (``arrival_luck``)

    @property
    def attainment(self) -> float | None:
        return share(self.on_time, self.offered)

    @property
    def judged_on_time(self) -> float:
        return float(self.on_time) if self.corrected_on_time is None else self.corrected_on_time

    @property
    def judged_attainment(self) -> float | None:
        """The attainment the rate was judged on: corrected for luck when it was, else counted."""
        return self.judged_on_time / self.offered if self.offered else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "trials": len(self.trials),
            "verdict": self.verdict.value,
            "offered": self.offered,
            "on_time": self.on_time,
            "attainment": self.attainment,
            "corrected_on_time": self.corrected_on_time,
            "corrected_attainment": None if self.corrected_on_time is None else self.judged_attainment,
            "interval": self.interval.to_dict(),
            "tokens_per_s": self.tokens_per_s,
            "completions_per_s": self.completions_per_s,
            "timeout_share": self.timeout_share,
            "p99_e2e_ms": self.p99_e2e_ms,
            "p99_ttft_ms": self.p99_ttft_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, steps: Sequence[StepStats]) -> PooledRate:
        """Reads ``to_dict``'s form back; the trials are the ``steps`` at the same rate (``to_dict`` counts them)."""
        rate = float(data["rate"])
        trials = tuple(s for s in steps if math.isclose(s.rate, rate, rel_tol=1e-9))
        if len(trials) != int(data["trials"]):
            raise ValueError(f"the rate {rate:g} pooled {data['trials']} trials, but {len(trials)} steps are at it")
        timeout_share, p99, ttft = data["timeout_share"], data["p99_e2e_ms"], data.get("p99_ttft_ms")
        corrected = data.get("corrected_on_time")
        return cls(
            rate=rate,
            trials=trials,
            verdict=StepVerdict(data["verdict"]),
            offered=int(data["offered"]),
            on_time=int(data["on_time"]),
            interval=Interval.from_dict(data["interval"]),
            tokens_per_s=float(data["tokens_per_s"]),
            completions_per_s=float(data["completions_per_s"]),
            timeout_share=None if timeout_share is None else float(timeout_share),
            p99_e2e_ms=None if p99 is None else float(p99),
            p99_ttft_ms=None if ttft is None else float(ttft),
            corrected_on_time=None if corrected is None else float(corrected),
        )


def _weighted(values: Sequence[float], weights: Sequence[float]) -> float:
    total = math.fsum(weights)
    if total <= 0:
        return math.fsum(values) / len(values)
    return math.fsum(v * w for v, w in zip(values, weights, strict=True)) / total


def pool_rates(
    steps: Sequence[StepStats], *, target: float, confidence: float = 0.95, luck: LuckCorrection | None = None
) -> tuple[PooledRate, ...]:
    """The steps grouped by rate and pooled, lowest rate first; each rate judged with ``luck`` (the sweep's
    correction, ``fit_luck`` of all its steps) where it applies."""
    by_rate: dict[float, list[StepStats]] = {}
    for step in steps:
        by_rate.setdefault(step.rate, []).append(step)
    pooled = []
    for rate in sorted(by_rate):
        trials = by_rate[rate]
        offered, on_time = sum(s.offered for s in trials), sum(s.on_time for s in trials)
        durations = [s.duration_s for s in trials]
        p99s = [p for s in trials if (p := s.e2e_ms.get("p99")) is not None]
        ttfts = [p for s in trials if (p := s.ttft_ms.get("p99")) is not None]
        missed = None if luck is None else luck.corrected_missed(s.reference for s in trials)
        corrected = None if missed is None else offered - missed
        pooled.append(
            PooledRate(
                rate=rate,
                trials=tuple(trials),
                verdict=judge(trials, target, confidence, luck),
                offered=offered,
                on_time=on_time,
                interval=wilson(on_time if corrected is None else corrected, offered, confidence=confidence),
                tokens_per_s=_weighted([s.tokens_per_s for s in trials], durations),
                completions_per_s=_weighted([s.completions_per_s for s in trials], durations),
                timeout_share=share(sum(s.timeout for s in trials), offered),
                p99_e2e_ms=max(p99s, default=None),
                p99_ttft_ms=max(ttfts, default=None),
                corrected_on_time=corrected,
            )
        )
    return tuple(pooled)


@dataclass(frozen=True, kw_only=True)
class SettledRate:
    """A rate's final verdict: GOOD, BAD or INVALID, never UNSURE.

    ``on_point_estimate`` says the interval still straddled the target when measuring stopped, so the verdict
    rests on the pooled attainment alone; the result and the table say so.
    """

    rate: float
    verdict: StepVerdict
    on_point_estimate: bool
    pooled: PooledRate
    # BAD because its queue grew inside the step, whatever its attainment: over the extended window, or in the
    # last step measured when the search ended before an extended one could run.
    on_growth: bool = False
    # With the target's speed drifting (``drift``): the slower of the rate's two disagreeing trials alone, pooled;
    # the verdict rests on it (the target's slowest period), not on every trial pooled.
    slowest: PooledRate | None = None

    def __post_init__(self) -> None:
        if self.verdict is StepVerdict.UNSURE:
            raise ValueError(f"the rate {self.rate:g} is not settled: a settled verdict is good, bad or invalid")
        if self.slowest is not None and len(self.slowest.trials) != 1:
            raise ValueError(f"the rate {self.rate:g}'s slowest period is one trial, got {len(self.slowest.trials)}")

    @property
    def judged(self) -> PooledRate:
        """What the verdict rests on: the slowest trial when the target drifted at this rate, else every trial."""
        return self.pooled if self.slowest is None else self.slowest

    @property
    def growth(self) -> Growth | None:
        """The growth reading of the rate's last (longest) trial, when it was checked; the end-of-sweep recheck
        is not the search's."""
        last = max((s for s in self.pooled.trials if not s.recheck), key=lambda s: s.trial, default=None)
        return None if last is None else last.growth

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "verdict": self.verdict.value,
            "on_point_estimate": self.on_point_estimate,
            "on_growth": self.on_growth,
            "pooled": self.pooled.to_dict(),
            "slowest": None if self.slowest is None else {**self.slowest.to_dict(), "trial": self.slowest_trial},
        }

    @property
    def slowest_trial(self) -> int | None:
        """The trial number of ``slowest``: the one the verdict rests on when the target drifted at this rate."""
        return None if self.slowest is None else self.slowest.trials[0].trial

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, steps: Sequence[StepStats]) -> SettledRate:
        slowest = data.get("slowest")  # absent from documents older than the drift rule
        return cls(
            rate=float(data["rate"]),
            verdict=StepVerdict(data["verdict"]),
            on_point_estimate=bool(data["on_point_estimate"]),
            pooled=PooledRate.from_dict(data["pooled"], steps=steps),
            on_growth=bool(data.get("on_growth", False)),
            slowest=None if slowest is None else PooledRate.from_dict(
                slowest, steps=[s for s in steps if s.trial == int(slowest["trial"])]),
        )  # fmt: skip


def settle(
    pooled: PooledRate, *, target: float, max_trials: int, confidence: float = 0.95, final: bool = False
) -> SettledRate | None:
    """The rate's settled verdict, or None when another trial is due.

    INVALID when a trial was generator-limited, or when nothing was offered in any of ``max_trials`` trials
    (before that, another trial is due: an empty Poisson window measured nothing). When the last trial saw the
    queue grow (``StepStats.growing``) and the rate is not already BAD: after an extended trial (or ``final``), BAD
    (``on_growth``); before one, None (an extended trial is due, whatever ``max_trials`` says). GOOD or BAD
    when the pooled interval is clear of the target. Otherwise another trial is due while fewer than
    ``max_trials`` were measured and the remaining trials, as large as the ones so far, could clear the interval
    in the direction the point estimate leans: all on time for GOOD (attainment >= target), all failed for BAD.
    Failing that, or with ``final`` (the search is over), the rate is settled on the point estimate, flagged
    ``on_point_estimate``.
    """
    verdict = pooled.verdict
    if verdict is StepVerdict.UNSURE and pooled.offered == 0:
        # Nothing was scheduled (a Poisson window at a low rate can be empty): nothing was measured, which says
        # nothing about the target. Measured again while trials remain; only a rate empty every time is INVALID.
        if len(pooled.trials) < max_trials and not final:
            return None
        verdict = StepVerdict.INVALID
    # The end-of-sweep recheck is the drift rule's to read (``drift``), not a reason to measure again.
    last = max((s for s in pooled.trials if not s.recheck), key=lambda s: s.trial, default=pooled.trials[-1])
    if verdict is not StepVerdict.INVALID and verdict is not StepVerdict.BAD and last.growing:
        # The queue grew inside the step: a longer one shows whether it keeps growing. If it still does, the rate
        # is not sustainable, however many of its requests a window this short let through on time.
        # A search that ended before the extended trial could run (max_steps) has a growing queue unanswered:
        # such a rate is not shown to be usable, so it is BAD too, conservatively.
        if last.extended or final:
            return SettledRate(rate=pooled.rate, verdict=StepVerdict.BAD, on_point_estimate=False, pooled=pooled,
                               on_growth=True)  # fmt: skip
        return None
    if verdict is not StepVerdict.UNSURE:
        return SettledRate(rate=pooled.rate, verdict=verdict, on_point_estimate=False, pooled=pooled)
    on_time = pooled.judged_on_time
    leans_good = on_time >= target * pooled.offered
    remaining = max_trials - len(pooled.trials)
    if remaining > 0 and not final:
        more = remaining * round(pooled.offered / len(pooled.trials))
        if leans_good:
            could_settle = wilson(on_time + more, pooled.offered + more, confidence=confidence).low >= target
        else:
            could_settle = wilson(on_time, pooled.offered + more, confidence=confidence).high < target
        if could_settle:
            return None
    verdict = StepVerdict.GOOD if leans_good else StepVerdict.BAD
    return SettledRate(rate=pooled.rate, verdict=verdict, on_point_estimate=True, pooled=pooled)
