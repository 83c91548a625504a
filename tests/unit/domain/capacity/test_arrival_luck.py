"""The arrival-luck correction: a reference slot fed a step's arrivals, fitted on the sweep, applied per rate."""

from __future__ import annotations

import heapq
import random
from dataclasses import replace

import pytest
from capacity_kit import step

from cliffwatch.domain.capacity.arrival_luck import (
    BUSY_TOLERANCE,
    LuckCorrection,
    ReferenceReading,
    ReferenceSlot,
    WindowRequest,
    busy_per_request,
    fit,
    read_reference,
)
from cliffwatch.domain.capacity.capacity import CapacitySearch, SearchConfig, StepStats, pool_rates, summarize
from cliffwatch.domain.capacity.queueing import md1_usable_rate, md1_wait_cdf
from cliffwatch.domain.capacity.sweep_spec import SweepSpec

SERVICE_S = 0.32
TARGET = 0.99


def served(rate: float, seed: str, *, service_s: float = SERVICE_S, slots: int = 1, slo_s: float,
           warmup_s: float = 4.0, window_s: float = 10.0) -> list[WindowRequest]:  # fmt: skip
    """A step of Poisson arrivals at a FIFO server of ``slots`` slots, each request served in ``service_s``."""
    rng = random.Random(seed)
    at, free, requests = 0.0, [0.0] * slots, []
    while (at := at + rng.expovariate(rate)) < warmup_s + window_s:
        start = max(at, heapq.heappop(free))
        heapq.heappush(free, start + service_s)
        requests.append(WindowRequest(at, start + service_s, at >= warmup_s, start + service_s - at <= slo_s))
    return requests


def as_step(rate: float, trial: int, requests: list[WindowRequest], reading: ReferenceReading | None) -> StepStats:
    measured = [r for r in requests if r.measured]
    return replace(step(rate, trial, offered=len(measured), on_time=sum(r.on_time for r in measured),
                        duration_s=10.0), reference=reading)  # fmt: skip


def reading(**changes: float | None) -> ReferenceReading:
    values: dict[str, float | None] = {"service_s": 0.32, "busy_s": 0.32, "budget_s": 1.28, "queued": 20,
                                       "overlapped": 0, "requests": 100, "missed": 3, "reference_late": 3, "both": 3,
                                       "expected_share": 0.01}  # fmt: skip
    values.update(changes)
    return ReferenceReading(**values)  # type: ignore[arg-type]


def test_busy_time_per_request_is_a_single_slots_service_time_at_any_load_and_less_when_requests_overlap() -> None:
    for rate in (0.5, 2.0, 3.0, 5.0):  # 5/s is far past the slot's 3.1/s: it is busy all the time
        requests = served(rate, f"busy{rate}", slo_s=100.0)
        assert busy_per_request(requests) == pytest.approx(SERVICE_S)
    overlapping = served(5.0, "overlap", slots=4, service_s=1.28, slo_s=100.0)
    assert busy_per_request(overlapping) < 0.5 * 1.28
    assert busy_per_request([WindowRequest(1.0, None, True, False)]) is None


def test_one_exact_slot_is_late_exactly_when_its_reference_is_and_the_expected_share_is_the_md1_tail() -> None:
    requests = served(2.2, "exact", slo_s=5 * SERVICE_S)
    found = read_reference(requests, rate=2.2, e2e_slo_s=5 * SERVICE_S)
    assert found is not None
    assert found.missed > 0  # this draw queued: the comparison below is not of two zeros
    assert found.reference_late == found.missed == found.both
    assert found.requests == sum(r.measured for r in requests)
    assert found.expected_share == pytest.approx(1 - md1_wait_cdf(4 * SERVICE_S, rate=2.2, service_s=SERVICE_S))


def test_where_the_reference_has_no_long_run_share_the_reading_keeps_what_the_fit_checks() -> None:
    requests = served(2.0, "none", slo_s=5 * SERVICE_S)
    saturated = read_reference(requests, rate=3.5, e2e_slo_s=1.6)
    assert saturated is not None
    assert saturated.expected_share == 1.0  # at or above its saturation the reference's queue grows without end
    unknown = read_reference(requests, rate=2.0, e2e_slo_s=60 * SERVICE_S)  # a budget of over MAX_SERVICES
    assert unknown is not None
    assert unknown.expected_share is None
    assert unknown.luck is None
    assert unknown.busy_s == pytest.approx(SERVICE_S)  # still checked by the fit
    assert read_reference(requests, rate=2.0, e2e_slo_s=0.2) is None  # an SLO under one service time
    assert read_reference([r._replace(measured=False) for r in requests], rate=2.0, e2e_slo_s=1.6) is None


def test_requests_served_beside_one_another_are_told_from_requests_served_after_one_another() -> None:
    one = read_reference(served(2.5, "q", slo_s=100.0), rate=2.5, e2e_slo_s=100.0)
    several = read_reference(served(2.5, "q", slots=4, slo_s=100.0), rate=2.5, e2e_slo_s=100.0, service_s=SERVICE_S)
    assert one is not None
    assert several is not None
    assert one.queued > 5
    assert one.overlapped == 0  # each ended a whole service time after the one it waited for
    assert several.queued > 5
    assert several.overlapped > several.queued / 2  # most ended sooner: served beside it


def test_the_slot_keeps_the_first_steps_service_time_for_the_whole_sweep() -> None:
    slot = ReferenceSlot()
    first = slot.read(served(1.0, "a", slo_s=1.6), rate=1.0, e2e_slo_s=1.6)
    later = slot.read(served(2.0, "b", slots=4, service_s=1.28, slo_s=1.6), rate=2.0, e2e_slo_s=1.6)
    assert first is not None
    assert later is not None
    assert first.service_s == later.service_s == pytest.approx(SERVICE_S)
    assert later.busy_s != pytest.approx(later.service_s, rel=BUSY_TOLERANCE)


def test_a_reference_that_matches_the_server_is_fitted_with_slope_one() -> None:
    readings = [reading(requests=40, missed=4, reference_late=4, both=4), reading(missed=2, reference_late=2, both=2),
                reading(missed=5, reference_late=5, both=5)]  # fmt: skip
    assert not fit(readings).one_sided
    luck = fit(readings)
    assert luck.applied
    assert luck.slope == pytest.approx(1.0)
    assert luck.correlation == pytest.approx(1.0)
    assert "fits the steps (correlation 1.00, slope 1.00, 11 late requests)" in luck.reason


def test_the_correction_is_refused_when_the_server_is_not_one_queue_or_does_not_follow_the_reference() -> None:
    matching = [reading(missed=6, reference_late=6, both=6), reading(missed=5, reference_late=5, both=5)]
    drifting = fit([*matching, reading(busy_s=0.2, missed=0, reference_late=0, both=0)])
    assert not drifting.applied
    assert drifting.reason.startswith("not one queue: the busy time per request ranged 200–320")
    beside = fit([*matching, reading(queued=30, overlapped=12)])
    assert not beside.applied
    assert beside.reason.startswith("not one queue: 12 of 70 requests that arrived while another was in hand")
    unseen = fit([reading(queued=2, missed=6, reference_late=6, both=6), reading(queued=2)])
    assert not unseen.applied
    assert unseen.reason.startswith("not yet seen queueing")
    apart = fit([reading(missed=6, reference_late=6, both=0), reading(missed=5, reference_late=5, both=0)])
    assert not apart.applied
    assert "does not follow" in apart.reason
    assert not fit([]).applied


def test_a_rates_missed_requests_are_corrected_by_the_luck_of_every_trial() -> None:
    luck = LuckCorrection(slope=1.0, correlation=1.0, events=20, steps=2, reason="")
    lucky = reading(missed=0, reference_late=0, both=0, expected_share=0.02)  # two late requests short of its share
    unlucky = reading(missed=7, reference_late=7, both=7, expected_share=0.02)
    assert luck.corrected_missed([lucky]) == pytest.approx(2.0)
    assert luck.corrected_missed([lucky, unlucky]) == pytest.approx(4.0)
    assert luck.corrected_missed([unlucky]) == pytest.approx(2.0)  # five of its seven were the draw's
    assert luck.corrected_missed([lucky, None]) is None  # a trial without a reading cannot be corrected
    assert luck.corrected_missed([reading(expected_share=None)]) is None  # nor one without a long-run share
    assert replace(luck, slope=None).corrected_missed([lucky]) is None
    charged_only = replace(luck, one_sided=True)  # too few late requests to fit: luck charged, never credited
    assert charged_only.corrected_missed([lucky]) == pytest.approx(2.0)
    assert charged_only.corrected_missed([unlucky]) == pytest.approx(7.0)


def test_one_queue_with_too_few_late_requests_to_fit_is_corrected_one_sided() -> None:
    luck = fit([reading(missed=2, reference_late=2, both=2), reading(missed=1, reference_late=1, both=1)])
    assert luck.applied
    assert luck.one_sided
    assert luck.slope == 1.0
    assert luck.reason.startswith("too few late requests to fit on (3 < 10): a lucky draw is charged")
    assert LuckCorrection.from_dict(luck.to_dict()) == luck


def test_a_step_carries_its_reading_to_its_document_and_back_and_refuses_one_of_other_requests() -> None:
    counted = step(2.0, offered=20, on_time=19)
    stepped = replace(counted, reference=reading(requests=20, missed=1, reference_late=0, both=0))
    assert StepStats.from_dict(stepped.to_dict()) == stepped
    assert ReferenceReading.from_dict(reading(expected_share=None).to_dict()) == reading(expected_share=None)
    with pytest.raises(ValueError, match="the reference reading counts 21 requests"):
        replace(counted, reference=reading(requests=21, missed=1, reference_late=0, both=0))


def test_a_lucky_rate_is_judged_on_its_corrected_attainment_and_says_so() -> None:
    luck = LuckCorrection(slope=1.0, correlation=0.95, events=30, steps=1, reason="fits")
    lucky = reading(requests=1000, missed=0, reference_late=0, both=0, expected_share=0.03)
    clean = replace(step(2.0, offered=1000, on_time=1000), reference=lucky)
    (counted,) = pool_rates([clean], target=TARGET)
    (corrected,) = pool_rates([clean], target=TARGET, luck=luck)
    assert counted.verdict.value == "good"
    assert counted.corrected_on_time is None
    assert corrected.corrected_on_time == pytest.approx(970.0)
    assert corrected.judged_attainment == pytest.approx(0.97)
    assert corrected.verdict.value == "bad"
    assert corrected.to_dict()["corrected_attainment"] == pytest.approx(0.97)


def sweep(*, slots: int, service_s: float, slo_factor: float, seed: int, luck: bool) -> tuple[float | None, bool]:
    """A default auto sweep over simulated Poisson steps: the usable rate found and whether it was corrected."""
    spec = SweepSpec(auto=True)
    search = CapacitySearch(SearchConfig.from_spec(spec))
    slot = ReferenceSlot()
    slo_s = slo_factor * service_s
    while (asked := search.next_rate()) is not None:
        window = spec.extended_s if asked.extended else spec.step_s
        requests = served(asked.rate, f"{seed}:{asked.rate}:{asked.trial}", service_s=service_s, slots=slots,
                          slo_s=slo_s, warmup_s=spec.warmup_s, window_s=window)  # fmt: skip
        found = slot.read(requests, rate=asked.rate, e2e_slo_s=slo_s) if luck else None
        search.record(replace(as_step(asked.rate, asked.trial, requests, found), extended=asked.extended))
    result = summarize(search.steps, target=TARGET, e2e_slo_ms=slo_s * 1000, finished_because="")
    return result.usable_rps, result.luck is not None and result.luck.applied


def test_a_default_sweep_of_one_slot_under_poisson_arrivals_lands_near_the_md1_truth_only_when_corrected() -> None:
    truth = md1_usable_rate(service_s=SERVICE_S, slo_s=5 * SERVICE_S, attainment=TARGET)
    corrected = [sweep(slots=1, service_s=SERVICE_S, slo_factor=5, seed=seed, luck=True) for seed in range(6)]
    counted = [sweep(slots=1, service_s=SERVICE_S, slo_factor=5, seed=seed, luck=False) for seed in range(6)]
    assert sum(applied for _, applied in corrected) >= 5  # one sweep saw too few late requests to fit on
    assert all(abs((usable or 0) / truth - 1) <= 0.10 for usable, _ in corrected)
    assert sum(abs((usable or 0) / truth - 1) <= 0.10 for usable, _ in counted) <= 3


def test_a_batching_server_is_not_corrected_and_its_sweep_is_unchanged() -> None:
    for seed in range(3):
        corrected = sweep(slots=16, service_s=2.0, slo_factor=5, seed=seed, luck=True)
        assert corrected == (sweep(slots=16, service_s=2.0, slo_factor=5, seed=seed, luck=False)[0], False)
