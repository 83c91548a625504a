"""The score's components, flag and total, from synthetic phase and per-second tables."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

import pytest

from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S, Attempt, Outcome, RequestRecord, Slo, classify
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.run_metrics import PhaseStats, RunMetrics, SecondStats
from cliffwatch.domain.results.scoring import (
    HIDDEN_OVERLOAD,
    ISOLATION,
    PRESERVATION,
    RECOVERY,
    RETRY_CONTAINMENT,
    SAFE_DEGRADATION,
    SCORE_VERSION,
    Component,
    Score,
    score_run,
)
from cliffwatch.domain.scenario.guards import ScoreSpec
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import PhaseRole
from cliffwatch.domain.traffic.plan import PhaseWindow

SLO = Slo(e2e_ms=1_000.0, timeout_ms=5_000.0)
SPEC = ScoreSpec(threshold=70.0, fast_fail_fraction=0.1)  # refusals within 100 ms are fast
B, S, R = PhaseRole.BASELINE, PhaseRole.STRESS, PhaseRole.RECOVERY


# -- builders ---------------------------------------------------------------------------------------


def _windows(*phases: tuple[PhaseRole, float]) -> list[PhaseWindow]:
    """Consecutive phase windows from the run's start, one per (role, duration in seconds)."""
    out, start = [], 0
    for index, (role, duration_s) in enumerate(phases):
        end = start + round(duration_s * NS_PER_S)
        out.append(PhaseWindow(index=index, name=f"{role.value}-{index}", role=role, start_ns=start, end_ns=end))
        start = end
    return out


def _phase(
    window: PhaseWindow,
    *,
    on_time: int = 0,
    late: int = 0,
    fast_shed: int = 0,
    slow_shed: int = 0,
    timeout: int = 0,
    error: int = 0,
    redirect: int = 0,
    not_sent: int = 0,
    retries: int = 0,
    tokens: float = 0.0,
    e2e_ms: float = 200.0,
) -> PhaseStats:
    outcomes = Counter(
        {
            Outcome.ON_TIME: on_time,
            Outcome.LATE: late,
            Outcome.SHED: fast_shed + slow_shed,
            Outcome.TIMEOUT: timeout,
            Outcome.ERROR: error,
            Outcome.REDIRECT: redirect,
            Outcome.NOT_SENT: not_sent,
        }
    )
    offered = outcomes.total()
    stats = PhaseStats(
        window=window,
        offered=offered,
        outcomes=outcomes,
        attempts=offered - not_sent + retries,
        fast_shed=fast_shed,
        output_tokens=tokens,
    )
    for value in [e2e_ms] * on_time + [3 * SLO.e2e_ms] * late:
        stats.latency["e2e"].add(value)
    return stats


def _second(
    t: int, *, on_time: int = 0, late: int = 0, shed: int = 0, e2e_ms: float = 200.0, tokens: float = 0.0
) -> SecondStats:
    second = SecondStats(t=t, offered=on_time + late + shed, output_tokens=tokens)
    second.outcomes.update({Outcome.ON_TIME: on_time, Outcome.LATE: late, Outcome.SHED: shed})
    for value in [e2e_ms] * on_time + [3 * SLO.e2e_ms] * late:
        second.e2e.add(value)
    return second


def _metrics(phases: Sequence[PhaseStats], seconds: Sequence[SecondStats] = ()) -> RunMetrics:
    return RunMetrics(phases=tuple(phases), seconds=tuple(seconds))


def _component(score: Score, name: str) -> Component:
    return next(c for c in score.components if c.name == name)


def _records(
    windows: Sequence[PhaseWindow],
    phase: int,
    count: int,
    *,
    status: int | None = None,
    e2e_ms: float = 200.0,
    retries: int = 0,
    tokens: int = 0,
    first_id: int = 0,
) -> list[RequestRecord]:
    """``count`` requests spread evenly over a phase; each succeeds (or fails with ``status``) ``e2e_ms``
    after its scheduled time, after ``retries`` fast 503s; ``tokens`` arrive evenly during the last attempt."""
    window = windows[phase]
    gap = (window.end_ns - window.start_ns) // count
    records = []
    for i in range(count):
        at = window.start_ns + i * gap
        attempts = [
            Attempt(
                number=n + 1,
                sent_ns=at + n * 10 * NS_PER_MS,
                end_ns=at + (n + 1) * 10 * NS_PER_MS,
                status=503,
                failure=FailureKind.STATUS,
            )
            for n in range(retries)
        ]
        sent, end = at + retries * 10 * NS_PER_MS, at + round(e2e_ms * NS_PER_MS)
        if status is None:
            chunks = tuple(sent + (end - sent) * (k + 1) // tokens for k in range(tokens))
            final = Attempt(
                number=retries + 1,
                sent_ns=sent,
                end_ns=end,
                first_token_ns=chunks[0] if chunks else None,
                chunk_times_ns=chunks,
                output_tokens=tokens,
            )
        else:
            failure = FailureKind.REDIRECT if 300 <= status < 400 else FailureKind.STATUS
            final = Attempt(number=retries + 1, sent_ns=sent, end_ns=end, status=status, failure=failure)
        attempts.append(final)
        records.append(
            RequestRecord(
                id=first_id + i,
                phase=phase,
                scheduled_ns=at,
                prompt_tokens=10,
                max_tokens=tokens,
                attempts=tuple(attempts),
                outcome=classify(tuple(attempts), scheduled_ns=at, slo=SLO),
            )
        )
    return records


def _aggregate(windows: Sequence[PhaseWindow], *batches: list[RequestRecord]) -> RunMetrics:
    aggregator = RunAggregator(windows, e2e_ms=SLO.e2e_ms, fast_fail_ms=SPEC.fast_fail_fraction * SLO.e2e_ms)
    for batch in batches:
        for record in batch:
            aggregator.add(record)
    return aggregator.result()


# -- preservation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("baseline_on_time", "baseline_late", "stress_on_time", "stress_timeout", "expected"),
    [
        (100, 0, 100, 0, 1.0),
        (90, 10, 45, 55, 0.5),
        (50, 50, 10, 90, 0.2),
        (80, 20, 90, 10, 1.0),  # better than the baseline: capped at 1
        (100, 0, 0, 100, 0.0),
    ],
)
def test_preservation_is_the_stress_on_time_ratio_relative_to_the_baseline(
    baseline_on_time: int, baseline_late: int, stress_on_time: int, stress_timeout: int, expected: float
) -> None:
    """Preservation is min(1, stress on-time ratio / baseline on-time ratio)."""
    base, stress = _windows((B, 10), (S, 10))
    metrics = _metrics(
        [
            _phase(base, on_time=baseline_on_time, late=baseline_late),
            _phase(stress, on_time=stress_on_time, timeout=stress_timeout),
        ]
    )
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), PRESERVATION)
    assert component.value == pytest.approx(expected)
    assert component.evidence["stress_on_time"] == stress_on_time
    assert component.evidence["baseline_ratio"] == pytest.approx(baseline_on_time / (baseline_on_time + baseline_late))


def test_preservation_pools_every_stress_phase_and_counts_not_sent() -> None:
    """Two stress phases are pooled, and requests never sent stay in the denominator."""
    base, s1, s2 = _windows((B, 10), (S, 10), (S, 10))
    metrics = _metrics(
        [_phase(base, on_time=100), _phase(s1, on_time=60, late=40), _phase(s2, on_time=20, not_sent=80)]
    )
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), PRESERVATION)
    assert component.value == pytest.approx(80 / 200)
    assert component.evidence["stress_offered"] == 200


@pytest.mark.parametrize("baseline_phase", [False, True])
def test_preservation_without_baseline_traffic_compares_with_the_ideal(baseline_phase: bool) -> None:
    """Without a baseline phase, or with one that offered nothing, stress goodput is compared with 1.0."""
    windows = _windows((B, 10), (S, 10))
    phases = [_phase(windows[0])] if baseline_phase else []
    metrics = _metrics([*phases, _phase(windows[1], on_time=70, late=30)])
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), PRESERVATION)
    assert component.value == pytest.approx(0.7)
    assert component.evidence["baseline_ratio"] is None
    assert component.evidence["reference_ratio"] == 1.0
    assert "no baseline traffic" in component.summary


def test_preservation_is_zero_when_the_baseline_already_failed() -> None:
    """A target with no on-time baseline request preserved nothing, whatever happened under stress."""
    base, stress = _windows((B, 10), (S, 10))
    metrics = _metrics([_phase(base, late=50, timeout=50), _phase(stress, on_time=10, late=90)])
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), PRESERVATION)
    assert component.value == 0.0
    assert "before any stress" in component.summary


@pytest.mark.parametrize("stress_phase", [False, True])
def test_without_stress_traffic_no_component_applies(stress_phase: bool) -> None:
    """No stress phase (or one that offered nothing) leaves nothing to score: value None, not passed."""
    base, stress = _windows((B, 10), (S, 10))
    phases = [_phase(base, on_time=100)] + ([_phase(stress)] if stress_phase else [])
    score = score_run(_metrics(phases, [_second(0, on_time=10)]), slo=SLO, spec=SPEC)
    assert [c.value for c in score.components] == [None, None, None, None, None]
    assert score.value is None
    assert not score.passed
    assert score.summary.startswith("No score")


# -- safe degradation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ({"on_time": 100}, 1.0),
        ({"on_time": 50, "fast_shed": 50}, 1.0),
        ({"on_time": 50, "slow_shed": 50}, 0.0),
        ({"fast_shed": 40, "timeout": 10}, 0.8),
        ({"on_time": 50, "fast_shed": 20, "late": 20, "not_sent": 10}, 0.4),
        ({"fast_shed": 10, "slow_shed": 10, "late": 10, "timeout": 10, "error": 5, "not_sent": 5}, 0.2),
        ({"fast_shed": 30, "redirect": 70}, 0.3),
        ({"on_time": 50, "fast_shed": 10, "redirect": 10, "error": 10, "not_sent": 20}, 0.2),
    ],
)
def test_safe_degradation_is_the_fast_shed_share_of_requests_not_on_time(
    counts: dict[str, int], expected: float
) -> None:
    """Safe degradation is fast_shed / (offered − on_time); all on time scores 1; the breakdown adds up."""
    base, stress = _windows((B, 10), (S, 10))
    metrics = _metrics([_phase(base, on_time=100), _phase(stress, **counts)])
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), SAFE_DEGRADATION)
    assert component.value == pytest.approx(expected)
    evidence = component.evidence
    parts = ("fast_shed", "slow_shed", "late", "timeout", "error", "redirect", "not_sent")
    assert sum(int(evidence[p] or 0) for p in parts) == evidence["not_on_time"]
    assert all(evidence[p] == counts.get(p, 0) for p in parts)


def test_everything_shed_fast_degrades_safely_but_preserves_nothing() -> None:
    """Stress answered entirely by 429s in 20 ms scores 1 for safe degradation and 0 for preservation."""
    windows = _windows((B, 10), (S, 10))
    metrics = _aggregate(
        windows, _records(windows, 0, 100), _records(windows, 1, 200, status=429, e2e_ms=20, first_id=1_000)
    )
    score = score_run(metrics, slo=SLO, spec=SPEC)
    assert _component(score, SAFE_DEGRADATION).value == 1.0
    assert _component(score, SAFE_DEGRADATION).evidence["fast_shed"] == 200
    assert _component(score, PRESERVATION).value == 0.0


def test_everything_shed_slowly_is_not_safe_degradation() -> None:
    """A proxy answering 503 only after a 3 s queue wait (HAProxy-like) sheds, but too late to count."""
    windows = _windows((B, 10), (S, 10))
    metrics = _aggregate(
        windows, _records(windows, 0, 100), _records(windows, 1, 200, status=503, e2e_ms=3_000, first_id=1_000)
    )
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), SAFE_DEGRADATION)
    assert component.value == 0.0
    assert component.evidence["slow_shed"] == 200
    assert "200 were refused slowly" in component.summary


def test_a_fast_redirect_is_a_failure_not_a_fast_refusal() -> None:
    """Stress answered by 307s in 20 ms (a target sending the work elsewhere) scores 0 for safe degradation:
    a redirect is no refusal the client can act on; the summary and evidence count them as redirects."""
    windows = _windows((B, 10), (S, 10))
    metrics = _aggregate(
        windows, _records(windows, 0, 100), _records(windows, 1, 200, status=307, e2e_ms=20, first_id=1_000)
    )
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), SAFE_DEGRADATION)
    assert component.value == 0.0
    assert (component.evidence["redirect"], component.evidence["fast_shed"]) == (200, 0)
    assert "200 redirected" in component.summary


# -- recovery ---------------------------------------------------------------------------------------


def _recovery_run(
    recovery: Sequence[SecondStats], *, stress_s: float = 10, recovery_s: float = 20, baseline_e2e_ms: float = 200.0
) -> RunMetrics:
    """Baseline 0–10 s, all on time (at 200 ms the band is on time ≥ 95 %, p99 ≤ 300 ms); stress; then recovery."""
    base, stress, rec = _windows((B, 10), (S, stress_s), (R, recovery_s))
    return _metrics(
        [
            _phase(base, on_time=100, e2e_ms=baseline_e2e_ms),
            _phase(stress, on_time=10, timeout=90),
            _phase(rec, on_time=100),
        ],
        recovery,
    )


@pytest.mark.parametrize(
    ("bad_seconds", "expected_s", "expected"),
    [
        (0, 0.0, 1.0),  # recovered immediately
        (4, 4.0, 0.8),
        (10, 10.0, 0.5),
        (15, 15.0, 0.25),  # the last five seconds are the first good window
        (16, None, 0.0),  # four good seconds at the end are not a window: never recovered
        (20, None, 0.0),
    ],
)
def test_recovery_time_is_when_a_window_of_seconds_is_back_in_the_baseline_band(
    bad_seconds: int, expected_s: float | None, expected: float
) -> None:
    """Recovery is 1 − t/duration, t from the stress end to the first 5 s window back in the band."""
    seconds = [_second(t, late=10) for t in range(20, 20 + bad_seconds)]
    seconds += [_second(t, on_time=10) for t in range(20 + bad_seconds, 40)]
    component = _component(score_run(_recovery_run(seconds), slo=SLO, spec=SPEC), RECOVERY)
    assert component.evidence["recovery_s"] == expected_s
    assert component.value == pytest.approx(expected)
    assert component.summary.startswith("Recovered" if expected_s is not None else "Not recovered")


@pytest.mark.parametrize(
    ("baseline_e2e_ms", "slow_e2e_ms", "p99_limit_ms"),
    [
        (100.0, 250.0, 200.0),  # small p99s get the 100 ms floor: max(150, 200)
        (400.0, 650.0, 600.0),  # larger ones the factor: max(600, 500)
    ],
)
def test_recovery_also_waits_for_latency_to_return(
    baseline_e2e_ms: float, slow_e2e_ms: float, p99_limit_ms: float
) -> None:
    """Seconds all on time but slower than max(1.5 × baseline p99, baseline p99 + 100 ms) are not recovered."""
    seconds = [_second(t, on_time=10, e2e_ms=slow_e2e_ms) for t in range(20, 26)]
    seconds += [_second(t, on_time=10, e2e_ms=baseline_e2e_ms) for t in range(26, 40)]
    metrics = _recovery_run(seconds, baseline_e2e_ms=baseline_e2e_ms)
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), RECOVERY)
    assert component.evidence["p99_limit_ms"] == pytest.approx(p99_limit_ms, rel=0.02)
    assert component.evidence["recovery_s"] == 6.0
    assert component.value == pytest.approx(0.7)


def test_recovery_tolerates_noise_within_the_band() -> None:
    """One late request among the first window's fifty still counts as recovered (98 % ≥ 95 %)."""
    seconds = [_second(20, on_time=9, late=1)] + [_second(t, on_time=10) for t in range(21, 40)]
    component = _component(score_run(_recovery_run(seconds), slo=SLO, spec=SPEC), RECOVERY)
    assert component.value == 1.0
    assert component.evidence["window_ratio"] == pytest.approx(0.98)


def test_recovery_skips_seconds_without_traffic() -> None:
    """With traffic every other second, a window is five seconds *with traffic*, and empty ones do not count."""
    seconds = [_second(t, late=10) if t < 24 else _second(t, on_time=10) for t in range(20, 40, 2)]
    seconds = sorted([*seconds, *(_second(t) for t in range(21, 40, 2))], key=lambda s: s.t)
    component = _component(score_run(_recovery_run(seconds), slo=SLO, spec=SPEC), RECOVERY)
    assert component.evidence["recovery_s"] == 4.0
    assert component.value == pytest.approx(0.8)


def test_recovery_is_measured_from_a_stress_end_between_seconds() -> None:
    """When stress ends at 20.5 s, the first whole recovery second starts 0.5 s later: 1 − 0.5/20.

    Second 20 also holds requests scheduled under stress, so it is not judged even when it is in band.
    """
    seconds = [_second(t, on_time=10) for t in range(20, 41)]
    component = _component(score_run(_recovery_run(seconds, stress_s=10.5), slo=SLO, spec=SPEC), RECOVERY)
    assert component.evidence["recovery_s"] == 0.5
    assert component.value == pytest.approx(0.975)


def test_a_short_recovery_phase_must_be_in_band_throughout() -> None:
    """A 3 s recovery phase is judged as one 3 s window."""
    good = [_second(t, on_time=10) for t in range(20, 23)]
    bad = [_second(20, late=10), *good[1:]]
    assert _component(score_run(_recovery_run(good, recovery_s=3), slo=SLO, spec=SPEC), RECOVERY).value == 1.0
    component = _component(score_run(_recovery_run(bad, recovery_s=3), slo=SLO, spec=SPEC), RECOVERY)
    assert component.value == 0.0
    assert component.evidence["window_seconds"] == 3


def test_recovery_without_baseline_traffic_uses_the_slo() -> None:
    """Without a baseline the band is on time ≥ 95 % and p99 ≤ the SLO's e2e bound."""
    stress, rec = _windows((S, 10), (R, 10))
    seconds = [_second(t, on_time=10, e2e_ms=800) for t in range(10, 20)]
    metrics = _metrics([_phase(stress, on_time=10, timeout=90), _phase(rec, on_time=100)], seconds)
    component = _component(score_run(metrics, slo=SLO, spec=SPEC), RECOVERY)
    assert component.evidence["p99_limit_ms"] == SLO.e2e_ms
    assert component.evidence["ratio_floor"] == pytest.approx(0.95)
    assert component.value == 1.0


def test_recovery_is_zero_when_the_baseline_already_failed() -> None:
    """There is no working state to recover to when no baseline request was on time."""
    base, stress, rec = _windows((B, 10), (S, 10), (R, 10))
    seconds = [_second(t, on_time=10) for t in range(20, 30)]
    metrics = _metrics([_phase(base, late=100), _phase(stress, late=100), _phase(rec, on_time=100)], seconds)
    assert _component(score_run(metrics, slo=SLO, spec=SPEC), RECOVERY).value == 0.0


@pytest.mark.parametrize(
    "roles",
    [
        (B, S),  # no recovery phase at all
        (B, S, R, S),  # recovery followed an earlier stress, not the last one
        (B, S, B, R),  # recovery does not directly follow the stress
    ],
)
def test_recovery_is_not_applicable_without_a_recovery_phase_after_the_last_stress(
    roles: tuple[PhaseRole, ...],
) -> None:
    """Recovery is only judged in recovery phases that directly follow the last stress phase."""
    windows = _windows(*((role, 10.0) for role in roles))
    phases = [_phase(w, on_time=100) for w in windows]
    seconds = [_second(t, on_time=10) for t in range(10 * len(roles))]
    component = _component(score_run(_metrics(phases, seconds), slo=SLO, spec=SPEC), RECOVERY)
    assert component.value is None
    assert "no recovery phase" in component.summary


def test_recovery_is_not_applicable_without_recovery_traffic() -> None:
    """A recovery phase in which nothing was scheduled cannot show whether the target recovered."""
    component = _component(score_run(_recovery_run([]), slo=SLO, spec=SPEC), RECOVERY)
    assert component.value is None


# -- retry containment ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retries_per_request", "amplification", "expected"),
    [((0,), 1.0, 1.0), ((0, 1), 1.5, 0.5), ((2,), 3.0, 0.0)],
)
def test_retry_containment_is_one_minus_the_extra_load(
    retries_per_request: tuple[int, ...], amplification: float, expected: float
) -> None:
    """Retry containment is max(0, 1 − retries/sent): 1 without retries, 0 once retries double the load."""
    windows = _windows((B, 10), (S, 10))
    batches = [_records(windows, 0, 100)]
    for n, retries in enumerate(retries_per_request):
        batches.append(_records(windows, 1, 100, retries=retries, first_id=1_000 * (n + 1)))
    component = _component(score_run(_aggregate(windows, *batches), slo=SLO, spec=SPEC), RETRY_CONTAINMENT)
    assert component.evidence["amplification"] == pytest.approx(amplification)
    assert component.value == pytest.approx(expected)


# -- total ------------------------------------------------------------------------------------------


def test_weights_are_renormalised_over_applicable_components() -> None:
    """Without recovery, 100 × (0.4 × 0.5 + 0.2 × 1 + 0.15 × 1) / 0.75 = 73.3."""
    base, stress = _windows((B, 10), (S, 10))
    metrics = _metrics([_phase(base, on_time=100), _phase(stress, on_time=50, fast_shed=50)])
    score = score_run(metrics, slo=SLO, spec=SPEC)
    assert [c.value for c in score.components] == [0.5, 1.0, None, 1.0, None]  # no classes: no isolation
    assert score.value == 73.3
    assert score.passed
    assert not score_run(metrics, slo=SLO, spec=ScoreSpec(threshold=73.4)).passed
    assert score_run(metrics, slo=SLO, spec=ScoreSpec(threshold=73.3)).passed


def _worked_example() -> RunMetrics:
    """The worked example of docs/scoring.md (SLO e2e 2 s, fast refusals within 200 ms)."""
    base, stress, rec = _windows((B, 60), (S, 60), (R, 60))
    phases = [
        _phase(base, on_time=594, late=6, tokens=60_000, e2e_ms=800),
        _phase(
            stress,
            on_time=960,
            late=240,
            fast_shed=900,
            slow_shed=60,
            timeout=180,
            error=60,
            retries=360,
            tokens=5 * 2_000 + 55 * 1_900,
        ),
        _phase(rec, on_time=540, late=60, tokens=60_000, e2e_ms=800),
    ]
    seconds = [_second(t, tokens=1_000) for t in range(60)]
    seconds += [_second(t, tokens=2_000 if t < 65 else 1_900) for t in range(60, 120)]
    seconds += [_second(t, on_time=5, late=5, e2e_ms=800, tokens=1_000) for t in range(120, 132)]
    seconds += [_second(t, on_time=10, e2e_ms=800, tokens=1_000) for t in range(132, 180)]
    return _metrics(phases, seconds)


def test_the_worked_example_in_the_docs_holds() -> None:
    """docs/scoring.md's example: 0.404, 0.625, 0.8, 0.85 → 61.4, a fail at 70, hidden overload raised."""
    slo = Slo(e2e_ms=2_000.0, timeout_ms=10_000.0)
    score = score_run(_worked_example(), slo=slo, spec=SPEC)
    values = {c.name: c.value for c in score.components}
    assert values == pytest.approx(
        {PRESERVATION: 0.4 / 0.99, SAFE_DEGRADATION: 0.625, RECOVERY: 0.8, RETRY_CONTAINMENT: 0.85, ISOLATION: None}
    )
    assert _component(score, RECOVERY).evidence["p99_limit_ms"] == pytest.approx(1_200, rel=0.02)
    assert score.value == 61.4
    assert not score.passed
    flag = score.flags[0]
    assert flag.raised
    assert flag.evidence["peak_tokens_per_s"] == 2_000
    assert "output held at 95 % of peak tokens/s (1,908 of 2,000)" in flag.summary
    assert "fell to 40 % of the baseline" in flag.summary
    assert flag.summary in score.summary
    without_recovery = _metrics(_worked_example().phases[:2], _worked_example().seconds)
    assert score_run(without_recovery, slo=slo, spec=SPEC).value == 55.2


# -- hidden overload --------------------------------------------------------------------------------


def _overload_run(*, stress_tokens_per_s: float, stress_on_time: int, spike: float = 500.0) -> RunMetrics:
    """Baseline 0–10 s all on time at 500 tokens/s, with one second at ``spike``; stress 10–20 s."""
    base, stress = _windows((B, 10), (S, 10))
    seconds = [_second(t, tokens=spike if t == 5 else 500.0) for t in range(10)]
    seconds += [_second(t, tokens=stress_tokens_per_s) for t in range(10, 20)]
    phases = [
        _phase(base, on_time=100, tokens=sum(s.output_tokens for s in seconds[:10])),
        _phase(stress, on_time=stress_on_time, timeout=100 - stress_on_time, tokens=10 * stress_tokens_per_s),
    ]
    return _metrics(phases, seconds)


@pytest.mark.parametrize(
    ("stress_tokens_per_s", "stress_on_time", "raised"),
    [
        (480.0, 31, True),  # tokens held, goodput collapsed: the cliff peak tokens/s hides
        (480.0, 90, False),  # tokens held and goodput held
        (150.0, 31, False),  # goodput collapsed, but so did the tokens: a visible overload
        (450.0, 79, True),  # exactly 90 % of the peak, goodput just under 80 %
        (440.0, 79, False),
        (480.0, 80, False),
    ],
)
def test_hidden_overload_flag(stress_tokens_per_s: float, stress_on_time: int, raised: bool) -> None:
    """Raised when stress tokens/s ≥ 90 % of the peak while the on-time ratio is < 80 % of the baseline's."""
    metrics = _overload_run(stress_tokens_per_s=stress_tokens_per_s, stress_on_time=stress_on_time)
    flag = score_run(metrics, slo=SLO, spec=SPEC).flags[0]
    assert flag.name == HIDDEN_OVERLOAD
    assert flag.raised is raised
    assert flag.summary.startswith("Hidden overload" if raised else "No hidden overload")


def test_hidden_overload_summary_states_the_numbers() -> None:
    """The raised flag says plainly how much output held and how far goodput fell."""
    flag = score_run(_overload_run(stress_tokens_per_s=480.0, stress_on_time=31), slo=SLO, spec=SPEC).flags[0]
    assert flag.summary.startswith(
        "Hidden overload: output held at 96 % of peak tokens/s (480 of 500) while on-time completions fell to "
        "31 % of the baseline (31 % vs 100 % of requests on time)"
    )


def test_the_peak_is_a_rolling_mean_so_one_noisy_second_does_not_set_it() -> None:
    """A one-second burst to 600 tokens raises the 5 s peak to 520 only, so 480 tokens/s still counts as held."""
    metrics = _overload_run(stress_tokens_per_s=480.0, stress_on_time=31, spike=600.0)
    flag = score_run(metrics, slo=SLO, spec=SPEC).flags[0]
    assert flag.evidence["peak_tokens_per_s"] == pytest.approx(520.0)
    assert flag.raised


def test_zero_tokens_never_raise_the_flag() -> None:
    """A plain HTTP run with no output tokens leaves the flag down and divides by nothing."""
    windows = _windows((B, 10), (S, 10), (R, 10))
    metrics = _aggregate(
        windows,
        _records(windows, 0, 100),
        _records(windows, 1, 100, status=503, e2e_ms=3_000, first_id=1_000),
        _records(windows, 2, 100, first_id=2_000),
    )
    score = score_run(metrics, slo=SLO, spec=SPEC)
    flag = score.flags[0]
    assert not flag.raised
    assert flag.evidence["peak_tokens_per_s"] == 0.0
    assert "No output tokens" in flag.summary
    assert score.value is not None


def test_hidden_overload_through_the_aggregator() -> None:
    """Streams that keep the tokens flowing but finish late raise the flag from real request records."""
    windows = _windows((B, 10), (S, 10))
    metrics = _aggregate(
        windows,
        _records(windows, 0, 100, e2e_ms=500, tokens=50),
        _records(windows, 1, 20, e2e_ms=500, tokens=50, first_id=1_000),
        _records(windows, 1, 80, e2e_ms=2_000, tokens=50, first_id=2_000),
    )
    flag = score_run(metrics, slo=SLO, spec=SPEC).flags[0]
    assert flag.raised
    assert flag.evidence["goodput_share"] == pytest.approx(0.2)


# -- persistence ------------------------------------------------------------------------------------


def test_to_dict_is_json_ready_and_reads_back() -> None:
    """The score, N/A components and flag included, survives strict JSON and from_dict unchanged."""
    slo = Slo(e2e_ms=2_000.0, timeout_ms=10_000.0)
    metrics = _worked_example()
    partial = _metrics(metrics.phases[:2], metrics.seconds)
    for score in (score_run(metrics, slo=slo, spec=SPEC), score_run(partial, slo=slo, spec=SPEC)):
        text = json.dumps(score.to_dict(), allow_nan=False)
        assert Score.from_dict(json.loads(text)) == score
        assert json.loads(text)["version"] == SCORE_VERSION == "4"
    empty = score_run(_metrics([]), slo=slo, spec=SPEC)
    assert Score.from_dict(json.loads(json.dumps(empty.to_dict(), allow_nan=False))) == empty


def test_the_baseline_reference_leaves_out_the_requests_the_next_phase_reached_and_says_so() -> None:
    """Baseline requests still running when the stress began describe the change, not the normal: they stay in the
    baseline's own figures, and the reference ratio and p99 come from the rest; the evidence counts them."""
    windows = _windows((B, 10), (S, 5))
    settled = _records(windows, 0, 45, e2e_ms=200)  # every 222 ms from 0 s, the last over at 9.98 s
    overtaken = _records(windows, 0, 50, e2e_ms=1_500, first_id=100)[-1]  # sent at 9.8 s, late at 11.3 s
    metrics = _aggregate(windows, settled, [overtaken], _records(windows, 1, 10, first_id=200))
    score = score_run(metrics, slo=SLO, spec=SPEC)
    preservation = _component(score, PRESERVATION)
    assert metrics.phases[0].offered == 46
    assert metrics.phases[0].on_time == 45
    assert preservation.evidence["reference_ratio"] == 1.0  # (the whole baseline: 45 of 46)
    assert preservation.evidence["baseline_offered"] == 45
    assert preservation.evidence["baseline_spill_over"] == 1
    reason = "1 baseline request still in flight when the next phase began was left out of the reference"
    assert preservation.evidence["baseline_spill_over_reason"] == reason
    assert preservation.summary.endswith(f"preserved. {reason}.")
    assert score.flags[0].evidence["baseline_spill_over"] == 1


def test_a_baseline_request_already_late_when_the_next_phase_began_stays_in_the_reference() -> None:
    """One whose e2e bound was up before the change was late before it: leaving it out would flatter a baseline
    that fails slowly, so it stays, late."""
    windows = _windows((B, 10), (S, 5))
    slow = _records(windows, 0, 10, e2e_ms=3_000)  # sent every second, each over 3 s later: the last three run on
    metrics = _aggregate(windows, _records(windows, 0, 10, first_id=100), slow, _records(windows, 1, 10, first_id=200))
    evidence = _component(score_run(metrics, slo=SLO, spec=SPEC), PRESERVATION).evidence
    assert (evidence["baseline_offered"], evidence["baseline_on_time"], evidence["baseline_spill_over"]) == (20, 10, 0)


def test_when_every_baseline_request_spilled_over_the_whole_baseline_is_the_reference() -> None:
    """A baseline under a fault of its own leaves no request clear of it: the whole baseline stands in, and the
    evidence says why."""
    windows = _windows((B, 2), (S, 5))
    aggregator = RunAggregator(windows, e2e_ms=SLO.e2e_ms, fast_fail_ms=100, faulted={0})
    for record in [*_records(windows, 0, 4), *_records(windows, 0, 1, e2e_ms=1_500, first_id=10)]:
        aggregator.add(record)
    for record in _records(windows, 1, 10, first_id=100):
        aggregator.add(record)
    evidence = _component(score_run(aggregator.result(), slo=SLO, spec=SPEC), PRESERVATION).evidence
    assert evidence["reference_ratio"] == pytest.approx(0.8)
    assert evidence["baseline_spill_over"] == 5
    assert evidence["baseline_spill_over_reason"] == (
        "Every one of the 5 baseline requests was spill-over (5 sent while a fault was on), so the whole baseline "
        "stands in as the reference"
    )


def test_metrics_counted_without_an_aggregator_use_the_whole_baseline() -> None:
    """Hand-built metrics carry no reference of their own: the whole baseline is the reference, nothing left out."""
    baseline_w, stress_w = _windows((B, 10), (S, 5))
    baseline = _phase(baseline_w, on_time=45, late=5)
    stress = _phase(stress_w, on_time=9, late=1)
    evidence = _component(score_run(_metrics([baseline, stress]), slo=SLO, spec=SPEC), PRESERVATION).evidence
    assert evidence["reference_ratio"] == pytest.approx(0.9)
    assert (evidence["baseline_spill_over"], evidence["baseline_spill_over_reason"]) == (0, None)
