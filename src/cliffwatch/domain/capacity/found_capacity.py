"""What a sweep found for one retry-policy variant (``CapacityResult``): its settled rates, the usable capacity
with its interval, the peaks and the verdict, and its JSON form. ``capacity_result.summarize`` makes one from
the sweep's steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cliffwatch.domain.capacity.arrival_luck import LuckCorrection
from cliffwatch.domain.capacity.capacity_steps import Interval, SettledRate, StepStats
from cliffwatch.domain.capacity.drift import TargetDrift


@dataclass(frozen=True, kw_only=True)
class CapacityResult:
    """What a sweep found, for one retry-policy variant. ``to_dict`` is the JSON form; ``from_dict`` reads it."""

    steps: tuple[StepStats, ...]
    rates: tuple[SettledRate, ...]
    target: float
    unit: str
    usable_rps: float | None
    usable_interval: Interval | None
    usable_on_point_estimate: bool
    first_bad_rps: float | None
    peak_tokens_per_s: float
    peak_tokens_rate: float | None
    peak_completions_per_s: float
    cliff_ratio: float | None  # usable_rps / peak_tokens_rate
    constrained: bool | None  # the decision rule's outcome; None: no crossing seen, so it cannot apply
    verdict: str
    evidence: Mapping[str, Any]
    finished_because: str
    confidence: float = 0.95
    luck: LuckCorrection | None = None  # the arrival-luck correction fitted on the steps (None: an older document)
    # Trials at one rate that disagreed beyond their intervals (``drift``); None when none did, or an older document.
    target_drift: TargetDrift | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "rates", tuple(self.rates))
        object.__setattr__(self, "evidence", MappingProxyType(dict(self.evidence)))

    @property
    def usable(self) -> SettledRate | None:
        return next((r for r in self.rates if r.rate == self.usable_rps), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every step, every settled rate, the figures, the verdict and its evidence."""
        return {
            "target": self.target,
            "confidence": self.confidence,
            "unit": self.unit,
            "usable_rps": self.usable_rps,
            "usable_interval": None if self.usable_interval is None else self.usable_interval.to_dict(),
            "usable_on_point_estimate": self.usable_on_point_estimate,
            "first_bad_rps": self.first_bad_rps,
            "peak_tokens_per_s": self.peak_tokens_per_s,
            "peak_tokens_rate": self.peak_tokens_rate,
            "peak_completions_per_s": self.peak_completions_per_s,
            "cliff_ratio": self.cliff_ratio,
            "constrained": self.constrained,
            "verdict": self.verdict,
            "evidence": dict(self.evidence),
            "finished_because": self.finished_because,
            "luck_correction": None if self.luck is None else self.luck.to_dict(),
            "target_drift": None if self.target_drift is None else self.target_drift.to_dict(),
            "rates": [r.to_dict() for r in self.rates],
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CapacityResult:
        steps = tuple(StepStats.from_dict(s) for s in data["steps"])
        interval = data["usable_interval"]
        return cls(
            steps=steps,
            rates=tuple(SettledRate.from_dict(r, steps=steps) for r in data["rates"]),
            target=float(data["target"]),
            confidence=float(data.get("confidence", 0.95)),
            unit=str(data["unit"]),
            usable_rps=_float(data["usable_rps"]),
            usable_interval=None if interval is None else Interval.from_dict(interval),
            usable_on_point_estimate=bool(data["usable_on_point_estimate"]),
            first_bad_rps=_float(data["first_bad_rps"]),
            peak_tokens_per_s=float(data["peak_tokens_per_s"]),
            peak_tokens_rate=_float(data["peak_tokens_rate"]),
            peak_completions_per_s=float(data["peak_completions_per_s"]),
            cliff_ratio=_float(data["cliff_ratio"]),
            constrained=None if data["constrained"] is None else bool(data["constrained"]),
            verdict=str(data["verdict"]),
            evidence=dict(data["evidence"]),
            finished_because=str(data["finished_because"]),
            luck=None if data.get("luck_correction") is None else LuckCorrection.from_dict(data["luck_correction"]),
            target_drift=None if data.get("target_drift") is None else TargetDrift.from_dict(data["target_drift"]),
        )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
