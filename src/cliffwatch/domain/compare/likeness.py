"""Whether two result documents measured the same thing: the same workload and the same score version.

The target is what a comparison is for (two batch sizes, two builds, two gateways), and a seed draws another
sample of the same arrivals, so neither makes two runs unlike, although both change the scenario's content
hash. What does: another phase plan (durations, arrival processes, retries, faults), other traffic classes,
sessions or shared prefix, another SLO (the same latency is on time under one and late under the other), or
another score version (another formula). A sweep's plan is its spec (rates, step length, trials, variants).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What a run's ``scenario`` section holds of its workload; absent keys (older documents) read as None.
_RUN_WORKLOAD = ("phases", "slo", "classes", "sessions", "prefix")
_SWEEP_WORKLOAD = ("slo",)


@dataclass(frozen=True, kw_only=True)
class Likeness:
    differences: tuple[str, ...]  # every way the two differ in what they measured, empty when alike
    same_scenario_hash: bool

    @property
    def alike(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {"alike": self.alike, "differences": list(self.differences),
                "same_scenario_hash": self.same_scenario_hash}  # fmt: skip


def document_kind(document: Mapping[str, Any]) -> str:
    """``run`` or ``sweep``: what a result document is (a run's has no ``kind``)."""
    return "sweep" if document.get("kind") == "sweep" else "run"


def likeness(a: Mapping[str, Any], b: Mapping[str, Any]) -> Likeness:
    """How B's workload and score version differ from A's (both documents of one kind)."""
    scenario_a, scenario_b = _section(a, "scenario"), _section(b, "scenario")
    differences: list[str] = []
    sweep = document_kind(a) == "sweep"
    for key in _SWEEP_WORKLOAD if sweep else _RUN_WORKLOAD:
        differences += _differ(f"scenario.{key}", scenario_a.get(key), scenario_b.get(key))
    if sweep:
        spec_a, spec_b = _section(a, "spec"), _section(b, "spec")
        for key in sorted(set(spec_a) | set(spec_b)):
            differences += _differ(f"spec.{key}", spec_a.get(key), spec_b.get(key))
    else:
        differences += _differ("score_version", a.get("score_version"), b.get("score_version"))
    same_hash = scenario_a.get("content_hash") == scenario_b.get("content_hash")
    return Likeness(differences=tuple(differences), same_scenario_hash=same_hash)


def _section(document: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = document.get(key)
    return value if isinstance(value, Mapping) else {}


def _differ(path: str, a: Any, b: Any) -> list[str]:
    """Where ``a`` and ``b`` differ, named down to the first differing item of a list or mapping."""
    if a == b:
        return []
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} against {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differ(f"{path}[{i}]", x, y)]
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return [d for key in sorted(set(a) | set(b)) for d in _differ(f"{path}.{key}", a.get(key), b.get(key))]
    return [f"{path}: {_shown(a)} against {_shown(b)}"]


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."
