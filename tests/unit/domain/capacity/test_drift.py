"""The drift rule: trials at one rate that disagree beyond their intervals, the recheck, and the usable capacity of
a drifting target's slowest period."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from capacity_kit import step

from cliffwatch.domain.capacity.arrival_luck import LuckCorrection, ReferenceReading
from cliffwatch.domain.capacity.capacity import CapacityResult, StepStats, StepVerdict, settle_all, summarize, wilson
from cliffwatch.domain.capacity.drift import DRIFT_CONFIDENCE, TargetDrift, find_drift, held_with_room

E2E_SLO_MS = 4000.0


def result_of(steps: list[StepStats], **overrides: object) -> CapacityResult:
    options: dict[str, object] = {"target": 0.99, "e2e_slo_ms": E2E_SLO_MS, "finished_because": "bracketed"}
    return summarize(steps, **{**options, **overrides})  # type: ignore[arg-type]


HELD = step(4.0, 1, offered=400)  # every request on time, p99 e2e 1 s: a quarter of the 4-s SLO
# (what, steps in the order measured, the disagreement found: (rate, earlier step, later step), or None)
RULE: list[tuple[str, list[StepStats], tuple[float, int, int] | None]] = [
    ("trials whose intervals overlap agree", [HELD, step(4.0, 2, offered=400, on_time=397)], None),
    ("trials whose intervals are apart disagree", [HELD, step(4.0, 2, offered=400, on_time=300)], (4.0, 0, 1)),
    ("a target that sped up disagrees too", [step(4.0, 1, offered=400, on_time=300), replace(HELD, trial=2)],
     (4.0, 0, 1)),
    ("trials at different rates are not compared", [HELD, step(5.0, 1, offered=400, on_time=300)], None),
    ("windows of different lengths are not compared",
     [HELD, step(4.0, 2, offered=400, on_time=300, duration_s=60.0, extended=True)], None),
    ("a generator-limited trial describes the client",
     [HELD, step(4.0, 2, offered=400, on_time=300, generator_limited=True)], None),
    ("a slower trial that was offered more requests is explained by its load",
     [HELD, step(4.0, 2, offered=440, on_time=300)], None),
    ("a faster trial close to its bound was at the cliff, where windows disagree by chance",
     [step(4.0, 1, offered=400, p99_e2e_ms=2500.0), step(4.0, 2, offered=400, on_time=300)], None),
    ("a faster trial without a p99 cannot show it held with room",
     [step(4.0, 1, offered=400, p99_e2e_ms=None), step(4.0, 2, offered=400, on_time=300)], None),
    ("an empty trial says nothing", [HELD, step(4.0, 2, offered=0)], None),
    ("between the trials at other rates", [HELD, step(8.0), step(2.0), step(4.0, 2, offered=400, on_time=300)],
     (4.0, 0, 3)),
]  # fmt: skip


@pytest.mark.parametrize(("what", "steps", "expected"), RULE, ids=[case[0] for case in RULE])
def test_the_rule(what: str, steps: list[StepStats], expected: tuple[float, int, int] | None) -> None:
    drift = find_drift(steps, e2e_slo_ms=E2E_SLO_MS)

    if expected is None:
        assert drift is None, what
    else:
        assert drift is not None, what
        (pair,) = drift.disagreements
        assert (pair.rate, pair.earlier.step_index, pair.later.step_index) == expected
        assert drift.rates == (expected[0],)


def test_a_ttft_bound_needs_room_too() -> None:
    steps = [step(4.0, 1, offered=400, p99_ttft_ms=300.0), step(4.0, 2, offered=400, on_time=300)]

    assert find_drift(steps, e2e_slo_ms=E2E_SLO_MS, ttft_slo_ms=1000.0) is not None
    assert find_drift(steps, e2e_slo_ms=E2E_SLO_MS, ttft_slo_ms=500.0) is None  # 300 ms of a 500-ms bound
    assert not held_with_room(steps[0], e2e_slo_ms=E2E_SLO_MS, ttft_slo_ms=500.0)


def test_the_intervals_are_at_the_drift_level_not_the_verdicts() -> None:
    # 400 of 400 against 385 of 400: apart at 95 %, not at 99.9 %
    steps = [HELD, step(4.0, 2, offered=400, on_time=385)]

    assert find_drift(steps, e2e_slo_ms=E2E_SLO_MS, confidence=0.95) is not None
    assert find_drift(steps, e2e_slo_ms=E2E_SLO_MS) is None
    assert DRIFT_CONFIDENCE == 0.999


def test_a_disagreement_says_when_each_trial_ran_and_how_far_apart_they_are() -> None:
    earlier = replace(HELD, started_s=62.0)
    later = replace(step(4.0, 2, offered=400, on_time=300), started_s=240.0,
                    e2e_ms={"p50": 800.0, "p90": 3000.0, "p99": 9000.0})  # fmt: skip

    drift = find_drift([earlier, step(8.0), later], e2e_slo_ms=E2E_SLO_MS)

    assert drift is not None
    (pair,) = drift.disagreements
    assert (pair.earlier.started_s, pair.later.started_s) == (62.0, 240.0)
    assert (pair.earlier.trial, pair.later.trial) == (1, 2)
    assert pair.slower is pair.later
    assert pair.share_change == pytest.approx(-0.25)
    assert pair.median_e2e_change_ms == pytest.approx(300.0)
    assert pair.later.interval == wilson(300, 400, confidence=DRIFT_CONFIDENCE)
    assert not pair.recheck


def test_of_several_disagreeing_pairs_at_a_rate_the_farthest_apart_is_kept() -> None:
    steps = [HELD, step(4.0, 2, offered=400, on_time=360), step(4.0, 3, offered=400, on_time=250)]

    drift = find_drift(steps, e2e_slo_ms=E2E_SLO_MS)

    assert drift is not None
    (pair,) = drift.disagreements
    assert (pair.earlier.trial, pair.later.trial) == (1, 3)


def test_a_recheck_that_disagrees_with_the_first_reading_is_drift_naming_both() -> None:
    first = replace(step(2.0, 1, offered=40), started_s=0.0)
    recheck = replace(step(2.0, 2, offered=40, on_time=10), started_s=300.0, recheck=True)
    steps = [first, step(4.0), step(8.0, on_time=100), recheck]

    result = result_of(steps)

    assert result.target_drift is not None
    (pair,) = result.target_drift.disagreements
    assert pair.recheck
    assert pair.later.recheck
    assert not pair.earlier.recheck
    assert (pair.earlier.step_index, pair.later.step_index) == (0, 3)
    assert result.verdict.startswith(
        "the target's speed drifted during the sweep (2 req/s: 100.0 % on time at 0 s, 25.0 % at 300 s in the "
        "end-of-sweep recheck): its usable capacity is its slowest period's, each of these rates judged on its "
        "slower trial; "
    )


def test_a_recheck_that_agrees_is_no_drift() -> None:
    steps = [
        step(2.0, 1, offered=40),
        step(4.0),
        step(8.0, on_time=100),
        replace(step(2.0, 2, offered=40), recheck=True),
    ]

    result = result_of(steps)

    assert result.target_drift is None
    assert not result.verdict.startswith("the target's speed drifted")
    assert result.usable_rps == 4.0


def test_the_usable_capacity_is_the_slowest_periods_not_the_pooled_one() -> None:
    # 4 req/s held every one of 3,000 requests, then 98.3 %: pooled (99.2 %) it passes on its point estimate
    steps = [step(2.0, offered=2000), step(4.0, 1, offered=3000), step(4.0, 2, offered=3000, on_time=2950),
             step(8.0, offered=2000, on_time=1000, p99_e2e_ms=9000.0)]  # fmt: skip
    pooled = {r.rate: r for r in settle_all(steps, target=0.99)}
    assert pooled[4.0].verdict is StepVerdict.GOOD

    result = result_of(steps)

    assert result.target_drift is not None
    assert result.target_drift.rates == (4.0,)
    drifted = next(r for r in result.rates if r.rate == 4.0)
    assert (drifted.verdict, drifted.slowest_trial) == (StepVerdict.BAD, 2)
    assert drifted.judged.attainment == pytest.approx(2950 / 3000)
    assert result.usable_rps == 2.0
    assert result.first_bad_rps == 4.0
    assert "attainment fell to 98.3 % at 4 req/s" in result.verdict  # the slower trial's, not the pooled 99.2 %


def test_a_drifting_rate_whose_slower_trial_still_holds_is_sized_on_that_trial() -> None:
    steps = [step(2.0, offered=2000), step(4.0, 1, offered=20_000), step(4.0, 2, offered=20_000, on_time=19_900),
             step(8.0, offered=2000, on_time=1000, p99_e2e_ms=9000.0)]  # fmt: skip

    result = result_of(steps)

    assert result.target_drift is not None
    assert result.usable_rps == 4.0
    assert result.usable_interval == wilson(19_900, 20_000)
    assert "size for 4 req/s (attainment 99.5 %" in result.verdict


def test_poisson_trials_are_compared_on_their_luck_corrected_counts() -> None:
    # The second trial's 100 misses are all the luck of its draw: the reference queue, fed the same arrivals,
    # missed them too where its long-run share is none.
    def reading(missed: int) -> ReferenceReading:
        return ReferenceReading(service_s=0.3, busy_s=0.3, budget_s=1.0, queued=0, overlapped=0, requests=400,
                                missed=missed, reference_late=missed, both=missed, expected_share=0.0)  # fmt: skip

    steps = [
        replace(HELD, reference=reading(0)),
        replace(step(4.0, 2, offered=400, on_time=300), reference=reading(100)),
    ]
    luck = LuckCorrection(slope=1.0, correlation=1.0, events=100, steps=2, reason="fits")

    assert find_drift(steps, e2e_slo_ms=E2E_SLO_MS) is not None
    assert find_drift(steps, e2e_slo_ms=E2E_SLO_MS, luck=luck) is None


def test_the_drift_reads_back_from_the_result_document_and_older_documents_have_none() -> None:
    steps = [step(2.0, offered=2000), replace(step(4.0, 1, offered=3000), started_s=20.0),
             replace(step(4.0, 2, offered=3000, on_time=2950), started_s=40.0),
             step(8.0, offered=2000, on_time=1000, p99_e2e_ms=9000.0)]  # fmt: skip
    result = result_of(steps)
    data = json.loads(json.dumps(result.to_dict()))

    assert data["target_drift"]["rates"] == [4.0]
    (pair,) = data["target_drift"]["disagreements"]
    assert [t["started_s"] for t in pair["trials"]] == [20.0, 40.0]
    assert pair["share_change"] == pytest.approx(-50 / 3000)
    assert CapacityResult.from_dict(data) == result
    assert TargetDrift.from_dict(data["target_drift"]) == result.target_drift
    older = {k: v for k, v in data.items() if k != "target_drift"}
    older["rates"] = [{k: v for k, v in r.items() if k != "slowest"} for r in data["rates"]]
    assert CapacityResult.from_dict(older).target_drift is None
