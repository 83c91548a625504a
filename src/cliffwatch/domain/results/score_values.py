"""The score's values: its components, flags and per-class views, their JSON form, and the version and weights.

The formulas that fill them are in ``scoring`` (and ``isolation`` for who is a victim); docs/scoring.md has
every formula. Any change to a formula or a weight bumps ``SCORE_VERSION``, so stored scores compare like
with like.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

# 2: incomplete answers are a class of their own and raise the hidden-overload flag; 3: traffic classes, the
# isolation component and a score per class; 4: the baseline reference leaves out the spill-over, request by
# request (``spill_over``), where it left out each baseline's last e2e_ms
SCORE_VERSION = "4"

PRESERVATION = "preservation"
SAFE_DEGRADATION = "safe_degradation"
RECOVERY = "recovery"
RETRY_CONTAINMENT = "retry_containment"
ISOLATION = "isolation"
HIDDEN_OVERLOAD = "hidden_overload"

WEIGHTS: Mapping[str, float] = MappingProxyType(
    {PRESERVATION: 0.40, SAFE_DEGRADATION: 0.20, RECOVERY: 0.25, RETRY_CONTAINMENT: 0.15, ISOLATION: 0.25}
)

Evidence = Mapping[str, float | int | str | None]


@dataclass(frozen=True, kw_only=True)
class Component:
    name: str
    value: float | None  # 0–1; None: not applicable, the summary says why
    weight: float  # the nominal weight; applicable weights are renormalised to sum to 1
    summary: str  # one sentence with the numbers
    evidence: Evidence  # the formula's inputs

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "weight": self.weight,
            "summary": self.summary,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Component:
        value = data["value"]
        return cls(
            name=str(data["name"]),
            value=None if value is None else float(value),
            weight=float(data["weight"]),
            summary=str(data["summary"]),
            evidence=dict(data["evidence"]),
        )


@dataclass(frozen=True, kw_only=True)
class Flag:
    name: str
    raised: bool
    summary: str
    evidence: Evidence

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "raised": self.raised, "summary": self.summary, "evidence": dict(self.evidence)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Flag:
        return cls(
            name=str(data["name"]),
            raised=bool(data["raised"]),
            summary=str(data["summary"]),
            evidence=dict(data["evidence"]),
        )


@dataclass(frozen=True, kw_only=True)
class ClassScore:
    """One traffic class's own view: the components on its own requests and SLO, and its isolation."""

    name: str
    value: float | None
    components: tuple[Component, ...]
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "summary": self.summary,
                "components": [c.to_dict() for c in self.components]}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClassScore:
        value = data["value"]
        return cls(name=str(data["name"]), value=None if value is None else float(value), summary=str(data["summary"]),
                   components=tuple(Component.from_dict(c) for c in data["components"]))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Score:
    version: str
    value: float | None  # 0–100, one decimal; None when no component applies
    threshold: float
    passed: bool
    components: tuple[Component, ...]
    flags: tuple[Flag, ...]
    summary: str
    classes: tuple[ClassScore, ...] = ()  # with traffic classes: each one's own view

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (finite numbers, strings, None) that ``from_dict`` reads back."""
        return {
            "version": self.version,
            "value": self.value,
            "threshold": self.threshold,
            "passed": self.passed,
            "summary": self.summary,
            "components": [c.to_dict() for c in self.components],
            "flags": [f.to_dict() for f in self.flags],
            "classes": [c.to_dict() for c in self.classes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Score:
        value = data["value"]
        return cls(
            version=str(data["version"]),
            value=None if value is None else float(value),
            threshold=float(data["threshold"]),
            passed=bool(data["passed"]),
            summary=str(data["summary"]),
            components=tuple(Component.from_dict(c) for c in data["components"]),
            flags=tuple(Flag.from_dict(f) for f in data["flags"]),
            classes=tuple(ClassScore.from_dict(c) for c in data.get("classes") or ()),
        )
