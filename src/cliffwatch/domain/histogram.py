"""A mergeable latency histogram with bounded relative error (log-spaced buckets, as in DDSketch).

Memory grows with the logarithm of the value range, not with the number of values, so per-second
and per-phase histograms stay small however long a run lasts. A quantile read back is within
``relative_accuracy`` of a value actually recorded at that rank.

The default accuracy is 0.1 % (three significant digits, as HDR histograms give latency tools): at 1 %
a 20-ms server's p50 read the same bucket (21.978 ms) at every rate, hiding changes of a few hundred
microseconds. Buckets stay few: values from 1 ms to 60 s span at most about 5,500 of them at 0.1 %, and
a phase's latencies usually fill a few hundred. Only percentiles are stored, never the buckets, so results
stored before the change read as they were (their figures were within 1 %).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

DEFAULT_ACCURACY = 0.001
_MIN_VALUE = 1e-3  # values at or below this (ms) share the zero bucket


class Histogram:
    __slots__ = ("_bins", "_gamma_log", "_per_log", "accuracy", "count", "max", "min", "total", "zero")

    def __init__(self, accuracy: float = DEFAULT_ACCURACY) -> None:
        if not 0 < accuracy < 1:
            raise ValueError(f"accuracy must be in (0, 1), got {accuracy}")
        self.accuracy = accuracy
        self._gamma_log = math.log((1 + accuracy) / (1 - accuracy))
        self._per_log = 1.0 / self._gamma_log
        self._bins: dict[int, int] = {}
        self.zero = 0
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        """Records one finite, non-negative value; raises ``ValueError`` (recording nothing) for any other."""
        # On every request's path, several times: plain comparisons, not min()/max()/isfinite() calls.
        if not 0 <= value < math.inf:  # NaN fails every comparison
            raise ValueError(f"histogram values must be finite and >= 0, got {value}")
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        if value <= _MIN_VALUE:
            self.zero += 1
            return
        index = math.ceil(math.log(value) * self._per_log)
        bins = self._bins
        bins[index] = bins.get(index, 0) + 1

    def merge(self, other: Histogram) -> None:
        """Adds every value recorded in ``other`` (which must share this histogram's accuracy)."""
        if other.accuracy != self.accuracy:
            raise ValueError("cannot merge histograms of different accuracy")
        for index, n in other._bins.items():
            self._bins[index] = self._bins.get(index, 0) + n
        self.zero += other.zero
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def quantile(self, q: float) -> float | None:
        """The value at quantile ``q`` (0–1), or None when empty; exact at the extremes."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        if self.count == 0:
            return None
        if q == 0:
            return self.min
        if q == 1:
            return self.max
        rank = q * (self.count - 1)
        seen = self.zero
        if rank < seen:
            return self.min
        for index in sorted(self._bins):
            seen += self._bins[index]
            if rank < seen:
                estimate = 2 * math.exp(index * self._gamma_log) / (1 + math.exp(self._gamma_log))
                return min(max(estimate, self.min), self.max)
        return self.max

    def buckets(self) -> list[tuple[float, int]]:
        """Each occupied bucket's value (as ``quantile`` reads it) and count, smallest first: the distribution
        itself, within ``accuracy``, for statistics that need more than a few percentiles (a bootstrap)."""
        out = [(self.min, self.zero)] if self.zero else []
        ratio = math.exp(self._gamma_log)
        for index in sorted(self._bins):
            estimate = 2 * math.exp(index * self._gamma_log) / (1 + ratio)
            out.append((min(max(estimate, self.min), self.max), self._bins[index]))
        return out

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def summary(self, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99)) -> dict[str, float | int | None]:
        """Count, mean, max and the named percentiles (``p50``, ``p90``, ``p99``), for reports."""
        out: dict[str, float | int | None] = {"count": self.count, "mean": _round(self.mean)}
        for q in quantiles:
            out[f"p{q * 100:g}"] = _round(self.quantile(q))
        out["max"] = _round(self.max if self.count else None)
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form that ``from_dict`` reads back exactly."""
        return {
            "accuracy": self.accuracy,
            "zero": self.zero,
            "count": self.count,
            "total": self.total,
            "min": self.min if self.count else None,
            "max": self.max if self.count else None,
            "bins": {str(k): v for k, v in sorted(self._bins.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Histogram:
        hist = cls(float(data["accuracy"]))
        hist._bins = {int(k): int(v) for k, v in data["bins"].items()}
        hist.zero = int(data["zero"])
        hist.count = int(data["count"])
        hist.total = float(data["total"])
        hist.min = math.inf if data["min"] is None else float(data["min"])
        hist.max = -math.inf if data["max"] is None else float(data["max"])
        return hist


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
