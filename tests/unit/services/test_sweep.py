"""SweepService on in-memory step runners: the order of steps, variants, progress, stopping mid-step."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from cliffwatch.domain.capacity.capacity import StepStats, StepVerdict
from cliffwatch.domain.capacity.sweep_spec import SweepSpec, parse_sweep_spec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.services.memory import CollectingObserver
from cliffwatch.services.memory_sweep import model_runners
from cliffwatch.services.sweep import SweepOutcome, SweepService, describe_variant

SCENARIO = parse_scenario(
    {
        "name": "sweepme",
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 4000, "timeout_ms": 8000},
        "client": {"retry": {"policy": "immediate", "max_retries": 2}},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson", "rate": 1}}],
    }
)


class Steps:
    """A ``SweepObserver`` recording what it was told."""

    def __init__(self) -> None:
        self.started: list[tuple[str, float, int]] = []
        self.finished: list[tuple[str, float, StepVerdict]] = []
        self.started_event = asyncio.Event()

    def step_started(self, variant: str, rate: float, trial: int) -> None:
        self.started.append((variant, rate, trial))
        self.started_event.set()

    async def wait_started(self, count: int) -> None:
        while len(self.started) < count:
            self.started_event.clear()
            await self.started_event.wait()

    def step_finished(self, variant: str, step: StepStats, verdict: StepVerdict) -> None:
        self.finished.append((variant, step.rate, verdict))


def spec(**overrides: object) -> SweepSpec:
    return parse_sweep_spec({"start": 1, "stop": 16, "coarse_steps": 4, **overrides})


def service(
    sweep: SweepSpec, capacities: dict[str, float], *, scenario: Scenario = SCENARIO, **options: float
) -> tuple[SweepService, dict[str, object], Steps, CollectingObserver]:
    runner_for, runners = model_runners(capacities, **options)
    steps = Steps()
    observer = CollectingObserver()
    return (
        SweepService(scenario=scenario, spec=sweep, runner_for=runner_for, observer=observer, sweep_observer=steps),
        runners,  # type: ignore[return-value]
        steps,
        observer,
    )


async def test_a_sweep_brackets_the_capacity_of_the_target() -> None:
    svc, _, steps, _ = service(spec(), {"as-written": 7.0})
    [report] = await svc.run()
    result = report.result
    assert result.usable_rps is not None
    assert result.first_bad_rps is not None
    assert result.usable_rps <= 7.0 < result.first_bad_rps
    assert (result.first_bad_rps - result.usable_rps) / result.first_bad_rps <= 0.05
    assert [rate for _, rate, _ in steps.started][:2] == [1.0, 6.0]  # the coarse pass: 1, 6, 11, 16
    assert len(steps.started) == len(steps.finished) == len(result.steps)


async def test_a_rate_whose_queue_grows_inside_its_step_is_measured_again_longer_and_found_unsustainable() -> None:
    """Up to 13 req/s every request of a 20-s step is on time although the target serves only 10: the queue
    grows too slowly to break the SLO within a step. Each such rate is re-measured over the extended window,
    where it still grows, so it is bad: the usable capacity is the true 10, not 13."""
    svc, runners, _, _ = service(spec(start=1, stop=16, extend_s=60), {"as-written": 10.0}, hidden_above=13.0)
    [report] = await svc.run()
    result = report.result
    assert result.usable_rps is not None
    assert 9.5 <= result.usable_rps <= 10.3  # a queue growing by less than 3 % is within the check's resolution
    extended = runners["as-written"].extended  # type: ignore[attr-defined]
    assert extended
    assert all(10.0 < rate <= 13.0 for rate, _ in extended)
    assert all(s.duration_s == 60.0 for s in result.steps if s.extended)
    assert result.evidence["signal"] == "queue_growth"
    assert any(r.on_growth for r in result.rates)


async def test_without_the_growth_check_a_slowly_growing_queue_passes_as_the_slo_alone_sees_it() -> None:
    svc, runners, _, _ = service(spec(start=1, stop=16, growth_check=False), {"as-written": 10.0}, hidden_above=13.0)
    [report] = await svc.run()
    assert report.result.usable_rps is not None
    assert report.result.usable_rps > 12.0
    assert not runners["as-written"].extended  # type: ignore[attr-defined]


async def test_every_variant_is_swept_in_order_with_its_policy_described() -> None:
    capacities = {"none": 8.0, "immediate:3": 4.0}
    svc, _, steps, _ = service(spec(variants=["none", "immediate:3"]), capacities)
    reports = await svc.run()
    assert [r.variant for r in reports] == ["none", "immediate:3"]
    assert reports[0].policy_description != reports[1].policy_description
    usable = [r.result.usable_rps for r in reports]
    assert usable[0] is not None
    assert usable[1] is not None
    assert usable[1] < usable[0]
    variants_in_order = [variant for variant, _, _ in steps.started]
    assert variants_in_order == sorted(variants_in_order, key=["none", "immediate:3"].index)


def test_as_written_is_described_by_the_scenarios_own_policy() -> None:
    assert describe_variant(SCENARIO, "as-written") == SCENARIO.client.retry.describe()
    assert describe_variant(SCENARIO, "none") != SCENARIO.client.retry.describe()


async def test_the_step_observer_hears_the_settled_verdict_of_each_rate() -> None:
    svc, _, steps, _ = service(spec(), {"as-written": 7.0})
    await svc.run()
    verdicts = {rate: verdict for _, rate, verdict in steps.finished}
    assert verdicts[1.0] is StepVerdict.GOOD
    assert verdicts[11.0] is StepVerdict.BAD
    repeated = [rate for _, rate, trial in steps.started if trial == 2]
    assert repeated, "this target needs repeats near its capacity"
    first_verdicts = [v for (_, rate, v), (_, _, trial) in zip(steps.finished, steps.started, strict=True)
                      if rate == repeated[0] and trial == 1]  # fmt: skip
    assert first_verdicts == [StepVerdict.UNSURE]  # measured again: not settled yet


async def test_an_interrupt_mid_step_discards_that_step_and_keeps_the_others() -> None:
    svc, runners, steps, _ = service(spec(), {"as-written": 7.0}, step_delay_s=0.2)
    task = asyncio.create_task(svc.run())
    await asyncio.wait_for(steps.wait_started(2), 5)
    svc.interrupt()
    [report] = await asyncio.wait_for(task, 5)
    assert [s.rate for s in report.result.steps] == [1.0]  # the step at 6 was cut short: not counted
    assert report.result.finished_because.startswith("interrupted")
    assert runners["as-written"].stops == [("sweep interrupted", False)]  # type: ignore[attr-defined]
    assert svc.interrupted


async def test_an_abort_stops_the_sweep_before_the_next_variant() -> None:
    svc, runners, steps, _ = service(
        spec(variants=["none", "immediate:3"]), {"none": 7.0, "immediate:3": 7.0}, step_delay_s=0.1
    )
    task = asyncio.create_task(svc.run())
    await asyncio.wait_for(steps.wait_started(1), 5)
    svc.abort("emergency stop")
    reports = await asyncio.wait_for(task, 5)
    assert reports == []  # nothing was measured before the abort
    assert svc.abort_reason == "emergency stop"
    assert list(runners) == ["none"]
    assert runners["none"].stops == [("aborted: emergency stop", True)]  # type: ignore[attr-defined]


async def test_a_generator_limited_rate_is_a_ceiling_the_search_never_exceeds() -> None:
    svc, _, steps, _ = service(spec(), {"as-written": 100.0}, generator_limit=6.0)
    [report] = await svc.run()
    assert max(rate for _, rate, _ in steps.started) <= 6.0
    assert report.result.first_bad_rps is None or report.result.first_bad_rps < 6.0
    assert "generator" in report.result.finished_because


def test_the_outcome_document_carries_every_variant_and_the_spec() -> None:
    svc, _, _, _ = service(spec(), {"as-written": 7.0})
    reports = asyncio.run(svc.run())
    at = datetime(2026, 1, 1, tzinfo=UTC)
    outcome = SweepOutcome(
        sweep_id="abc",
        scenario=SCENARIO,
        spec=svc.spec,
        status=RunStatus.SUCCEEDED,
        reason=None,
        reports=tuple(reports),
        started_at=at,
        finished_at=at.replace(minute=3),
        target_url="http://127.0.0.1:9",
    )
    document = outcome.to_dict()
    assert document["kind"] == "sweep"
    assert document["format"] == 1
    assert document["duration_s"] == 180.0
    assert document["spec"] == svc.spec.to_dict()
    assert document["usable_rps"] == outcome.usable_rps == reports[0].result.usable_rps
    [variant] = document["variants"]
    assert variant["variant"] == "as-written"
    assert variant["retry"] == SCENARIO.client.retry.describe()
    assert len(variant["result"]["steps"]) == len(reports[0].result.steps)


@pytest.mark.parametrize("mode", ["rate", "concurrency"])
async def test_the_unit_follows_the_mode(mode: str) -> None:
    svc, _, _, _ = service(spec(mode=mode), {"as-written": 7.0})
    [report] = await svc.run()
    assert report.result.unit == ("clients" if mode == "concurrency" else "req/s")


async def test_the_scenarios_slo_bounds_judge_the_crossing() -> None:
    with_ttft = parse_scenario(
        {
            "name": "ttft",
            "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
            "slo": {"e2e_ms": 4000, "ttft_ms": 750, "timeout_ms": 8000},
            "phases": [
                {"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson", "rate": 1}}
            ],
        }
    )
    svc, _, _, _ = service(spec(), {"as-written": 7.0}, scenario=with_ttft)
    [report] = await svc.run()
    assert (report.result.evidence["e2e_slo_ms"], report.result.evidence["ttft_slo_ms"]) == (4000, 750)
