"""The run plan: every request a scenario sends, numbered, scheduled, shaped, and the same for the same seed."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from cliffwatch.domain.outcomes import NS_PER_S
from cliffwatch.domain.scenario.scenario import PhaseRole, Scenario, parse_scenario
from cliffwatch.domain.traffic.plan import iter_plan, phase_windows, planned_count


def _scenario(*phases: dict[str, Any], seed: int = 11, request: dict[str, Any] | None = None) -> Scenario:
    return parse_scenario(
        {
            "name": "plan-test",
            "seed": seed,
            "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
            "target": {
                "url": "http://127.0.0.1:8000",
                "request": request
                or {
                    "model": "m",
                    "prompt_tokens": {"dist": "uniform", "min": 10, "max": 20},
                    "max_tokens": {"dist": "choice", "values": [8, 64]},
                },
            },
            "phases": list(phases)
            or [
                {"name": "calm", "role": "baseline", "duration_s": 7.5, "arrival": {"process": "poisson", "rate": 8}},
                {"name": "burst", "role": "stress", "duration_s": 4.25, "arrival": {"process": "poisson", "rate": 40}},
                {"name": "after", "role": "recovery", "duration_s": 6, "arrival": {"process": "constant", "rate": 5}},
            ],
        }
    )


def _phase(name: str, role: str, duration_s: float, arrival: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "role": role, "duration_s": duration_s, "arrival": arrival}


def test_the_same_scenario_and_seed_give_the_same_plan() -> None:
    """Two walks of one scenario's plan are equal, request for request."""
    scenario = _scenario()
    assert list(iter_plan(scenario)) == list(iter_plan(scenario))
    assert list(iter_plan(scenario)) == list(iter_plan(_scenario()))


def test_a_different_seed_gives_a_different_plan() -> None:
    """The seed is what the plan's randomness comes from."""
    assert list(iter_plan(_scenario(seed=1))) != list(iter_plan(_scenario(seed=2)))


def test_interleaved_walks_of_the_plan_do_not_disturb_each_other() -> None:
    """Consuming two plans in lockstep gives each the same requests as consuming it alone."""
    scenario = _scenario()
    alone = list(iter_plan(scenario))
    first, second = iter_plan(scenario), iter_plan(scenario)
    pairs = list(zip(first, second, strict=True))
    assert [a for a, _ in pairs] == alone
    assert [b for _, b in pairs] == alone


def test_requests_are_numbered_from_zero_in_scheduled_order() -> None:
    """Ids run 0..n-1 and scheduled times never go backwards across the whole plan."""
    plan = list(iter_plan(_scenario()))
    assert [r.id for r in plan] == list(range(len(plan)))
    assert all(a.scheduled_ns <= b.scheduled_ns for a, b in itertools.pairwise(plan))
    assert planned_count(_scenario()) == len(plan)


def test_each_request_is_scheduled_inside_its_own_phase_window() -> None:
    """A request's phase index names the window its scheduled time falls in; phase indexes never go back."""
    scenario = _scenario()
    windows = phase_windows(scenario)
    plan = list(iter_plan(scenario))
    assert all(windows[r.phase].start_ns <= r.scheduled_ns < windows[r.phase].end_ns for r in plan)
    assert [r.phase for r in plan] == sorted(r.phase for r in plan)
    assert set(Counter(r.phase for r in plan)) == {0, 1, 2}


def test_constant_arrivals_are_scheduled_exactly() -> None:
    """A constant 4/s phase after a 1.5 s one is scheduled at 1.5 s, 1.75 s, 2 s, ... to its end."""
    scenario = _scenario(
        _phase("calm", "baseline", 1.5, {"process": "constant", "rate": 2}),
        _phase("burst", "stress", 1.0, {"process": "constant", "rate": 4}),
    )
    plan = list(iter_plan(scenario))
    assert [(r.phase, r.scheduled_ns) for r in plan] == [
        (0, 0),
        (0, 500_000_000),
        (0, 1_000_000_000),
        (1, 1_500_000_000),
        (1, 1_750_000_000),
        (1, 2_000_000_000),
        (1, 2_250_000_000),
    ]


def test_phase_windows_are_contiguous_and_cover_the_scenario() -> None:
    """Windows start at 0, each where the previous ended, and the last ends at the scenario's duration."""
    scenario = _scenario()
    windows = phase_windows(scenario)
    assert windows[0].start_ns == 0
    assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(windows))
    assert windows[-1].end_ns == round(scenario.duration_s * NS_PER_S)
    assert [(w.index, w.name, w.role) for w in windows] == [
        (0, "calm", PhaseRole.BASELINE),
        (1, "burst", PhaseRole.STRESS),
        (2, "after", PhaseRole.RECOVERY),
    ]
    assert [w.duration_s for w in windows] == [7.5, 4.25, 6.0]


@pytest.mark.parametrize("durations", [(0.1, 0.2, 0.3), (1 / 3, 1 / 3, 1 / 3), (0.7, 1e-3, 86_000.0)])
def test_phase_windows_stay_contiguous_with_awkward_durations(durations: tuple[float, ...]) -> None:
    """Floating-point durations never leave a gap or an overlap between windows."""
    roles = ("baseline", "stress", "recovery")
    scenario = _scenario(
        *(
            _phase(f"p{i}", role, d, {"process": "constant", "rate": 0.001})
            for i, (role, d) in enumerate(zip(roles, durations, strict=True))
        )
    )
    windows = phase_windows(scenario)
    assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(windows))
    assert all(w.end_ns > w.start_ns for w in windows)


def test_request_shapes_come_from_the_distributions() -> None:
    """Prompt lengths span the uniform range and max_tokens takes each choice, nothing else."""
    plan = list(iter_plan(_scenario()))
    prompts = {r.prompt_tokens for r in plan}
    assert prompts <= set(range(10, 21))
    assert len(prompts) > 5  # with hundreds of draws, far more than a handful of the 11 values appear
    assert {r.max_tokens for r in plan} == {8, 64}


def test_fixed_shapes_are_used_as_given() -> None:
    """Bare numbers for prompt_tokens and max_tokens give every request those sizes."""
    scenario = _scenario(request={"model": "m", "prompt_tokens": 33, "max_tokens": 7})
    assert {(r.prompt_tokens, r.max_tokens) for r in iter_plan(scenario)} == {(33, 7)}


def test_plain_http_requests_have_no_token_shapes() -> None:
    """An http target's requests carry zero prompt and max tokens."""
    http = parse_scenario(
        {
            "name": "http-plan",
            "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
            "target": {"url": "http://127.0.0.1:8000", "api": "http"},
            "phases": [_phase("calm", "baseline", 2, {"process": "constant", "rate": 3})],
        }
    )
    assert {(r.prompt_tokens, r.max_tokens) for r in iter_plan(http)} == {(0, 0)}


def test_request_shapes_do_not_depend_on_the_arrival_process() -> None:
    """Changing a phase's arrivals keeps the sequence of request shapes drawn for it."""

    def shapes(rate: float) -> list[tuple[int, int]]:
        scenario = _scenario(_phase("calm", "baseline", 10, {"process": "poisson", "rate": rate}))
        return [(r.prompt_tokens, r.max_tokens) for r in iter_plan(scenario)]

    slow, fast = shapes(3), shapes(9)
    assert len(slow) < len(fast)
    assert fast[: len(slow)] == slow


def test_phases_draw_from_their_own_random_streams() -> None:
    """Changing one phase leaves the other phases' offsets and shapes as they were."""

    def phase_two(first_rate: float) -> list[tuple[int, int, int]]:
        scenario = _scenario(
            _phase("calm", "baseline", 3, {"process": "poisson", "rate": first_rate}),
            _phase("burst", "stress", 3, {"process": "poisson", "rate": 10}),
        )
        start = phase_windows(scenario)[1].start_ns
        return [(r.scheduled_ns - start, r.prompt_tokens, r.max_tokens) for r in iter_plan(scenario) if r.phase == 1]

    assert phase_two(2) == phase_two(7)


def test_a_planned_request_builds_its_own_records() -> None:
    """A planned request's record carries its identity and a classified outcome; unsent, it says why."""
    from cliffwatch.domain.outcomes import Attempt, Outcome, Slo
    from cliffwatch.domain.traffic.plan import PlannedRequest

    request = PlannedRequest(id=4, phase=1, scheduled_ns=1_000_000_000, prompt_tokens=10, max_tokens=5)
    slo = Slo(e2e_ms=100.0, timeout_ms=200.0)
    fast = Attempt(number=1, sent_ns=1_000_000_000, end_ns=1_050_000_000)
    slow = Attempt(number=1, sent_ns=1_000_000_000, end_ns=1_150_000_000)
    assert request.record((fast,), slo=slo).outcome is Outcome.ON_TIME
    assert request.record((slow,), slo=slo).outcome is Outcome.LATE
    record = request.record((fast,), slo=slo, not_sent_reason="unused when attempts exist")
    assert (record.id, record.phase, record.scheduled_ns, record.not_sent_reason) == (4, 1, 1_000_000_000, None)
    unsent = request.not_sent("aborted: error rate")
    assert unsent.outcome is Outcome.NOT_SENT
    assert unsent.attempts == ()
    assert unsent.not_sent_reason == "aborted: error rate"
