"""The latency test of the recheck: the first reading's and the recheck's median latencies at a light load, the
target's own speed, compared beyond the spread of the sweep's lightest steps."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from capacity_kit import step

from cliffwatch.domain.capacity.capacity import CapacityResult, StepStats, summarize
from cliffwatch.domain.capacity.drift import DRIFT_CONFIDENCE, TargetDrift, find_drift
from cliffwatch.domain.capacity.speed_drift import SpeedShift, find_speed_shifts, light, log_spread, t_tail


def reading(
    rate: float,
    trial: int = 1,
    *,
    answers: int,
    p50: float,
    p90: float | None = None,
    ttft: tuple[float, float] | None = None,
    recheck: bool = False,
    started_s: float | None = None,
    generator_limited: bool = False,
    on_time: int | None = None,
    duration_s: float = 10.0,
) -> StepStats:
    """A step whose ``answers`` requests were all answered (on time unless told), with these e2e percentiles."""
    on_time = answers if on_time is None else on_time
    p90 = p50 * 1.08 if p90 is None else p90
    none = {"p50": None, "p90": None, "p99": None}
    return StepStats(
        rate=rate, trial=trial, duration_s=duration_s, offered=answers, on_time=on_time, late=answers - on_time,
        shed=0, fast_shed=0, timeout=0, error=0, not_sent=0, sent_rate=answers / duration_s,
        goodput_rps=on_time / duration_s, completions_per_s=answers / duration_s, tokens_per_s=0.0,
        amplification=1.0, ttft_ms=none if ttft is None else {"p50": ttft[0], "p90": ttft[1], "p99": ttft[1]},
        itl_ms=none, e2e_ms={"p50": p50, "p90": p90, "p99": p90}, generator_limited=generator_limited,
        recheck=recheck, started_s=started_s,
    )  # fmt: skip


# The issue's server at the start of a default sweep: 107 ms a request, a few per cent of spread, light at 0.5, 1
# and 2 req/s (at most 0.21 requests in flight), then the search near its cliff.
FIRST = reading(0.5, answers=5, p50=107.0, started_s=0.0)
EARLY = [FIRST, reading(1.0, answers=10, p50=107.0, p90=114.0), reading(2.0, answers=20, p50=108.0, p90=116.0),
         reading(8.0, answers=80, p50=320.0, p90=700.0)]  # fmt: skip


def recheck(p50: float, **changes: object) -> StepStats:
    options: dict[str, object] = {"answers": 5, "recheck": True, "started_s": 240.0, "p90": p50 * 1.08}
    return reading(0.5, 2, p50=p50, **{**options, **changes})  # type: ignore[arg-type]


def shifts(steps: list[StepStats], *, closed_loop: bool = False) -> tuple[SpeedShift, ...]:
    return find_speed_shifts(steps, confidence=DRIFT_CONFIDENCE, closed_loop=closed_loop)


# (what, steps in the order measured, the shifted signal and the recheck's change, or None)
RULE: list[tuple[str, list[StepStats], tuple[str, float] | None]] = [
    ("steady medians within their noise are no shift", [*EARLY, recheck(112.0)], None),
    ("the issue's 107 → 173 ms is a shift", [*EARLY, recheck(173.0)], ("e2e", 173 / 107 - 1)),
    ("a target that sped up shifted too", [replace(FIRST, e2e_ms={"p50": 173.0, "p90": 187.0, "p99": 187.0}),
                                           *EARLY[1:], recheck(107.0)], ("e2e", 107 / 173 - 1)),
    ("a shift under 25 % is not judged, however sure", [*EARLY, recheck(130.0)], None),
    ("× 1.6 within a wide spread is chance",
     [reading(0.5, answers=5, p50=107.0, p90=200.0), reading(1.0, answers=10, p50=107.0, p90=230.0),
      reading(2.0, answers=20, p50=110.0, p90=240.0), recheck(173.0, p90=330.0)], None),
    ("a first reading with 2 answers has no median to judge",
     [replace(FIRST, offered=2, on_time=2), *EARLY[1:], recheck(173.0)], None),
    ("a recheck with 2 answers has no median to judge", [*EARLY, recheck(173.0, answers=2)], None),
    ("too few light answers for a spread: nothing is judged", [FIRST, EARLY[3], recheck(173.0)], None),
    ("a first reading with a queue is not light", [reading(4.0, answers=40, p50=107.0, p90=114.0), *EARLY[1:3],
                                                   replace(recheck(173.0, answers=40), rate=4.0)], None),
    ("a generator-limited recheck describes the client", [*EARLY, recheck(173.0, generator_limited=True)], None),
    ("two trials at one rate without a recheck are the on-time test's",
     [*EARLY, replace(recheck(173.0), recheck=False)], None),
    ("latencies that never varied: any shift of 25 % is one",
     [reading(0.5, answers=5, p50=107.0, p90=107.0), reading(1.0, answers=10, p50=107.0, p90=107.0),
      reading(2.0, answers=20, p50=107.0, p90=107.0), recheck(140.0, p90=140.0)], ("e2e", 140 / 107 - 1)),
]  # fmt: skip


@pytest.mark.parametrize(("what", "steps", "expected"), RULE, ids=[case[0] for case in RULE])
def test_the_rule(what: str, steps: list[StepStats], expected: tuple[str, float] | None) -> None:
    found = shifts(steps)

    if expected is None:
        assert found == (), what
    else:
        (shift,) = found
        assert (shift.signal, shift.change) == (expected[0], pytest.approx(expected[1])), what
        assert shift.recheck
        assert (shift.earlier.step_index, shift.later.step_index) == (0, len(steps) - 1)


def test_a_shift_says_both_medians_when_each_was_read_and_how_sure_it_is() -> None:
    (shift,) = shifts([*EARLY, recheck(173.0)])

    assert (shift.earlier.median_ms, shift.later.median_ms) == (107.0, 173.0)
    assert (shift.earlier.started_s, shift.later.started_s) == (0.0, 240.0)
    assert (shift.earlier.requests, shift.later.requests) == (5, 5)
    assert shift.t is not None
    assert t_tail(shift.t, shift.df) < 1 - DRIFT_CONFIDENCE


def test_a_ttft_that_moved_alone_is_a_shift_of_its_own() -> None:
    def with_ttft(step: StepStats, p50: float) -> StepStats:
        return replace(step, ttft_ms={"p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.1})

    steps = [*(with_ttft(s, 40.0) for s in EARLY), with_ttft(recheck(110.0), 80.0)]

    (shift,) = shifts(steps)

    assert (shift.signal, shift.earlier.median_ms, shift.later.median_ms) == ("ttft", 40.0, 80.0)


def test_one_client_is_light_in_a_closed_loop_whatever_its_time() -> None:
    # a 2-s answer at 1 client: two requests in flight by Little's law for an open loop, yet nothing ever queues
    steps = [reading(1.0, answers=5, p50=2000.0, p90=2040.0), reading(1.0, 2, answers=20, p50=2000.0, p90=2060.0),
             reading(2.0, answers=20, p50=2050.0), replace(recheck(3200.0, p90=3260.0), rate=1.0, trial=3)]  # fmt: skip

    assert shifts(steps) == ()
    (shift,) = shifts(steps, closed_loop=True)
    assert shift.change == pytest.approx(0.6)


def test_the_spread_is_read_from_the_lightest_steps_first_until_it_has_enough_degrees_of_freedom() -> None:
    # two light steps of 20 answers hold 9 degrees of freedom; the heavier one, whose queue doubled its p90, is
    # light too (0.3 requests in flight) but not needed
    lightest = [reading(0.25, answers=20, p50=100.0, p90=110.0), reading(0.5, answers=20, p50=100.0, p90=110.0)]
    queued = reading(2.0, answers=40, p50=150.0, p90=300.0)
    assert light(queued)

    spread = log_spread([queued, *lightest], "e2e")

    assert spread is not None
    sigma, df = spread
    assert df == pytest.approx(2 * 18 / 4)  # (n − 2) / 4 a step
    assert sigma == pytest.approx(math.log(1.1) / 1.19, rel=0.01)  # the p90 and p50 of 20 are 1.19 σ apart
    assert log_spread([queued, lightest[0]], "e2e") == pytest.approx((0.48, 14.0), rel=0.05)  # 4.5 were not enough
    assert log_spread([reading(0.5, answers=5, p50=100.0)], "e2e") is None  # 0.75 degrees of freedom


@pytest.mark.parametrize(("t", "df", "tail"), [(12.924, 3, 0.001), (8.610, 4, 0.001), (4.587, 10, 0.001),
                                               (3.646, 30, 0.001), (2.228, 10, 0.05), (0.0, 5, 1.0)])  # fmt: skip
def test_the_t_tail_matches_the_tables(t: float, df: float, tail: float) -> None:
    assert t_tail(t, df) == pytest.approx(tail, rel=2e-3)


def test_a_latency_shift_alone_is_a_drift_whose_verdict_says_the_target_slowed_and_keeps_its_rates() -> None:
    steps = [*EARLY, reading(16.0, answers=160, p50=900.0, p90=3000.0, on_time=80), recheck(173.0)]
    kept = summarize(steps[:-1], target=0.99, e2e_slo_ms=900.0, finished_because="bracketed")

    result = summarize(steps, target=0.99, e2e_slo_ms=900.0, finished_because="bracketed")

    assert result.target_drift is not None
    assert result.target_drift.disagreements == ()
    assert result.target_drift.rates == (0.5,)
    assert result.target_drift.rechecked
    assert result.verdict.startswith(
        "the target's speed drifted during the sweep (0.5 req/s: median e2e 107 ms at 0 s, 173 ms at 240 s in the "
        "end-of-sweep recheck (+62 %)): its usable capacity is its slowest period's; the rates measured while it was "
        "faster may overstate it; "
    )
    # a shift judges no rate: which steps ran while the target was faster, the sweep cannot tell
    assert result.usable_rps == kept.usable_rps == 8.0
    assert result.verdict.endswith(kept.verdict)


def test_the_verdict_names_a_rate_once_by_its_on_time_shares_before_its_medians() -> None:
    def with_ttft(step: StepStats, p50: float) -> StepStats:
        return replace(step, ttft_ms={"p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.1})

    early = [with_ttft(replace(EARLY[0], offered=40, on_time=40), 40.0), *(with_ttft(s, 40.0) for s in EARLY[1:])]
    slowed = with_ttft(recheck(173.0, answers=40), 70.0)
    failed = replace(slowed, on_time=8, late=32)  # and the recheck failed outright
    verdicts = {}
    for name, last in (("slowed", slowed), ("failed", failed)):
        result = summarize([*early, last], target=0.99, e2e_slo_ms=900.0, finished_because="bracketed")
        assert result.target_drift is not None
        assert [s.signal for s in result.target_drift.latency] == ["e2e", "ttft"], name
        verdicts[name] = result.verdict

    assert "median e2e 107 ms at 0 s, 173 ms" in verdicts["slowed"]
    assert "median TTFT" not in verdicts["slowed"]  # in target_drift, not said twice
    assert verdicts["failed"].startswith(
        "the target's speed drifted during the sweep (0.5 req/s: 100.0 % on time at 0 s, 20.0 % at 240 s in the "
        "end-of-sweep recheck): its usable capacity is its slowest period's, each of these rates judged on its slower "
        "trial; "
    )
    assert "median" not in verdicts["failed"].split(": its usable")[0]


def test_the_issue_sweep_is_flagged_by_its_recheck_where_its_trial_pairs_stand_aside() -> None:
    # 8 req/s held every request in one step, 29 % later; 6 req/s 100 %, then 79 %: SLO e2e 900 ms. The faster
    # 8-req/s trial was near its bound (p99 780 ms of 900: the cliff, where a steady target's windows disagree by
    # chance), and 60 of 60 against 47 of 60 overlap at 99.9 %: neither pair is a disagreement. The recheck at
    # 0.5 req/s read the target's own time: 107 ms at the start, 173 ms at the end.
    held = replace(reading(8.0, answers=80, p50=300.0), e2e_ms={"p50": 300.0, "p90": 600.0, "p99": 780.0})
    steps = [*EARLY[:3], held, reading(16.0, answers=160, p50=4000.0, on_time=0), reading(6.0, answers=60, p50=180.0),
             reading(8.0, 2, answers=80, p50=700.0, on_time=23), reading(6.0, 2, answers=60, p50=400.0, on_time=47),
             recheck(173.0)]  # fmt: skip

    drift = find_drift(steps, e2e_slo_ms=900.0)

    assert drift is not None
    assert drift.disagreements == ()
    (shift,) = drift.latency
    assert (shift.rate, shift.earlier.median_ms, shift.later.median_ms) == (0.5, 107.0, 173.0)
    # with room (p99 within half the bound) the 8-req/s pair would have been one
    roomy = replace(held, e2e_ms={"p50": 150.0, "p90": 300.0, "p99": 400.0})
    pairs = find_drift([*steps[:3], roomy, *steps[4:]], e2e_slo_ms=900.0)
    assert pairs is not None
    assert [d.rate for d in pairs.disagreements] == [8.0]


def test_the_shift_reads_back_from_the_result_document_and_older_drift_documents_have_none() -> None:
    result = summarize([*EARLY, recheck(173.0)], target=0.99, e2e_slo_ms=900.0, finished_because="bracketed")
    data = json.loads(json.dumps(result.to_dict()))

    (shift,) = data["target_drift"]["latency"]
    assert shift["signal"] == "e2e"
    assert shift["median_ms"] == [107.0, 173.0]
    assert shift["change"] == pytest.approx(0.617, abs=1e-3)
    assert [t["step_index"] for t in shift["trials"]] == [0, 4]
    assert CapacityResult.from_dict(data) == result
    shared = find_drift([step(4.0, 1, offered=400), step(4.0, 2, offered=400, on_time=300)], e2e_slo_ms=4000.0)
    assert shared is not None
    older = {k: v for k, v in json.loads(json.dumps(shared.to_dict())).items() if k != "latency"}
    assert TargetDrift.from_dict(older) == shared


def test_a_drift_needs_something_that_drifted() -> None:
    with pytest.raises(ValueError, match="a disagreement or a latency shift"):
        TargetDrift(confidence=DRIFT_CONFIDENCE)
