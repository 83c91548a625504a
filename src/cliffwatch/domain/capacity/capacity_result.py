"""A finished sweep's answer: usable capacity with its interval, the peaks, and the seed's decision rule.

The rule: *if higher load pushes up tail latency or timeout rate before token throughput collapses, treat
the model as capacity-constrained and size around the completion point, not the peak benchmark.* Here the
crossing is the lowest valid rate where the worst trial's p99 e2e exceeded the e2e SLO, its p99 TTFT
exceeded the TTFT SLO (when the scenario has one), or the timeout share exceeded the failure budget
(1 − target). When the first BAD rate lies below every such crossing, it failed some other way (shedding,
errors, a late share too small to move the p99): the crossing is then that rate, and the sentence names
the failure that made it bad. Tokens/s at the crossing at 90 % of the sweep's peak or more means
capacity-constrained. The sentences are templates in this module, so tests pin their wording.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cliffwatch.domain.capacity.arrival_luck import LuckCorrection
from cliffwatch.domain.capacity.capacity_search import round_sig
from cliffwatch.domain.capacity.capacity_steps import (
    LATE_BOUNDS,
    PooledRate,
    SettledRate,
    StepStats,
    StepVerdict,
    fit_luck,
    pool_rates,
    settle,
)
from cliffwatch.domain.capacity.drift import DriftReading, TargetDrift, find_drift, slowest_periods
from cliffwatch.domain.capacity.found_capacity import CapacityResult
from cliffwatch.domain.capacity.speed_drift import LatencyReading
from cliffwatch.domain.outcomes import NOT_ON_TIME, OUTCOME_TEXT

CONSTRAINED_SHARE = 0.9  # throughput still at this share of its peak where latency crossed: capacity-constrained

CONSTRAINED = "{signal} at {crossing}{detail} while {metric} was still {share} % of peak: {sizing}{peak_clause}"
THROUGHPUT_BOUND = (
    "{metric} had already fallen to {share} % of peak when {signal} at {crossing}{detail}: tokens and "
    "completions fell together; {sizing}"
)
NO_CLIFF = (
    "no cliff up to {highest}: p99 e2e stayed within the {slo} ms SLO{ttft_held} and timeouts within {budget} %; "
    "{sizing}"
)
TTFT_HELD = ", p99 TTFT within the {slo} ms TTFT SLO"
SIZING = "size for {usable} (attainment {attainment} %{corrected}, {confidence} % CI {low}–{high} %{estimate})"
NO_SIZING = "no rate met the {target} % attainment target"
ON_ESTIMATE = ", on the point estimate"
E2E_SIGNAL = "p99 e2e crossed the {slo} ms SLO"
TTFT_SIGNAL = "p99 TTFT crossed the {slo} ms TTFT SLO"
TIMEOUT_SIGNAL = "timeouts reached {share} % (budget {budget} %)"
# The first BAD rate showed none of the signals above: what made it bad, largest share first.
ATTAINMENT_SIGNAL = "attainment fell to {attainment} %{corrected}"
CORRECTED = " corrected for the luck of its Poisson draws"
FAILURES = " ({failures})"
LATE_ON = "{share} % late on the {bound} SLO"  # every late request broke this bound
LATE_MOSTLY = "{share} % late, mostly on the {bound} SLO"  # most of them did
FAILURE = {outcome.value: OUTCOME_TEXT[outcome].shared for outcome in NOT_ON_TIME}  # "{share} % timed out"
BOUND_NAMES = {"ttft": "TTFT", "ttfa": "TTFA", "tpot": "TPOT", "e2e": "e2e"}
NOTHING_VALID = "no valid step: the generator could not keep its schedule at any rate measured"
# A rate whose queue kept growing through an extended step (domain.capacity.growth): its SLO held only because it ended.
GROWTH_SIGNAL = "the queue kept growing through a {window} s step ({trend})"
SERVER_QUEUE = " (the server's waiting queue went from {first} to {peak})"  # target.metrics, at the crossing
SERVER_QUEUE_HELD = " (the server's waiting queue held at {peak} at most)"
# Trials at one rate disagreed beyond their intervals, or the recheck's median latency shifted (domain.capacity.drift):
# said first, the rest of the verdict follows with each disagreeing rate judged on its slower trial. A shift alone
# judges no rate: which steps ran while the target was faster, the sweep cannot tell.
DRIFT = "the target's speed drifted during the sweep ({readings}): its usable capacity is its slowest period's{how}; "
DRIFT_JUDGED = ", each of these rates judged on its slower trial"
DRIFT_FASTER = "; the rates measured while it was faster may overstate it"
DRIFT_READINGS = "{rate}: {first} % on time {first_when}, {second} % {second_when}"
DRIFT_MEDIANS = "{rate}: median {signal} {first} ms {first_when}, {second} ms {second_when} ({change} %)"
DRIFT_RECHECK = " in the end-of-sweep recheck"


def num(value: float) -> str:
    """A number with 3 significant digits and no exponent: 13.2, 0.0781, 21, 1230."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    rounded = round_sig(value)
    decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
    text = f"{rounded:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def pct(share: float, *, against: float | None = None) -> str:
    """A share as a percentage with one decimal, or two where one would round a shortfall up to 100 (or, given
    ``against``, a share below it up to it: "98.96", not "99.0", for a rate that missed a 99 % target)."""
    text = f"{share * 100:.1f}"
    if share < 1 and (text == "100.0" or (against is not None and share < against and text == f"{against * 100:.1f}")):
        return f"{math.floor(round(share * 10_000, 6)) / 100:.2f}"  # cut, not rounded: a shortfall stays one
    return text


def settle_all(
    steps: Sequence[StepStats],
    *,
    target: float,
    confidence: float = 0.95,
    max_trials: int = 3,
    luck: LuckCorrection | None = None,
) -> tuple[SettledRate, ...]:
    """Every rate in ``steps`` settled for good, lowest first: a rate still straddling the target when the
    sweep ended is settled on its point estimate. ``luck``: the sweep's arrival-luck correction (None: fitted
    on ``steps``)."""
    luck = fit_luck(steps) if luck is None else luck
    found = (
        settle(p, target=target, max_trials=max_trials, confidence=confidence, final=True)
        for p in pool_rates(steps, target=target, confidence=confidence, luck=luck)
    )
    return tuple(s for s in found if s is not None)


def summarize(
    steps: Sequence[StepStats],
    *,
    target: float,
    e2e_slo_ms: float,
    finished_because: str,
    ttft_slo_ms: float | None = None,
    confidence: float = 0.95,
    max_trials: int = 3,
    unit: str = "req/s",
) -> CapacityResult:
    """The result of a sweep from its steps (in any order): rates settled, usable capacity, peaks, verdict.

    ``ttft_slo_ms`` is the scenario's TTFT bound, if it has one: p99 TTFT above it is a crossing signal too.

    Usable capacity is the highest GOOD rate below the lowest BAD or INVALID one. Peaks and the crossing
    leave out INVALID rates, whose numbers describe the client rather than the target.
    """
    luck = fit_luck(steps)
    # a closed loop's rates are clients (``unit_of``): only one is a light load for the latency test
    drift = find_drift(steps, e2e_slo_ms=e2e_slo_ms, ttft_slo_ms=ttft_slo_ms, luck=luck, closed_loop=unit == "clients")
    rates = slowest_periods(settle_all(steps, target=target, confidence=confidence, max_trials=max_trials, luck=luck),
                            drift, target=target, confidence=confidence, luck=luck)  # fmt: skip
    failing = [r.rate for r in rates if r.verdict is not StepVerdict.GOOD]
    ceiling = min(failing, default=math.inf)
    usable = max((r for r in rates if r.verdict is StepVerdict.GOOD and r.rate < ceiling), default=None, key=_rate)
    first_bad_rate = min((r for r in rates if r.verdict is StepVerdict.BAD), default=None, key=_rate)
    first_bad = None if first_bad_rate is None else first_bad_rate.rate
    valid = [r.pooled for r in rates if r.verdict is not StepVerdict.INVALID]
    peak_tokens = max(valid, key=lambda p: p.tokens_per_s, default=None)
    peak_completions = max((p.completions_per_s for p in valid), default=0.0)
    peak_tokens_rate = peak_tokens.rate if peak_tokens is not None and peak_tokens.tokens_per_s > 0 else None
    usable_rps = None if usable is None else usable.rate
    verdict, constrained, evidence = _decide(
        valid,
        usable,
        first_bad_rate,
        target=target,
        slo=_Slo(e2e_ms=e2e_slo_ms, ttft_ms=ttft_slo_ms),
        confidence=confidence,
        unit=unit,
    )
    return CapacityResult(
        steps=tuple(steps),
        rates=rates,
        target=target,
        confidence=confidence,
        unit=unit,
        usable_rps=usable_rps,
        usable_interval=None if usable is None else usable.judged.interval,
        usable_on_point_estimate=usable is not None and usable.on_point_estimate,
        first_bad_rps=first_bad,
        peak_tokens_per_s=0.0 if peak_tokens is None else peak_tokens.tokens_per_s,
        peak_tokens_rate=peak_tokens_rate,
        peak_completions_per_s=peak_completions,
        cliff_ratio=None if usable_rps is None or peak_tokens_rate is None else usable_rps / peak_tokens_rate,
        constrained=constrained,
        verdict=verdict if drift is None else drift_sentence(drift, unit) + verdict,
        evidence=evidence,
        finished_because=finished_because,
        luck=luck,
        target_drift=drift,
    )


def drift_sentence(drift: TargetDrift, unit: str) -> str:
    """The verdict's opening when the target drifted: each disagreeing rate's two readings, then each shifted median
    at a rate whose trials did not disagree already (its e2e before its TTFT, one a rate), when they were taken."""
    readings, said = [], {pair.rate for pair in drift.disagreements}
    for pair in drift.disagreements:
        first, second = _when(pair.earlier), _when(pair.later)
        readings.append(DRIFT_READINGS.format(rate=f"{num(pair.rate)} {unit}", first=pct(pair.earlier.on_time_share),
                                              first_when=first, second=pct(pair.later.on_time_share),
                                              second_when=second))  # fmt: skip
    shifted = False
    for shift in drift.latency:
        if shift.rate in said:
            continue
        said.add(shift.rate)
        shifted = True
        readings.append(DRIFT_MEDIANS.format(
            rate=f"{num(shift.rate)} {unit}", signal=BOUND_NAMES[shift.signal], first=num(shift.earlier.median_ms),
            first_when=_when(shift.earlier), second=num(shift.later.median_ms), second_when=_when(shift.later),
            change=f"{shift.change * 100:+.0f}",
        ))  # fmt: skip
    how = (DRIFT_JUDGED if drift.disagreements else "") + (DRIFT_FASTER if shifted else "")
    return DRIFT.format(readings="; ".join(readings), how=how)


def _when(reading: DriftReading | LatencyReading) -> str:
    when = f"at {reading.started_s:.0f} s" if reading.started_s is not None else f"in step {reading.step_index + 1}"
    return when + (DRIFT_RECHECK if reading.recheck else "")


def _corrected(pooled: PooledRate) -> str:
    return "" if pooled.corrected_on_time is None else CORRECTED


def _rate(settled: SettledRate) -> float:
    return settled.rate


@dataclass(frozen=True)
class _Slo:
    e2e_ms: float
    ttft_ms: float | None


def _crossed(pooled: PooledRate, *, slo: _Slo, budget: float) -> str | None:
    """Which signal crossed at this rate: "p99_e2e" (checked first), "p99_ttft", "timeouts", or None."""
    if pooled.p99_e2e_ms is not None and pooled.p99_e2e_ms > slo.e2e_ms:
        return "p99_e2e"
    if slo.ttft_ms is not None and pooled.p99_ttft_ms is not None and pooled.p99_ttft_ms > slo.ttft_ms:
        return "p99_ttft"
    if pooled.timeout_share is not None and pooled.timeout_share > budget:
        return "timeouts"
    return None


def server_queue(pooled: PooledRate) -> tuple[float, float] | None:
    """The server's waiting queue at a rate, every trial pooled: its lowest first reading and its highest one;
    None when no trial scraped it."""
    readings = [s.server["waiting"] for s in pooled.trials if "waiting" in s.server]
    firsts = [float(first) for r in readings if isinstance(first := r.get("first"), int | float)]
    peaks = [float(peak) for r in readings if isinstance(peak := r.get("max"), int | float)]
    if not firsts or not peaks:
        return None
    return min(firsts), max(peaks)


def _count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == round(value) else f"{value:.1f}"


def failure_shares(pooled: PooledRate) -> dict[str, float]:
    """Each failure class's share of the requests offered at the rate (every trial pooled), largest first;
    classes that did not happen are left out."""
    if pooled.offered == 0:
        return {}
    counts = {name: sum(getattr(s, name) for s in pooled.trials) for name in FAILURE}
    shares = {name: count / pooled.offered for name, count in counts.items() if count > 0}
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


def late_bounds(pooled: PooledRate) -> dict[str, int]:
    """Late requests at the rate by the SLO bound they broke, every trial pooled (empty when unknown)."""
    found: dict[str, int] = {}
    for step in pooled.trials:
        for bound, count in step.late_by.items():
            found[bound] = found.get(bound, 0) + count
    return {bound: count for bound, count in found.items() if count > 0}


def describe_failures(pooled: PooledRate) -> str:
    """What made a rate fail, largest share first: "31.2 % late on the TTFT SLO, 2.0 % shed"."""
    parts = []
    for name, share in failure_shares(pooled).items():
        text = pct(share)
        bounds = late_bounds(pooled) if name == "late" else {}
        if bounds:
            bound, count = max(bounds.items(), key=lambda item: (item[1], -LATE_BOUNDS.index(item[0])))
            late = sum(s.late for s in pooled.trials)
            template = LATE_ON if count >= late else LATE_MOSTLY
            parts.append(template.format(share=text, bound=BOUND_NAMES[bound]))
        else:
            parts.append(FAILURE[name].format(share=text))
    return ", ".join(parts)


def _decide(
    valid: Sequence[PooledRate],
    usable: SettledRate | None,
    first_bad_settled: SettledRate | None,
    *,
    target: float,
    slo: _Slo,
    confidence: float,
    unit: str,
) -> tuple[str, bool | None, dict[str, Any]]:
    """The decision rule applied: the verdict sentence, whether capacity-constrained, and the evidence."""
    budget = 1 - target
    evidence: dict[str, Any] = {"e2e_slo_ms": slo.e2e_ms, "ttft_slo_ms": slo.ttft_ms, "timeout_budget": budget}
    if not valid:
        return NOTHING_VALID, None, evidence
    # Tokens/s is the throughput the rule names; a plain-HTTP target has none, so completions/s stands in.
    by_tokens = max(p.tokens_per_s for p in valid) > 0
    metric_key, metric = ("tokens_per_s", "tokens/s") if by_tokens else ("completions_per_s", "completions/s")
    peak = max(valid, key=lambda p: getattr(p, metric_key))
    peak_value = float(getattr(peak, metric_key))
    evidence.update(throughput_metric=metric_key, peak=peak_value, peak_rate=peak.rate)
    if usable is None:
        sizing = NO_SIZING.format(target=num(target * 100))
    else:
        interval = usable.judged.interval
        sizing = SIZING.format(
            usable=f"{num(usable.rate)} {unit}",
            attainment=pct(usable.judged.judged_attainment or 0.0),
            corrected=_corrected(usable.judged),
            confidence=num(confidence * 100),
            low=pct(interval.low),
            high=pct(interval.high),
            estimate=ON_ESTIMATE if usable.on_point_estimate else "",
        )
    crossing = next((p for p in valid if _crossed(p, slo=slo, budget=budget) is not None), None)
    detail = ""
    first_bad = None if first_bad_settled is None else first_bad_settled.judged
    growth = None if first_bad_settled is None or not first_bad_settled.on_growth else first_bad_settled.growth
    if first_bad is not None and (crossing is None or crossing.rate > first_bad.rate) and growth is not None:
        # Bad below every latency and timeout signal because its queue kept growing: the SLO held only because
        # the step ended before the queue broke it (docs/sweep.md, "A queue that grows inside a step").
        crossing, signal_key = first_bad, "queue_growth"
        trend = growth.evidence
        longest = max(s.duration_s for s in first_bad.trials)
        signal = GROWTH_SIGNAL.format(trend=trend.describe() if trend else "the queue grew", window=num(longest))
        evidence.update(growth=growth.to_dict())
    elif first_bad is not None and (crossing is None or crossing.rate > first_bad.rate):
        # Bad below every latency and timeout signal: it failed by shedding, errors, or late requests too few
        # to move a p99. Never "no cliff" while a rate failed: that failure is the cliff.
        crossing, signal_key = first_bad, "attainment"
        signal = ATTAINMENT_SIGNAL.format(attainment=pct(first_bad.judged_attainment or 0.0, against=target),
                                          corrected=_corrected(first_bad))  # fmt: skip
        failures = describe_failures(first_bad)
        detail = FAILURES.format(failures=failures) if failures else ""
        evidence.update(failures=failure_shares(first_bad), late_by=late_bounds(first_bad))
    elif crossing is None:
        highest = max(p.rate for p in valid)
        evidence.update(crossing_rate=None, highest_rate=highest)
        sentence = NO_CLIFF.format(
            highest=f"{num(highest)} {unit}",
            slo=num(slo.e2e_ms),
            ttft_held="" if slo.ttft_ms is None else TTFT_HELD.format(slo=num(slo.ttft_ms)),
            budget=num(budget * 100),
            sizing=sizing,
        )
        return sentence, None, evidence
    else:
        signal_key = _crossed(crossing, slo=slo, budget=budget) or ""
        if signal_key == "p99_e2e":
            signal = E2E_SIGNAL.format(slo=num(slo.e2e_ms))
        elif signal_key == "p99_ttft":
            signal = TTFT_SIGNAL.format(slo=num(slo.ttft_ms or 0.0))
        else:
            signal = TIMEOUT_SIGNAL.format(share=pct(crossing.timeout_share or 0.0), budget=num(budget * 100))
    if not detail and any(s.incomplete for s in crossing.trials):
        # 2xx answers with nothing (or not all) in them: a latency signal alone would hide them, and a
        # throughput that fell with them is their doing, not the latency's.
        detail = FAILURES.format(failures=describe_failures(crossing))
        evidence.update(failures=failure_shares(crossing), late_by=late_bounds(crossing))
    queue = server_queue(crossing)
    if queue is not None:
        first, peak_queue = queue
        template = SERVER_QUEUE if peak_queue > first else SERVER_QUEUE_HELD
        detail += template.format(first=_count(first), peak=_count(peak_queue))
        evidence.update(server_waiting_first=first, server_waiting_max=peak_queue)
    share = float(getattr(crossing, metric_key)) / peak_value if peak_value > 0 else 0.0
    constrained = share >= CONSTRAINED_SHARE
    evidence.update(
        crossing_rate=crossing.rate,
        signal=signal_key,
        attainment=crossing.attainment,
        p99_e2e_ms=crossing.p99_e2e_ms,
        p99_ttft_ms=crossing.p99_ttft_ms,
        timeout_share=crossing.timeout_share,
        share_of_peak=share,
    )
    fields = {
        "signal": signal,
        "crossing": f"{num(crossing.rate)} {unit}",
        "detail": detail,
        "metric": metric,
        "share": f"{share * 100:.0f}",
        "sizing": sizing,
    }
    if not constrained:
        return THROUGHPUT_BOUND.format(**fields), False, evidence
    # "not the peak" only where the peak lies above what we size for: below it, there is nothing to warn about.
    above_usable = usable is not None and peak.rate > usable.rate
    peak_clause = f", not the {num(peak.rate)} {unit} peak" if above_usable else ""
    return CONSTRAINED.format(**fields, peak_clause=peak_clause), True, evidence
