"""Arrival processes and the planned send offsets they produce for one phase.

A plan is a pure function of the process, the phase duration and a caller-seeded ``random.Random``:
the same seed always gives the same offsets. Offsets are seconds from the phase start, increasing,
within ``[0, duration)``. RateStep and spike processes are piecewise Poisson (memoryless, so each segment
can start afresh at its boundary).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from cliffwatch.domain.scenario.trace import TraceArrival, parse_trace
from cliffwatch.domain.validation import Problems, Reader


@dataclass(frozen=True, kw_only=True)
class Constant:
    """Evenly spaced sends at ``rate`` per second, the first at the phase start."""

    rate: float

    def mean_rate(self, duration_s: float) -> float:
        return self.rate

    def peak_rate(self) -> float:
        return self.rate

    def describe(self) -> str:
        return f"constant {self.rate:g}/s"


@dataclass(frozen=True, kw_only=True)
class Poisson:
    """Exponential gaps with mean ``1/rate``."""

    rate: float

    def mean_rate(self, duration_s: float) -> float:
        return self.rate

    def peak_rate(self) -> float:
        return self.rate

    def describe(self) -> str:
        return f"poisson {self.rate:g}/s"


@dataclass(frozen=True, kw_only=True)
class Gamma:
    """Gamma-distributed gaps with mean ``1/rate``; ``burstiness`` is the shape, as vLLM's ``--burstiness``.

    Burstiness 1 is Poisson; below 1 arrivals clump into bursts, above 1 they are more regular.
    """

    rate: float
    burstiness: float

    def mean_rate(self, duration_s: float) -> float:
        return self.rate

    def peak_rate(self) -> float:
        return self.rate

    def describe(self) -> str:
        return f"gamma {self.rate:g}/s burstiness {self.burstiness:g}"


@dataclass(frozen=True, kw_only=True)
class RateStep:
    rate: float
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class Steps:
    """Poisson arrivals whose rate changes at fixed times; the steps cover the phase exactly."""

    steps: tuple[RateStep, ...]

    def mean_rate(self, duration_s: float) -> float:
        return sum(s.rate * s.duration_s for s in self.steps) / duration_s

    def peak_rate(self) -> float:
        return max(s.rate for s in self.steps)

    def describe(self) -> str:
        return "steps " + " → ".join(f"{s.rate:g}/s×{s.duration_s:g}s" for s in self.steps)


@dataclass(frozen=True, kw_only=True)
class Spike:
    """Poisson at ``base_rate`` with square bursts at ``burst_rate`` lasting ``burst_s`` every ``period_s``.

    The first burst starts ``offset_s`` into the phase.
    """

    base_rate: float
    burst_rate: float
    burst_s: float
    period_s: float
    offset_s: float

    def mean_rate(self, duration_s: float) -> float:
        busy = sum(end - start for start, end in self.bursts(duration_s))
        return (self.base_rate * (duration_s - busy) + self.burst_rate * busy) / duration_s

    def peak_rate(self) -> float:
        return max(self.base_rate, self.burst_rate)

    def bursts(self, duration_s: float) -> Iterator[tuple[float, float]]:
        start = self.offset_s
        while start < duration_s:
            yield start, min(start + self.burst_s, duration_s)
            start += self.period_s

    def describe(self) -> str:
        return (
            f"spike {self.base_rate:g}/s with {self.burst_rate:g}/s bursts of {self.burst_s:g}s "
            f"every {self.period_s:g}s"
        )


@dataclass(frozen=True, kw_only=True)
class Mix:
    """A phase's arrivals by traffic class (``domain.scenario.traffic_classes``): each class its own process
    (``parts``), or one process (``whole``) whose arrivals are dealt out to the classes by weight (``shares``,
    summing to 1).
    A class it does not name sends nothing in the phase."""

    parts: tuple[tuple[str, Arrival], ...] = ()
    whole: Arrival | None = None
    shares: tuple[tuple[str, float], ...] = ()

    def mean_rate(self, duration_s: float) -> float:
        if self.whole is not None:
            return self.whole.mean_rate(duration_s)
        return math.fsum(arrival.mean_rate(duration_s) for _, arrival in self.parts)

    def peak_rate(self) -> float:
        """At most the sum of every part's peak (they may peak at once)."""
        if self.whole is not None:
            return self.whole.peak_rate()
        return math.fsum(arrival.peak_rate() for _, arrival in self.parts)

    def class_rate(self, name: str, duration_s: float) -> float:
        """The mean rate ``name`` sends at in the phase."""
        if self.whole is not None:
            return self.whole.mean_rate(duration_s) * dict(self.shares).get(name, 0.0)
        return math.fsum(arrival.mean_rate(duration_s) for part, arrival in self.parts if part == name)

    def describe(self) -> str:
        if self.whole is not None:
            shared = ", ".join(f"{name} {share * 100:.0f} %" for name, share in self.shares)
            return f"{self.whole.describe()} shared {shared}"
        return "; ".join(f"{name}: {arrival.describe()}" for name, arrival in self.parts)


Arrival = Constant | Poisson | Gamma | Steps | Spike | TraceArrival | Mix

PROCESSES = ("constant", "poisson", "gamma", "step", "spike", "trace")
MIN_BURSTINESS = 0.01
MIN_SPIKE_PERIOD_S = 0.1


def plan_offsets(arrival: Arrival, duration_s: float, rng: random.Random) -> Iterator[float]:
    """Send offsets (seconds from the phase start) in increasing order, all ``< duration_s``."""
    if isinstance(arrival, Mix):
        for offset, _ in mix_offsets(arrival, duration_s, rng):
            yield offset
    elif isinstance(arrival, Constant):
        gap = 1.0 / arrival.rate
        index = 0
        while (offset := index * gap) < duration_s:
            yield offset
            index += 1
    elif isinstance(arrival, Poisson):
        yield from _poisson(arrival.rate, 0.0, duration_s, rng)
    elif isinstance(arrival, Gamma):
        # rate × burstiness underflows to 0 for a subnormal rate: an endless mean gap, not a ZeroDivisionError
        product = arrival.rate * arrival.burstiness
        scale = 1.0 / product if product > 0 else math.inf
        offset = rng.gammavariate(arrival.burstiness, scale)
        while offset < duration_s:
            yield offset
            offset += rng.gammavariate(arrival.burstiness, scale)
    elif isinstance(arrival, TraceArrival):
        for offset, _ in arrival.offsets(duration_s):
            yield offset
    elif isinstance(arrival, Steps):
        start = 0.0
        for step in arrival.steps:
            end = min(start + step.duration_s, duration_s)
            yield from _poisson(step.rate, start, end, rng)
            start = end
    else:
        cursor = 0.0
        for burst_start, burst_end in arrival.bursts(duration_s):
            yield from _poisson(arrival.base_rate, cursor, burst_start, rng)
            yield from _poisson(arrival.burst_rate, burst_start, burst_end, rng)
            cursor = burst_end
        yield from _poisson(arrival.base_rate, cursor, duration_s, rng)


def mix_offsets(mix: Mix, duration_s: float, rng: random.Random) -> Iterator[tuple[float, str]]:
    """A mix's send offsets in increasing order, each with the class it belongs to. Each part's process runs
    on a generator of its own (seeded from ``rng``), so adding a class leaves the others' arrivals as they were;
    a shared process deals each arrival to a class by weight, with a generator of its own too."""
    if mix.whole is not None:
        dealer = random.Random(rng.random())
        names = [name for name, _ in mix.shares]
        weights = [share for _, share in mix.shares]
        for offset in plan_offsets(mix.whole, duration_s, rng):
            yield offset, dealer.choices(names, weights)[0]
        return
    seeds = [rng.random() for _ in mix.parts]
    streams = [_tagged(arrival, duration_s, random.Random(seed), index, name)
               for index, ((name, arrival), seed) in enumerate(zip(mix.parts, seeds, strict=True))]  # fmt: skip
    for offset, _, name in heapq.merge(*streams):
        yield offset, name


def _tagged(
    arrival: Arrival, duration_s: float, rng: random.Random, index: int, name: str
) -> Iterator[tuple[float, int, str]]:
    """One part's offsets, each with its part's index (ties break in the parts' order) and class name."""
    for offset in plan_offsets(arrival, duration_s, rng):
        yield offset, index, name


def _poisson(rate: float, start: float, end: float, rng: random.Random) -> Iterator[float]:
    if rate <= 0 or end <= start:
        return
    offset = start + rng.expovariate(rate)
    while offset < end:
        yield offset
        offset += rng.expovariate(rate)


def parse_arrival(value: object, path: str, problems: Problems, *, duration_s: float | None) -> Arrival | None:
    """An arrival process from its YAML form; ``duration_s`` (when known) checks steps and bursts fit."""
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    process = reader.string("process", choices=PROCESSES)
    result: Arrival | None = None
    if process in ("constant", "poisson"):
        rate = reader.number("rate", gt=0)
        if rate is not None:
            result = Constant(rate=rate) if process == "constant" else Poisson(rate=rate)
    elif process == "gamma":
        rate = reader.number("rate", gt=0)
        # Below 0.01 most gamma draws underflow to 0.0 (all of them near 1e-300): the plan would never advance.
        burstiness = reader.number("burstiness", ge=MIN_BURSTINESS, le=100)
        if rate is not None and burstiness is not None:
            result = Gamma(rate=rate, burstiness=burstiness)
    elif process == "step":
        result = _parse_steps(reader, duration_s)
    elif process == "spike":
        result = _parse_spike(reader, duration_s)
    elif process == "trace":
        result = parse_trace(reader)
    else:
        for key in reader.data:
            reader.raw(key, None)
    reader.done()
    return result


def _parse_steps(reader: Reader, duration_s: float | None) -> Steps | None:
    steps: list[RateStep] = []
    ok = True
    for path, item in reader.items("steps", nonempty=True):
        step_reader = Reader.of(item, path, reader.problems)
        if step_reader is None:
            ok = False
            continue
        rate = step_reader.number("rate", ge=0)
        step_duration = step_reader.number("duration_s", gt=0)
        step_reader.done()
        if rate is None or step_duration is None:
            ok = False
            continue
        steps.append(RateStep(rate=rate, duration_s=step_duration))
    if not ok or not steps:
        return None
    total = sum(s.duration_s for s in steps)
    if duration_s is not None and abs(total - duration_s) > 1e-6:
        reader.error("steps", f"durations must add up to the phase's duration_s ({duration_s:g}), got {total:g}")
        return None
    if all(s.rate == 0 for s in steps):
        reader.error("steps", "at least one step must have rate > 0")
        return None
    return Steps(steps=tuple(steps))


def _parse_spike(reader: Reader, duration_s: float | None) -> Spike | None:
    base = reader.number("base_rate", ge=0)
    burst = reader.number("burst_rate", gt=0)
    burst_s = reader.number("burst_s", gt=0)
    # Every burst is walked one by one, so a tiny period would stall validation and planning.
    period_s = reader.number("period_s", ge=MIN_SPIKE_PERIOD_S)
    offset_s = reader.number("offset_s", 0, ge=0)
    if None in (base, burst, burst_s, period_s, offset_s):
        return None
    if burst_s >= period_s:
        reader.error("burst_s", f"must be shorter than period_s ({period_s:g})")
        return None
    if duration_s is not None and offset_s >= duration_s:
        reader.error("offset_s", f"must be inside the phase (< duration_s {duration_s:g})")
        return None
    return Spike(base_rate=base, burst_rate=burst, burst_s=burst_s, period_s=period_s, offset_s=offset_s)
