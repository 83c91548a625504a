"""One measured step of a capacity sweep, and the Wilson score interval of its SLO attainment.

A step is a steady open-loop phase at one offered rate. Its attainment is ``on_time / offered``, with every
failure (late, shed, timeout, error, redirect, not sent) in the denominator, and ``wilson`` gives the confidence
interval of that proportion. Judging a rate on it, pooled over trials, is ``capacity_steps``'s part;
``capacity`` re-exports both; import from there. The formulas and the reasons for them are in docs/sweep.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from types import MappingProxyType
from typing import Any

from cliffwatch.domain.capacity.arrival_luck import ReferenceReading
from cliffwatch.domain.capacity.growth import Growth
from cliffwatch.domain.capacity.step_drain import StepDrain
from cliffwatch.domain.outcomes import OUTCOMES

PERCENTILES = ("p50", "p90", "p99")
# A count field per outcome class, named by it; they sum to offered. A class newer than a stored document
# reads as 0 from it (``from_dict``), so older sweeps stay readable.
_COUNTS = tuple(outcome.value for outcome in OUTCOMES)
_RATES = ("sent_rate", "goodput_rps", "completions_per_s", "tokens_per_s")
_LATENCIES = ("ttft_ms", "itl_ms", "e2e_ms")
LATE_BOUNDS = ("ttft", "ttfa", "tpot", "e2e")  # the SLO bounds a late request can break (``StepStats.late_by``)


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


def wilson(successes: float, trials: int, *, confidence: float = 0.95) -> Interval:
    """The two-sided Wilson score interval of ``successes / trials``; ``Interval(0.0, 1.0)`` when trials == 0.
    ``successes`` may be fractional: a count corrected for a Poisson draw's luck (``arrival_luck``).

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


def share(count: int, offered: int) -> float | None:
    """``count / offered``; None when nothing was offered."""
    return count / offered if offered else None


def _percentiles(values: Mapping[str, Any]) -> Mapping[str, float | None]:
    return MappingProxyType({k: None if v is None else float(v) for k, v in values.items()})


@dataclass(frozen=True, kw_only=True)
class ClassStep:
    """One traffic class's requests in a step's window: how many, how many on time against its own SLO, and
    its tail latencies."""

    offered: int
    on_time: int
    ttft_p99_ms: float | None = None
    e2e_p99_ms: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.on_time <= self.offered:
            raise ValueError(f"a class's on-time requests ({self.on_time}) must be within 0..offered ({self.offered})")

    @property
    def attainment(self) -> float | None:
        return share(self.on_time, self.offered)

    def to_dict(self) -> dict[str, Any]:
        return {"offered": self.offered, "on_time": self.on_time, "attainment": self.attainment,
                "ttft_p99_ms": self.ttft_p99_ms, "e2e_p99_ms": self.e2e_p99_ms}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClassStep:
        ttft, e2e = data.get("ttft_p99_ms"), data.get("e2e_p99_ms")
        return cls(
            offered=int(data["offered"]), on_time=int(data["on_time"]),
            ttft_p99_ms=None if ttft is None else float(ttft), e2e_p99_ms=None if e2e is None else float(e2e),
        )  # fmt: skip


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
    redirect: int = 0  # 3xx answers not followed
    incomplete: int = 0  # 2xx answers without a whole answer (hollow streams, aborted generations)
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
    # Late requests by the SLO bound they broke ("ttft", "ttfa", "tpot", "e2e"); one request may break several, so
    # the counts may add up to more than ``late``. Empty when not known (a step from an older document).
    late_by: Mapping[str, int] = field(default_factory=dict)
    # Whether the queue grew inside the window (``domain.capacity.growth``); None when not checked (an older document,
    # or a sweep without the check).
    growth: Growth | None = None
    extended: bool = False  # measured over the longer window a growing queue asks for (SweepSpec.extended_s)
    workers: int = 0  # the worker processes that sent it (client.workers); 0: the sweep's own process
    # The server's own signals over the window (``target.metrics``): signal → first, last, min, max, mean,
    # slope_per_s, points. Empty when nothing was scraped.
    server: Mapping[str, Mapping[str, float | int | None]] = field(default_factory=dict)
    # Each traffic class's share of the window (``ClassStep``), by class name; empty without classes. The step
    # is judged on every class's requests together, each against its own SLO; these say who lost.
    classes: Mapping[str, ClassStep] = field(default_factory=dict)
    # The window's requests beside a reference queue fed the same arrivals (``arrival_luck``): what corrects a
    # Poisson step's verdict for the luck of its draw. None for constant arrivals, classes, no e2e SLO.
    reference: ReferenceReading | None = None
    # When the step began (its warm-up), in seconds from the sweep's start; None when not known (an older document).
    started_s: float | None = None
    recheck: bool = False  # the end-of-sweep recheck: the first rate measured again, to see drift (``drift``)
    # After the step, how long the target took to be idle again and how that was judged (``step_drain``); None when
    # not known (an older document, or a step the sweep was stopped in).
    drain: StepDrain | None = None
    # The server's count of the window's prompts against the intended sizes (usage.prompt_tokens): answers, mean_pct
    # (signed) and mean_abs_pct, in percent of the intended; empty when no answer carried a count.
    prompt_error: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"step at {self.rate} req/s, trial {self.trial}"
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"{where}: the rate must be finite and > 0")
        if self.trial < 1:
            raise ValueError(f"{where}: trials count from 1")
        floats = {name: getattr(self, name) for name in ("duration_s", *_RATES)}
        if self.amplification is not None:
            floats["amplification"] = self.amplification
        if self.started_s is not None:
            floats["started_s"] = self.started_s
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
        server = {str(k): MappingProxyType(dict(v)) for k, v in self.server.items()}
        object.__setattr__(self, "server", MappingProxyType(server))
        object.__setattr__(self, "classes", MappingProxyType(dict(self.classes)))
        object.__setattr__(self, "prompt_error", MappingProxyType(dict(self.prompt_error)))
        if sum(c.offered for c in self.classes.values()) not in (0, self.offered):
            raise ValueError(f"{where}: the classes' requests do not add up to offered={self.offered}")
        ref, missed = self.reference, self.offered - self.on_time
        if ref is not None and (ref.requests, ref.missed) != (self.offered, missed):
            raise ValueError(f"{where}: the reference reading counts {ref.requests} requests, {ref.missed} missed; "
                             f"the step {self.offered}, {missed}")  # fmt: skip

    @property
    def growing(self) -> bool:
        """Whether the queue was seen growing inside this step's window."""
        return self.growth is not None and self.growth.growing

    @property
    def attainment(self) -> float | None:
        """SLO attainment: ``on_time / offered``, every failure in the denominator; None when nothing was offered."""
        return share(self.on_time, self.offered)

    def interval(self, confidence: float = 0.95) -> Interval:
        """The Wilson interval of this step's attainment alone (``judge`` pools every trial at the rate)."""
        return wilson(self.on_time, self.offered, confidence=confidence)

    def share_of(self, outcome: str) -> float | None:
        """The share of the offered requests that ended in ``outcome`` (an outcome class's value)."""
        return share(getattr(self, outcome), self.offered)

    @property
    def shed_share(self) -> float | None:
        return share(self.shed, self.offered)

    @property
    def timeout_share(self) -> float | None:
        return share(self.timeout, self.offered)

    @property
    def error_share(self) -> float | None:
        return share(self.error, self.offered)

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
            growth=None if self.growth is None else self.growth.to_dict(),
            extended=self.extended,
            workers=self.workers,
            server={name: dict(stats) for name, stats in self.server.items()},
            classes={name: c.to_dict() for name, c in self.classes.items()},
            reference=None if self.reference is None else self.reference.to_dict(),
            started_s=self.started_s,
            recheck=self.recheck,
            drain=None if self.drain is None else self.drain.to_dict(),
            prompt_error=dict(self.prompt_error),
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
            **{name: int(data.get(name, 0)) for name in _COUNTS},
            fast_shed=int(data["fast_shed"]),
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
            growth=None if data.get("growth") is None else Growth.from_dict(data["growth"]),
            extended=bool(data.get("extended", False)),
            workers=int(data.get("workers") or 0),
            server={str(k): dict(v) for k, v in (data.get("server") or {}).items()},
            classes={str(k): ClassStep.from_dict(v) for k, v in (data.get("classes") or {}).items()},
            reference=None if data.get("reference") is None else ReferenceReading.from_dict(data["reference"]),
            started_s=None if data.get("started_s") is None else float(data["started_s"]),
            recheck=bool(data.get("recheck", False)),
            drain=StepDrain.from_dict(data.get("drain")),
            prompt_error={str(k): float(v) for k, v in (data.get("prompt_error") or {}).items()},
        )
