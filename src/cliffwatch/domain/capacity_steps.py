"""One measured step of a capacity sweep, and whether it met the SLO attainment target.

A step is a steady open-loop phase at one offered rate. Its attainment is ``on_time / offered``, with every
failure (late, shed, timeout, error, not sent) in the denominator. A rate is judged on the Wilson score
interval of that proportion, pooled over every trial at the rate, so the verdict reflects how many requests
were measured as well as their ratio. Where the interval straddles the target and no further trial could
move it clear, the rate is settled on its point estimate, and says so (``settle``). ``capacity``
re-exports everything here; import from there. The formulas and the reasons for them are in docs/sweep.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from statistics import NormalDist
from types import MappingProxyType
from typing import Any

PERCENTILES = ("p50", "p90", "p99")
_COUNTS = ("on_time", "late", "shed", "timeout", "error", "not_sent")  # the outcome classes; they sum to offered
_RATES = ("sent_rate", "goodput_rps", "completions_per_s", "tokens_per_s")
_LATENCIES = ("ttft_ms", "itl_ms", "e2e_ms")
LATE_BOUNDS = ("ttft", "tpot", "e2e")  # the SLO bounds a late request can break (``StepStats.late_by``)


@dataclass(frozen=True, kw_only=True)
class Interval:
    """A closed interval ``[low, high]``: here, a confidence interval of a proportion."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low <= self.high):
            raise ValueError(f"an interval needs finite low <= high, got [{self.low}, {self.high}]")

    def to_dict(self) -> dict[str, float]:
        return {"low": self.low, "high": self.high}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        return cls(low=float(data["low"]), high=float(data["high"]))


def wilson(successes: int, trials: int, *, confidence: float = 0.95) -> Interval:
    """The two-sided Wilson score interval of ``successes / trials``; ``Interval(0.0, 1.0)`` when trials == 0.

    Raises ``ValueError`` for negative counts, more successes than trials, or a confidence outside (0, 1).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return Interval(low=0.0, high=1.0)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials))
    # The exact ends are 0 when nothing succeeded and 1 when everything did; rounding must not move them.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(low=low, high=high)


def _share(count: int, offered: int) -> float | None:
    return count / offered if offered else None


def _percentiles(values: Mapping[str, Any]) -> Mapping[str, float | None]:
    return MappingProxyType({k: None if v is None else float(v) for k, v in values.items()})


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """One measured step: every number the table and the search need.

    The sweep service builds it from the measured phase's PhaseStats and the generator report. Counts are
    of logical requests *scheduled* in the measured window (warm-up excluded); latencies are measured from
    the scheduled time, so queueing in the client counts. Raises ``ValueError`` when the numbers disagree.
    """

    rate: float  # the offered arrival rate (req/s), or the concurrency level in closed-loop mode
    trial: int  # 1 for the first measurement at this rate, 2 for a repeat, …
    duration_s: float  # measured window (warm-up excluded)
    offered: int  # logical requests scheduled in the measured window (every failure included)
    on_time: int
    late: int
    shed: int
    fast_shed: int  # the part of ``shed`` refused within the fast-fail bound
    timeout: int
    error: int
    not_sent: int
    sent_rate: float  # achieved send rate (first attempts per second)
    goodput_rps: float  # on-time completions per second
    completions_per_s: float  # successful completions per second (on time or late)
    tokens_per_s: float  # output tokens per second
    amplification: float | None  # attempts per logical request sent; None when nothing was sent
    ttft_ms: Mapping[str, float | None]  # keys "p50", "p90", "p99"
    itl_ms: Mapping[str, float | None]
    e2e_ms: Mapping[str, float | None]
    generator_limited: bool
    generator_reasons: tuple[str, ...] = ()
    # Late requests by the SLO bound they broke ("ttft", "tpot", "e2e"); one request may break several, so
    # the counts may add up to more than ``late``. Empty when not known (a step from an older document).
    late_by: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"step at {self.rate} req/s, trial {self.trial}"
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"{where}: the rate must be finite and > 0")
        if self.trial < 1:
            raise ValueError(f"{where}: trials count from 1")
        floats = {name: getattr(self, name) for name in ("duration_s", *_RATES)}
        if self.amplification is not None:
            floats["amplification"] = self.amplification
        for name in _LATENCIES:
            # Copied into a read-only mapping: a frozen step must not change behind a stored result.
            object.__setattr__(self, name, _percentiles(getattr(self, name)))
            floats.update({f"{name}.{k}": v for k, v in getattr(self, name).items() if v is not None})
        for name, value in floats.items():
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{where}: {name} must be finite and >= 0, got {value}")
        counts = {name: getattr(self, name) for name in (*_COUNTS, "offered", "fast_shed")}
        negative = [name for name, value in counts.items() if value < 0]
        if negative:
            raise ValueError(f"{where}: negative counts: {', '.join(negative)}")
        total = sum(counts[name] for name in _COUNTS)
        if total != self.offered:
            raise ValueError(f"{where}: the outcome counts add up to {total}, not offered={self.offered}")
        if self.fast_shed > self.shed:
            raise ValueError(f"{where}: fast_shed {self.fast_shed} > shed {self.shed}")
        object.__setattr__(self, "generator_reasons", tuple(self.generator_reasons))
        late_by = {str(k): int(v) for k, v in self.late_by.items()}
        unknown = sorted(set(late_by) - set(LATE_BOUNDS))
        if unknown:
            raise ValueError(f"{where}: late_by names unknown bounds: {', '.join(unknown)}")
        wrong = [k for k, v in late_by.items() if not 0 <= v <= self.late]
        if wrong:
            raise ValueError(f"{where}: late_by counts must be within 0..late ({self.late}): {', '.join(wrong)}")
        object.__setattr__(self, "late_by", MappingProxyType(late_by))

    @property
    def attainment(self) -> float | None:
        """SLO attainment: ``on_time / offered``, every failure in the denominator; None when nothing was offered."""
        return _share(self.on_time, self.offered)

    def interval(self, confidence: float = 0.95) -> Interval:
        """The Wilson interval of this step's attainment alone (``judge`` pools every trial at the rate)."""
        return wilson(self.on_time, self.offered, confidence=confidence)

    @property
    def shed_share(self) -> float | None:
        return _share(self.shed, self.offered)

    @property
    def timeout_share(self) -> float | None:
        return _share(self.timeout, self.offered)

    @property
    def error_share(self) -> float | None:
        return _share(self.error, self.offered)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (finite numbers, strings, None) with the derived figures; ``from_dict`` reads it back."""
        data: dict[str, Any] = {
            "rate": self.rate,
            "trial": self.trial,
            "duration_s": self.duration_s,
            "offered": self.offered,
        }
        data.update({name: getattr(self, name) for name in (*_COUNTS, "fast_shed", *_RATES, "amplification")})
        data.update({name: dict(getattr(self, name)) for name in _LATENCIES})
        data.update(
            generator_limited=self.generator_limited,
            generator_reasons=list(self.generator_reasons),
            late_by=dict(self.late_by),
            attainment=self.attainment,
            interval=self.interval().to_dict(),  # at 95 %: the table's column; other levels via ``interval()``
            shed_share=self.shed_share,
            timeout_share=self.timeout_share,
            error_share=self.error_share,
        )
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepStats:
        """Reads ``to_dict``'s form back; derived keys (attainment, interval, shares) are recomputed, not read."""
        amplification = data["amplification"]
        return cls(
            rate=float(data["rate"]),
            trial=int(data["trial"]),
            duration_s=float(data["duration_s"]),
            offered=int(data["offered"]),
            on_time=int(data["on_time"]),
            late=int(data["late"]),
            shed=int(data["shed"]),
            fast_shed=int(data["fast_shed"]),
            timeout=int(data["timeout"]),
            error=int(data["error"]),
            not_sent=int(data["not_sent"]),
            sent_rate=float(data["sent_rate"]),
            goodput_rps=float(data["goodput_rps"]),
            completions_per_s=float(data["completions_per_s"]),
            tokens_per_s=float(data["tokens_per_s"]),
            amplification=None if amplification is None else float(amplification),
            ttft_ms=_percentiles(data["ttft_ms"]),
            itl_ms=_percentiles(data["itl_ms"]),
            e2e_ms=_percentiles(data["e2e_ms"]),
            generator_limited=bool(data["generator_limited"]),
            generator_reasons=tuple(str(r) for r in data.get("generator_reasons", ())),
            late_by={str(k): int(v) for k, v in (data.get("late_by") or {}).items()},
        )


class StepVerdict(StrEnum):
    GOOD = "good"  # the interval's low end >= target (or, settled on the point estimate, attainment >= target)
    BAD = "bad"  # the interval's high end < target (or, settled on the point estimate, attainment < target)
    UNSURE = "unsure"  # the interval straddles the target: measure again (pooled), or settle on the estimate
    INVALID = "invalid"  # the generator could not keep its schedule (or nothing was offered): neither good nor bad


def judge(steps_at_rate: Sequence[StepStats], target: float, confidence: float = 0.95) -> StepVerdict:
    """The verdict on one rate, from every trial at it pooled (sums of on_time and offered) before judging.

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
    interval = wilson(
        sum(s.on_time for s in steps_at_rate), sum(s.offered for s in steps_at_rate), confidence=confidence
    )
    if interval.low >= target:
        return StepVerdict.GOOD
    if interval.high < target:
        return StepVerdict.BAD
    return StepVerdict.UNSURE


@dataclass(frozen=True, kw_only=True)
class PooledRate:
    """Every trial at one rate pooled: the row the search and the summary reason about.

    ``verdict`` is ``judge``'s, on the interval alone (it may be UNSURE); ``settle`` turns it into a final one.
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

    @property
    def attainment(self) -> float | None:
        return _share(self.on_time, self.offered)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "trials": len(self.trials),
            "verdict": self.verdict.value,
            "offered": self.offered,
            "on_time": self.on_time,
            "attainment": self.attainment,
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
        )


def _weighted(values: Sequence[float], weights: Sequence[float]) -> float:
    total = math.fsum(weights)
    if total <= 0:
        return math.fsum(values) / len(values)
    return math.fsum(v * w for v, w in zip(values, weights, strict=True)) / total


def pool_rates(steps: Sequence[StepStats], *, target: float, confidence: float = 0.95) -> tuple[PooledRate, ...]:
    """The steps grouped by rate and pooled, lowest rate first."""
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
        pooled.append(
            PooledRate(
                rate=rate,
                trials=tuple(trials),
                verdict=judge(trials, target, confidence),
                offered=offered,
                on_time=on_time,
                interval=wilson(on_time, offered, confidence=confidence),
                tokens_per_s=_weighted([s.tokens_per_s for s in trials], durations),
                completions_per_s=_weighted([s.completions_per_s for s in trials], durations),
                timeout_share=_share(sum(s.timeout for s in trials), offered),
                p99_e2e_ms=max(p99s, default=None),
                p99_ttft_ms=max(ttfts, default=None),
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

    def __post_init__(self) -> None:
        if self.verdict is StepVerdict.UNSURE:
            raise ValueError(f"the rate {self.rate:g} is not settled: a settled verdict is good, bad or invalid")

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "verdict": self.verdict.value,
            "on_point_estimate": self.on_point_estimate,
            "pooled": self.pooled.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, steps: Sequence[StepStats]) -> SettledRate:
        return cls(
            rate=float(data["rate"]),
            verdict=StepVerdict(data["verdict"]),
            on_point_estimate=bool(data["on_point_estimate"]),
            pooled=PooledRate.from_dict(data["pooled"], steps=steps),
        )


def settle(
    pooled: PooledRate, *, target: float, max_trials: int, confidence: float = 0.95, final: bool = False
) -> SettledRate | None:
    """The rate's settled verdict, or None when another trial is due.

    INVALID when a trial was generator-limited or nothing was offered; GOOD or BAD when the pooled interval
    is clear of the target. Otherwise another trial is due while fewer than ``max_trials`` were measured and
    the remaining trials, as large as the ones so far, could clear the interval in the direction the point
    estimate leans: all on time for GOOD (attainment >= target), all failed for BAD. Failing that, or with
    ``final`` (the search is over), the rate is settled on the point estimate, flagged ``on_point_estimate``.
    """
    verdict = pooled.verdict
    if verdict is StepVerdict.UNSURE and pooled.offered == 0:
        verdict = StepVerdict.INVALID  # nothing was scheduled, so nothing was measured
    if verdict is not StepVerdict.UNSURE:
        return SettledRate(rate=pooled.rate, verdict=verdict, on_point_estimate=False, pooled=pooled)
    leans_good = pooled.on_time >= target * pooled.offered
    remaining = max_trials - len(pooled.trials)
    if remaining > 0 and not final:
        more = remaining * round(pooled.offered / len(pooled.trials))
        if leans_good:
            could_settle = wilson(pooled.on_time + more, pooled.offered + more, confidence=confidence).low >= target
        else:
            could_settle = wilson(pooled.on_time, pooled.offered + more, confidence=confidence).high < target
        if could_settle:
            return None
    verdict = StepVerdict.GOOD if leans_good else StepVerdict.BAD
    return SettledRate(rate=pooled.rate, verdict=verdict, on_point_estimate=True, pooled=pooled)
