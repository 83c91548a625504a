"""The run's score: five components, each 0–1 with the numbers it came from, a weighted 0–100 total, and flags.

Components answer one question each: was goodput preserved under stress (NIST CSF 2.0 RC.RP-01), was the
excess refused fast rather than left to queue (NIST SP 800-53 SC-5, OWASP API4), how soon after the stress
did service return to its baseline band, how much extra load did client retries add, and (with traffic
classes) how much of a steady class's goodput survived another class's burst. Each class also gets the
same view on its own requests (``Score.classes``). The hidden-overload
flag names the failure peak tokens/s hides. Every formula, band and edge case is in docs/scoring.md; any
change to one of them or to a weight bumps ``SCORE_VERSION`` so stored scores compare like with like.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NOT_ON_TIME, NS_PER_S, OUTCOME_TEXT, Outcome, Slo
from cliffwatch.domain.results.isolation import ClassPlan, victim_phases
from cliffwatch.domain.results.reference import _Reference, _reference
from cliffwatch.domain.results.run_metrics import PhaseStats, RunMetrics, SecondStats, merge_phases
from cliffwatch.domain.results.score_values import HIDDEN_OVERLOAD as HIDDEN_OVERLOAD
from cliffwatch.domain.results.score_values import ISOLATION as ISOLATION
from cliffwatch.domain.results.score_values import PRESERVATION as PRESERVATION
from cliffwatch.domain.results.score_values import RECOVERY as RECOVERY
from cliffwatch.domain.results.score_values import RETRY_CONTAINMENT as RETRY_CONTAINMENT
from cliffwatch.domain.results.score_values import SAFE_DEGRADATION as SAFE_DEGRADATION
from cliffwatch.domain.results.score_values import SCORE_VERSION as SCORE_VERSION
from cliffwatch.domain.results.score_values import WEIGHTS as WEIGHTS
from cliffwatch.domain.results.score_values import ClassScore as ClassScore
from cliffwatch.domain.results.score_values import Component as Component
from cliffwatch.domain.results.score_values import Evidence as Evidence
from cliffwatch.domain.results.score_values import Flag as Flag
from cliffwatch.domain.results.score_values import Score as Score
from cliffwatch.domain.results.server_evidence import server_clause
from cliffwatch.domain.scenario.guards import ScoreSpec
from cliffwatch.domain.scenario.scenario import PhaseRole
from cliffwatch.domain.server.server_view import ServerView

RECOVERY_WINDOW_S = 5  # seconds with traffic pooled per recovery window
RATIO_TOLERANCE = 0.05  # a window this far (absolute) below the baseline on-time ratio counts as recovered
P99_FACTOR = 1.5  # a recovered window's p99 e2e may be this many times the baseline p99 …
P99_FLOOR_MS = 100.0  # … or this much above it, whichever is larger (small p99s are noisy)
PEAK_WINDOW_S = 5  # the run's peak tokens/s is the highest mean over this many consecutive seconds
OVERLOAD_TOKENS_SHARE = 0.9  # stress output at or above this share of the peak …
OVERLOAD_GOODPUT_SHARE = 0.8  # … while the stress on-time ratio is below this share of the baseline's
OVERLOAD_INCOMPLETE_SHARE = 0.05  # or this share of the stress requests came back as a 2xx without an answer


def score_run(
    metrics: RunMetrics,
    *,
    slo: Slo,
    spec: ScoreSpec,
    server: ServerView | None = None,
    plans: Sequence[ClassPlan] = (),
) -> Score:
    """The versioned score of a run's metrics against its SLO and pass mark; never raises on odd metrics.
    ``server``: the target's own series, quoted by the hidden-overload flag (they do not change the score).
    ``plans``: the traffic classes (``isolation.class_plans``), each scored on its own too; the isolation
    component judges how much of a victim class's goodput ratio survived another's stress."""
    victims = _victims(metrics, plans)
    components = (*_components(metrics, slo, spec), _isolation(victims, None))
    stress = _stress(metrics)
    flags = (_hidden_overload(metrics, stress, _reference(metrics), server),)
    value, parts = _weighted(components)
    if value is not None:
        verdict = "pass" if value >= spec.threshold else "fail"
        summary = " ".join([f"Score {value:.1f}/100, {verdict} at {spec.threshold:g}: {parts}."]
                           + [f.summary for f in flags if f.raised])  # fmt: skip
    else:
        reasons = dict.fromkeys(c.summary.removeprefix("Not applicable: ").rstrip(".") for c in components)
        summary = f"No score: no component applies ({'; '.join(reasons)})."
    by_name = dict(metrics.classes)
    classes = tuple(
        _class_score(plan, by_name[plan.name], spec, _isolation(victims, plan.name))
        for plan in plans
        if plan.name in by_name
    )
    return Score(
        version=SCORE_VERSION,
        value=value,
        threshold=spec.threshold,
        passed=value is not None and value >= spec.threshold,
        components=components,
        flags=flags,
        summary=summary,
        classes=classes,
    )


def _stress(metrics: RunMetrics) -> PhaseStats | None:
    stress = merge_phases(metrics.by_role(PhaseRole.STRESS))
    return None if stress is None or stress.offered == 0 else stress


def _components(metrics: RunMetrics, slo: Slo, spec: ScoreSpec) -> tuple[Component, ...]:
    """The four components every run (and every class) has: preservation, safe degradation, recovery, retries."""
    stress = _stress(metrics)
    reference = _reference(metrics)
    return (
        _preservation(stress, reference),
        _safe_degradation(stress, fast_fail_ms=spec.fast_fail_fraction * slo.e2e_ms),
        _recovery(metrics, reference, slo),
        _retry_containment(stress),
    )


def _weighted(components: Sequence[Component]) -> tuple[float | None, str]:
    """The 0–100 value of the applicable components (weights renormalised), and the parts for a summary."""
    applicable = [c for c in components if c.value is not None]
    parts = ", ".join(f"{c.name.replace('_', ' ')} {'n/a' if c.value is None else f'{c.value:.2f}'}"
                      for c in components)  # fmt: skip
    if not applicable:
        return None, parts
    weighted = sum(c.weight * (c.value or 0.0) for c in applicable) / sum(c.weight for c in applicable)
    return round(100 * weighted, 1), parts  # rounded first, so the number shown is the number judged


def _class_score(plan: ClassPlan, metrics: RunMetrics, spec: ScoreSpec, isolation: Component) -> ClassScore:
    components = (*_components(metrics, plan.slo, spec), isolation)
    value, parts = _weighted(components)
    summary = f"{plan.name}: {'no score' if value is None else f'{value:.1f}/100'} ({parts})."
    return ClassScore(name=plan.name, value=value, components=components, summary=summary)


@dataclass(frozen=True, kw_only=True)
class _Victim:
    """How a victim class fared in one phase: its on-time share there against its own baseline's."""

    name: str
    phase: str
    rising: tuple[str, ...]
    offered: int
    on_time: int
    reference: float
    survived: float  # 0–1: the share of its goodput ratio that survived


def _victims(metrics: RunMetrics, plans: Sequence[ClassPlan]) -> list[_Victim]:
    windows = [p.window for p in metrics.phases]
    pairs = victim_phases(plans, [w.role for w in windows], [w.duration_s for w in windows])
    by_name = dict(metrics.classes)
    found = []
    for pair in pairs:
        plan = plans[pair.victim]
        own = by_name.get(plan.name)
        if own is None or pair.phase >= len(own.phases) or own.phases[pair.phase].offered == 0:
            continue
        phase = own.phases[pair.phase]
        reference = _reference(own).ratio
        ratio = phase.on_time / phase.offered
        survived = 0.0 if reference == 0 else min(1.0, ratio / reference)
        found.append(_Victim(name=plan.name, phase=phase.window.name, rising=pair.rising, offered=phase.offered,
                             on_time=phase.on_time, reference=reference, survived=survived))  # fmt: skip
    return found


def _isolation(victims: Sequence[_Victim], only: str | None) -> Component:
    """How much of the victims' goodput ratio survived (offered-weighted over every victim phase); ``only``:
    one class's own phases as a victim."""
    mine = [v for v in victims if only is None or v.name == only]
    if not mine:
        why = ("no class kept its rate while another's rose" if only is None
               else f"{only} was never a victim of another class's stress")  # fmt: skip
        return _component(ISOLATION, None, f"Not applicable: {why}.", {})
    offered = sum(v.offered for v in mine)
    value = sum(v.survived * v.offered for v in mine) / offered
    evidence: dict[str, float | int | str | None] = {"victim_offered": offered}
    sentences = []
    for v in mine:
        key = f"{v.name}@{v.phase}"
        evidence.update({f"{key}.survived": v.survived, f"{key}.on_time": v.on_time, f"{key}.offered": v.offered,
                         f"{key}.baseline_ratio": v.reference})  # fmt: skip
        sentences.append(
            f"{v.name} kept {_pct(v.survived)} of its goodput ratio in {v.phase} while {' and '.join(v.rising)} "
            f"rose ({v.on_time:,} of {v.offered:,} on time against {_pct(v.reference)} at its baseline)"
        )
    return _component(ISOLATION, value, "; ".join(sentences) + ".", evidence)


def _component(name: str, value: float | None, summary: str, evidence: Evidence) -> Component:
    return Component(name=name, value=value, weight=WEIGHTS[name], summary=summary, evidence=evidence)


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def _preservation(stress: PhaseStats | None, ref: _Reference) -> Component:
    evidence: dict[str, float | int | str | None] = ref.evidence()
    if stress is None:
        return _component(PRESERVATION, None, "Not applicable: no stress phase offered any request.", evidence)
    ratio = stress.on_time / stress.offered
    evidence.update(stress_offered=stress.offered, stress_on_time=stress.on_time, stress_ratio=ratio)
    left_out = "" if ref.left_out() is None else f" {ref.left_out()}."
    if ref.ratio == 0:
        summary = (
            f"0 of {ref.offered:,} baseline requests were on time: the target failed its SLO before any stress, "
            f"so no goodput was preserved.{left_out}"
        )
        return _component(PRESERVATION, 0.0, summary, evidence)
    value = min(1.0, ratio / ref.ratio)
    summary = (
        f"{stress.on_time:,} of {stress.offered:,} stress requests were on time ({_pct(ratio)}) against "
        f"{_pct(ref.ratio)} for {ref.name}: {_pct(value)} of the goodput ratio preserved.{left_out}"
    )
    return _component(PRESERVATION, value, summary, evidence)


def _safe_degradation(stress: PhaseStats | None, *, fast_fail_ms: float) -> Component:
    if stress is None:
        return _component(SAFE_DEGRADATION, None, "Not applicable: no stress phase offered any request.", {})
    failed = stress.offered - stress.on_time
    slow_shed = stress.outcomes[Outcome.SHED] - stress.fast_shed
    # Every other way to miss goodput is a failure, not a refusal the client can act on (a redirect too).
    others = {outcome: stress.outcomes[outcome] for outcome in NOT_ON_TIME if outcome is not Outcome.SHED}
    evidence: dict[str, float | int | str | None] = {
        "offered": stress.offered,
        "on_time": stress.on_time,
        "not_on_time": failed,
        "fast_shed": stress.fast_shed,
        "slow_shed": slow_shed,
        **{outcome.value: count for outcome, count in others.items()},
        "fast_fail_ms": fast_fail_ms,
    }
    if failed == 0:
        summary = f"All {stress.offered:,} stress requests were on time: nothing needed shedding."
        return _component(SAFE_DEGRADATION, 1.0, summary, evidence)
    value = stress.fast_shed / failed
    rest = [f"{slow_shed:,} were refused slowly"]
    rest += [OUTCOME_TEXT[outcome].counted.format(count=f"{count:,}") for outcome, count in others.items()]
    summary = (
        f"Of {failed:,} stress requests not on time, {stress.fast_shed:,} ({_pct(value)}) were refused within "
        f"{fast_fail_ms:g} ms; {', '.join(rest[:-1])} and {rest[-1]}."
    )
    return _component(SAFE_DEGRADATION, value, summary, evidence)


def _recovery_span(metrics: RunMetrics) -> tuple[int, int] | None:
    """From the end of the last stress phase to the end of the recovery phases right after it, in ns."""
    phases = sorted(metrics.phases, key=lambda p: p.window.start_ns)
    last_stress = max((i for i, p in enumerate(phases) if p.window.role is PhaseRole.STRESS), default=None)
    if last_stress is None:
        return None
    end_ns = None
    for following in phases[last_stress + 1 :]:
        if following.window.role is not PhaseRole.RECOVERY:
            break
        end_ns = following.window.end_ns
    return None if end_ns is None else (phases[last_stress].window.end_ns, end_ns)


def _recovery(metrics: RunMetrics, ref: _Reference, slo: Slo) -> Component:
    span = _recovery_span(metrics)
    if span is None:
        return _component(RECOVERY, None, "Not applicable: no recovery phase follows the last stress phase.", {})
    start_ns, end_ns = span
    duration_s = (end_ns - start_ns) / NS_PER_S
    ratio_floor = ref.ratio - RATIO_TOLERANCE
    p99_limit = slo.e2e_ms if ref.p99_ms is None else max(P99_FACTOR * ref.p99_ms, ref.p99_ms + P99_FLOOR_MS)
    evidence: dict[str, float | int | str | None] = ref.evidence()
    evidence.update(recovery_duration_s=duration_s, ratio_floor=ratio_floor, p99_limit_ms=p99_limit)
    if ref.ratio == 0:
        summary = "0 baseline requests were on time: there is no working state to recover to."
        return _component(RECOVERY, 0.0, summary, evidence)
    # Whole seconds only: the second the stress ended in also holds requests scheduled under stress.
    by_t = {s.t: s for s in metrics.seconds}
    first, stop = -(-start_ns // NS_PER_S), end_ns // NS_PER_S
    busy = [by_t[t] for t in range(first, stop) if t in by_t and by_t[t].offered > 0]
    if not busy:
        summary = "Not applicable: no request was scheduled in a whole second of the recovery phase."
        return _component(RECOVERY, None, summary, evidence)
    size = min(RECOVERY_WINDOW_S, len(busy))
    evidence["window_seconds"] = size
    found, ratio = None, 0.0
    for i in range(len(busy) - size + 1):
        window = busy[i : i + size]
        ratio, p99 = _window_stats(window)
        evidence.update(window_start_s=window[0].t, window_ratio=ratio, window_p99_ms=p99)
        if ratio >= ratio_floor and p99 is not None and p99 <= p99_limit:
            found = max(0.0, (window[0].t * NS_PER_S - start_ns) / NS_PER_S)
            break
    band = f"on time ≥ {_pct(max(0.0, ratio_floor))}, p99 e2e ≤ {p99_limit:,.0f} ms"
    evidence["recovery_s"] = found
    if found is None:
        summary = (
            f"Not recovered: in {duration_s:g} s of recovery, no {size} consecutive seconds with traffic were back "
            f"in the band of {ref.name} ({band}); the last {size} had {_pct(ratio)} on time."
        )
        return _component(RECOVERY, 0.0, summary, evidence)
    value = max(0.0, 1 - found / duration_s)
    summary = (
        f"Recovered {found:g} s after the stress ended, of {duration_s:g} s of recovery: from then {size} "
        f"seconds of traffic stayed in the band of {ref.name} ({band})."
    )
    return _component(RECOVERY, value, summary, evidence)


def _window_stats(window: Sequence[SecondStats]) -> tuple[float, float | None]:
    """The pooled on-time ratio and p99 e2e of some seconds; the p99 is None without a completion."""
    e2e = Histogram()
    for second in window:
        e2e.merge(second.e2e)
    offered = sum(s.offered for s in window)
    return sum(s.outcomes[Outcome.ON_TIME] for s in window) / offered, e2e.quantile(0.99)


def _retry_containment(stress: PhaseStats | None) -> Component:
    if stress is None or stress.sent == 0:
        return _component(RETRY_CONTAINMENT, None, "Not applicable: no stress request was sent.", {})
    extra = stress.retries / stress.sent
    evidence = {"attempts": stress.attempts, "sent": stress.sent, "amplification": 1 + extra, "extra_load": extra}
    value = min(1.0, max(0.0, 1 - extra))
    summary = (
        f"{stress.attempts:,} attempts for {stress.sent:,} stress requests sent: amplification {1 + extra:.2f}×, "
        f"retries added {_pct(extra)} to the load."
    )
    return _component(RETRY_CONTAINMENT, value, summary, evidence)


def _peak_tokens_per_s(seconds: Sequence[SecondStats]) -> float:
    """The highest mean of per-second output tokens over ``PEAK_WINDOW_S`` consecutive seconds."""
    if not seconds:
        return 0.0
    tokens = {s.t: s.output_tokens for s in seconds}
    series = [tokens.get(t, 0.0) for t in range(min(tokens), max(tokens) + 1)]
    size = min(PEAK_WINDOW_S, len(series))
    return max(math.fsum(series[i : i + size]) / size for i in range(len(series) - size + 1))


def _hidden_overload(
    metrics: RunMetrics, stress: PhaseStats | None, ref: _Reference, server: ServerView | None
) -> Flag:
    peak = _peak_tokens_per_s(metrics.seconds)
    evidence: dict[str, float | int | str | None] = ref.evidence()
    evidence["peak_tokens_per_s"] = peak
    clause, server_evidence = server_clause(server, [p.window for p in metrics.phases])
    evidence.update(server_evidence)

    def flag(raised: bool, summary: str) -> Flag:
        if clause is not None:  # the server's own view, quoted whether or not the flag is raised
            summary = f"{summary.removesuffix('.')}; meanwhile {clause}."
        return Flag(name=HIDDEN_OVERLOAD, raised=raised, summary=summary, evidence=evidence)

    if stress is None:
        return flag(False, "No stress phase offered any request, so nothing could be hidden.")
    tokens_per_s = stress.tokens_per_s  # tokens received during the stress windows, per second
    ratio = stress.on_time / stress.offered
    incomplete = stress.outcomes[Outcome.INCOMPLETE]
    evidence.update(stress_tokens_per_s=tokens_per_s, stress_ratio=ratio, stress_incomplete=incomplete,
                    incomplete_share=incomplete / stress.offered)  # fmt: skip
    if incomplete / stress.offered >= OVERLOAD_INCOMPLETE_SHARE:
        # A 200 that carries no answer is invisible to status codes and error rates: the overload it hides
        # is there whatever tokens/s did (it usually fell, as the hollow answers carry none).
        hollow = (
            f"{incomplete:,} of {stress.offered:,} stress requests ({_pct(incomplete / stress.offered)}) came back "
            "as a 2xx without a whole answer (incomplete: a stream ended early, an aborted generation)"
        )
        return flag(True, f"Hidden overload: {hollow}; status codes and error rates do not show them.")
    if peak <= 0:
        return flag(False, "No output tokens were received, so token throughput cannot hide an overload.")
    if ref.ratio == 0:
        return flag(False, "No baseline request was on time, so there is no goodput for tokens/s to hide a loss of.")
    tokens_share, goodput_share = tokens_per_s / peak, ratio / ref.ratio
    evidence.update(tokens_share=tokens_share, goodput_share=goodput_share)
    raised = tokens_share >= OVERLOAD_TOKENS_SHARE and goodput_share < OVERLOAD_GOODPUT_SHARE
    numbers = (
        f"output {'held' if raised else 'was'} at {_pct(tokens_share)} of peak tokens/s "
        f"({tokens_per_s:,.0f} of {peak:,.0f}) while on-time completions "
        f"{'fell to' if goodput_share < 1 else 'stayed at'} {_pct(goodput_share)} of {ref.name} "
        f"({_pct(ratio)} vs {_pct(ref.ratio)} of requests on time)"
    )
    if raised:
        return flag(True, f"Hidden overload: {numbers}; peak tokens/s hides the cliff.")
    return flag(False, f"No hidden overload: {numbers}.")
