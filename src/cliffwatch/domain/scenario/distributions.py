"""Integer-valued distributions for request shapes (prompt length, max_tokens), parsed and sampled.

YAML forms: a bare integer (fixed), or a mapping with ``dist`` set to ``fixed`` (value), ``uniform``
(min, max), ``lognormal`` (median, sigma, optional min/max clamps) or ``choice`` (values, optional weights).
Sampling takes the caller's ``random.Random``: the domain owns no randomness. Every distribution knows its
``largest`` possible value, which is what caps judge (the worst case, not the mean).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from cliffwatch.domain.validation import Problems, Reader, check_number


@dataclass(frozen=True, kw_only=True)
class Fixed:
    value: int

    def sample(self, rng: random.Random) -> int:
        return self.value

    @property
    def largest(self) -> int:
        return self.value

    @property
    def mean(self) -> float:
        return float(self.value)

    def describe(self) -> str:
        return str(self.value)


@dataclass(frozen=True, kw_only=True)
class Uniform:
    low: int
    high: int

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)

    @property
    def largest(self) -> int:
        return self.high

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def describe(self) -> str:
        return f"uniform {self.low}..{self.high}"


@dataclass(frozen=True, kw_only=True)
class LogNormal:
    median: float
    sigma: float
    low: int
    high: int

    def sample(self, rng: random.Random) -> int:
        # lognormvariate is exp(normalvariate(...)); clamping in log space first gives the same values but
        # keeps exp() from overflowing on an extreme draw (a large median with a wide sigma).
        logged = rng.normalvariate(math.log(self.median), self.sigma)
        drawn = math.exp(min(logged, math.log(self.high) + 1.0))
        return max(self.low, min(self.high, round(drawn)))

    @property
    def largest(self) -> int:
        return self.high  # the clamp: a draw is never above it

    @property
    def mean(self) -> float:
        # Clamping shifts the mean a little; the unclamped figure is what people reason with.
        return self.median * math.exp(self.sigma**2 / 2)

    def describe(self) -> str:
        return f"lognormal median {self.median:g} sigma {self.sigma:g}"


@dataclass(frozen=True, kw_only=True)
class Choice:
    values: tuple[int, ...]
    weights: tuple[float, ...]

    def sample(self, rng: random.Random) -> int:
        return rng.choices(self.values, weights=self.weights, k=1)[0]

    @property
    def largest(self) -> int:
        # a value of weight 0 is never drawn; not all weights are 0 (validation)
        return max(v for v, w in zip(self.values, self.weights, strict=True) if w > 0)

    @property
    def mean(self) -> float:
        total = sum(self.weights)
        return sum(v * w for v, w in zip(self.values, self.weights, strict=True)) / total

    def describe(self) -> str:
        pairs = ", ".join(f"{v}×{w:g}" for v, w in zip(self.values, self.weights, strict=True))
        return f"choice {pairs}"


Distribution = Fixed | Uniform | LogNormal | Choice

_KINDS = ("fixed", "uniform", "lognormal", "choice")
DEFAULT_MAXIMUM = 1_000_000


def parse_distribution(
    value: object, path: str, problems: Problems, *, minimum: int = 1, maximum: int = DEFAULT_MAXIMUM
) -> Distribution | None:
    """A distribution of whole numbers in [``minimum``, ``maximum``] from its YAML form, or None with problems
    recorded. ``maximum`` is also a lognormal's default clamp."""
    if not isinstance(value, Mapping):
        number = check_number(value, path, problems, ge=minimum, le=maximum, integer=True)
        return None if number is None else Fixed(value=number)
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    kind = reader.string("dist", choices=_KINDS)
    result: Distribution | None = None
    if kind == "fixed":
        fixed = reader.number("value", ge=minimum, le=maximum, integer=True)
        result = None if fixed is None else Fixed(value=fixed)
    elif kind == "uniform":
        low = reader.number("min", ge=minimum, le=maximum, integer=True)
        high = reader.number("max", ge=minimum, le=maximum, integer=True)
        if low is not None and high is not None:
            if high < low:
                reader.error("max", f"must be >= min ({low})")
            else:
                result = Uniform(low=low, high=high)
    elif kind == "lognormal":
        result = _parse_lognormal(reader, minimum, maximum)
    elif kind == "choice":
        result = _parse_choice(reader, minimum, maximum)
    else:
        _mark_all_seen(reader)
    reader.done()
    return result


def _parse_lognormal(reader: Reader, minimum: int, maximum: int) -> LogNormal | None:
    median = reader.number("median", ge=minimum, le=maximum)
    sigma = reader.number("sigma", gt=0, le=5)
    low = reader.number("min", minimum, ge=minimum, le=maximum, integer=True)
    high = reader.number("max", maximum, ge=minimum, le=maximum, integer=True)
    if None in (median, sigma, low, high):
        return None
    if high < low:
        reader.error("max", f"must be >= min ({low})")
        return None
    return LogNormal(median=float(median), sigma=float(sigma), low=low, high=high)


def _parse_choice(reader: Reader, minimum: int, maximum: int) -> Choice | None:
    values = [
        check_number(v, p, reader.problems, ge=minimum, le=maximum, integer=True)
        for p, v in reader.items("values", nonempty=True)
    ]
    weights_given = reader.has("weights")
    weights = [check_number(w, p, reader.problems, ge=0) for p, w in reader.items("weights", None)]
    if not values or None in values or None in weights:
        return None
    if not weights_given:
        weights = [1.0] * len(values)
    elif not isinstance(reader.data["weights"], list | tuple):
        return None  # already reported as not a list
    elif len(weights) != len(values):
        reader.error("weights", f"must have one weight per value ({len(values)}), got {len(weights)}")
        return None
    elif sum(weights) <= 0:
        reader.error("weights", "must not all be zero")
        return None
    elif not math.isfinite(sum(weights)):
        # random.choices refuses an infinite total at sampling time
        reader.error("weights", "must add up to a finite number")
        return None
    return Choice(values=tuple(values), weights=tuple(float(w) for w in weights))


def _mark_all_seen(reader: Reader) -> None:
    # With no valid kind we cannot tell which keys belong, so only the kind itself is reported.
    for key in reader.data:
        reader.raw(key, None)
