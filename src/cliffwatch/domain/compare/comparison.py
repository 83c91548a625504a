"""Two result documents compared: is B worse than A, or is it noise?

``compare`` takes two run documents (or two sweep documents), refuses unlike ones unless asked (with every
reason, ``domain.compare.likeness``), judges each figure (``family``: Holm's correction and a practical
margin) and says out loud what neither test can vouch for: a generator that fell behind, prompts of another
size, a run cut short. The document it returns (``Comparison.to_dict``) is what ``cliffwatch compare --json``
writes and ``GET /api/v1/compare`` answers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cliffwatch.domain.compare.family import ALPHA, Change, Figure, Margins, judge, overall
from cliffwatch.domain.compare.likeness import Likeness, document_kind, likeness
from cliffwatch.domain.compare.run_figures import run_figures
from cliffwatch.domain.compare.sweep_figures import sweep_figures
from cliffwatch.domain.errors import CompareRefused

COMPARISON_FORMAT = 1
METHOD = ("shares: pooled two-proportion test with Wilson intervals; latency percentiles: bootstrap of the "
          "stored distributions; p-values corrected together by Holm's method; a change must also reach the "
          "margin; detectable: the smallest difference found at the corrected level with 80 % power")  # fmt: skip
# Verdicts under which a document's figures describe something else than the target under its workload.
_CAVEATS = {
    "generator_limited": "its generator could not keep its schedule, so its figures describe the client",
    "workload_mismatch": "its prompts were not the sizes asked, so its figures describe another workload",
    "capped": "its attempt cap held back load, so it offered less than the scenario",
    "interrupted": "it was stopped before its end",
    "aborted": "an abort guard stopped it",
    "target_drift": "its target's speed drifted while it was swept, so its capacity is its slowest period's",
}


@dataclass(frozen=True, kw_only=True)
class Side:
    """What one side is: a label the caller chose (a file, a run id, a suite's experiment) and its document."""

    label: str
    document: Mapping[str, Any]

    def describe(self) -> dict[str, Any]:
        scenario = self.document.get("scenario") or {}
        target = self.document.get("target") or {}
        return {"label": self.label, "id": self.document.get("run_id") or self.document.get("sweep_id"),
                "status": self.document.get("status"), "started_at": self.document.get("started_at"),
                "scenario": scenario.get("name"), "scenario_hash": scenario.get("content_hash"),
                "seed": scenario.get("seed"), "target": target.get("url"),
                "score_version": self.document.get("score_version")}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Comparison:
    kind: str  # run or sweep
    a: Side
    b: Side
    like: Likeness
    figures: tuple[Figure, ...]
    margins: Margins
    alpha: float
    notes: tuple[str, ...] = ()
    cost: Mapping[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> Change:
        return overall(self.figures)

    def count(self, change: Change) -> int:
        return sum(1 for f in self.figures if f.change is change)

    def summary(self) -> str:
        """One sentence: the verdict, how many figures moved, and the worst-placed of them."""
        regressed, improved = self.count(Change.REGRESSED), self.count(Change.IMPROVED)
        tested = sum(1 for f in self.figures if f.change is not Change.NOT_TESTED)
        sentence = (
            f"B against A: {self.verdict.value} ({regressed} regressed, {improved} improved of {tested} figures tested"
        )
        worst = next((f for f in self.figures if f.change is Change.REGRESSED), None)
        if worst is not None and worst.a is not None and worst.b is not None:
            sentence += (
                f"; first: {worst.scope} {worst.name} {_shown(worst.a, worst.unit)} → {_shown(worst.b, worst.unit)}"
            )
        return sentence + ")"

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": COMPARISON_FORMAT,
            "kind": "comparison",
            "of": self.kind,
            "a": self.a.describe(),
            "b": self.b.describe(),
            "like": self.like.to_dict(),
            "verdict": self.verdict.value,
            "summary": self.summary(),
            "alpha": self.alpha,
            "margins": self.margins.to_dict(),
            "method": METHOD,
            "notes": list(self.notes),
            "cost": dict(self.cost),
            "figures": [f.to_dict() for f in self.figures],
        }


def compare(a: Side, b: Side, *, rng: random.Random, margins: Margins | None = None, alpha: float = ALPHA,
            allow_unlike: bool = False) -> Comparison:  # fmt: skip
    """B against A; raises ``CompareRefused`` for documents that cannot be compared as asked."""
    margins = margins or Margins()
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    kind_a, kind_b = document_kind(a.document), document_kind(b.document)
    if kind_a != kind_b:
        raise CompareRefused([f"A is a {kind_a} and B a {kind_b}: compare two runs or two sweeps"])
    _refuse_empty(kind_a, a, b)
    like = likeness(a.document, b.document)
    if not like.alike and not allow_unlike:
        raise CompareRefused([*like.differences, "they measured different things; compare them anyway with "
                              "--allow-unlike (allow_unlike=true) if that is what you mean"])  # fmt: skip
    notes = [f"{name} {caveat}" for name, side in (("A:", a), ("B:", b)) for caveat in _caveats(side.document)]
    if not like.alike:
        notes.append("compared although unlike (asked): " + "; ".join(like.differences))
    try:
        if kind_a == "sweep":
            figures = sweep_figures(a.document, b.document, margins=margins, alpha=alpha)
        else:
            figures = list(judge(run_figures(a.document, b.document, rng=rng, margins=margins), alpha=alpha))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a hand-edited or truncated document
        raise CompareRefused([f"a document lacks what compare reads ({type(exc).__name__}: {exc})"]) from exc
    return Comparison(kind=kind_a, a=a, b=b, like=like, figures=tuple(figures), margins=margins, alpha=alpha,
                      notes=tuple(notes), cost=_cost(kind_a, a.document, b.document))  # fmt: skip


def _refuse_empty(kind: str, a: Side, b: Side) -> None:
    reasons = []
    for name, side in (("A", a), ("B", b)):
        measured = side.document.get("variants") if kind == "sweep" else side.document.get("phases")
        if not measured:
            status = side.document.get("status")
            reasons.append(f"{name} ({side.label}) measured nothing (status {status})")
    if reasons:
        raise CompareRefused(reasons)


def _caveats(document: Mapping[str, Any]) -> list[str]:
    names = [v.get("name") for v in document.get("verdicts") or [] if isinstance(v, Mapping)]
    if document.get("workload_mismatch") and "workload_mismatch" not in names:
        names.append("workload_mismatch")  # sweeps say it as a flag, not a verdict
    variants = [v for v in document.get("variants") or [] if isinstance(v, Mapping)]
    if any(isinstance(v.get("result"), Mapping) and v["result"].get("target_drift") for v in variants):
        names.append("target_drift")  # a sweep's: its trials at one rate disagreed beyond their intervals
    return [_CAVEATS[n] for n in names if n in _CAVEATS]


def _cost(kind: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Both sides' cost (``target.cost``): a run's, or each sweep variant's at its usable rate; {} without."""
    if kind == "sweep":
        sides = {name: {str(v.get("variant") or "default"): v.get("cost") for v in doc.get("variants") or []}
                 for name, doc in (("a", a), ("b", b))}  # fmt: skip
        return sides if any(c for side in sides.values() for c in side.values()) else {}
    cost_a, cost_b = a.get("cost"), b.get("cost")
    return {} if cost_a is None and cost_b is None else {"a": cost_a, "b": cost_b}


def _shown(value: float, unit: str) -> str:
    if unit == "share":
        return f"{value * 100:.1f} %"
    return f"{value:.4g} {unit}"
