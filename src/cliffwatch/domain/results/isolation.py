"""Who was a victim, and when: the pairs the score's isolation component judges (docs/scoring.md).

When traffic classes share a target, a class is *in stress* in a phase where its planned rate rose above its
baseline rate, and a *victim* there when its own rate did not rise while another class's did. Rates are the
plan's (what each class was asked to send), not the counts a Poisson process happened to draw, so a steady
class is never mistaken for a bursting one by chance. The isolation component then asks how much of each
victim's goodput ratio survived (``scoring``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cliffwatch.domain.outcomes import Slo
from cliffwatch.domain.scenario.arrivals import Mix
from cliffwatch.domain.scenario.scenario import PhaseRole, Scenario

RISE_TOLERANCE = 0.10  # a planned rate this much above the class's baseline rate has risen


@dataclass(frozen=True, kw_only=True)
class ClassPlan:
    """A traffic class as the score needs it: its name, its SLO, and its planned mean rate in each phase."""

    name: str
    slo: Slo
    rates: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class VictimPhase:
    """A phase in which ``victim`` kept its rate while the classes in ``rising`` raised theirs."""

    victim: int  # index into the plans
    phase: int
    rising: tuple[str, ...]


def class_plans(scenario: Scenario) -> tuple[ClassPlan, ...]:
    """Each declared traffic class's plan (none for a scenario without classes)."""
    plans = []
    for traffic_class in scenario.classes:
        rates = tuple(
            phase.arrival.class_rate(traffic_class.name, phase.duration_s) if isinstance(phase.arrival, Mix) else 0.0
            for phase in scenario.phases
        )
        plans.append(ClassPlan(name=traffic_class.name, slo=traffic_class.slo, rates=rates))
    return tuple(plans)


def baseline_rate(plan: ClassPlan, roles: Sequence[PhaseRole], durations: Sequence[float]) -> float | None:
    """The class's planned rate over the baseline phases (duration-weighted); None without baseline phases."""
    pairs = [
        (rate, d) for rate, role, d in zip(plan.rates, roles, durations, strict=True) if role is PhaseRole.BASELINE
    ]
    total = sum(d for _, d in pairs)
    return None if total <= 0 else sum(rate * d for rate, d in pairs) / total


def victim_phases(
    plans: Sequence[ClassPlan], roles: Sequence[PhaseRole], durations: Sequence[float]
) -> list[VictimPhase]:
    """Every (victim, phase) pair outside the baseline: the victim sent in the phase at no more than its
    baseline rate while some other class sent above its own. Empty with fewer than two classes or without a
    baseline to compare with."""
    bases = [baseline_rate(plan, roles, durations) for plan in plans]
    if len(plans) < 2 or any(base is None for base in bases):
        return []
    found: list[VictimPhase] = []
    for phase, role in enumerate(roles):
        if role is PhaseRole.BASELINE:
            continue
        rose = [plan.rates[phase] > (1 + RISE_TOLERANCE) * (base or 0.0) for plan, base in zip(plans, bases,
                                                                                             strict=True)]  # fmt: skip
        for index, plan in enumerate(plans):
            others = tuple(p.name for i, p in enumerate(plans) if i != index and rose[i])
            if others and not rose[index] and plan.rates[phase] > 0:
                found.append(VictimPhase(victim=index, phase=phase, rising=others))
    return found
