"""The built-in target's parameters: defaults, the throughput they imply, and their validation."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import pytest

from cliffwatch.domain.errors import TargetConfigInvalid
from cliffwatch.domain.scenario.target_model import Admission, TargetModel, target_model_from
from cliffwatch.simulator.batching import BatchCore
from cliffwatch.simulator.sequences import EngineRequest, Result

# A worked example: decode steps of 10 ms + 2 ms per sequence, prefill of 5 ms + 0.01 ms per prompt token.
EXAMPLE = TargetModel(max_batch=8, decode_base_ms=10, decode_per_seq_ms=2, prefill_base_ms=5, prefill_per_token_ms=0.01)


def test_the_defaults_are_a_valid_configuration() -> None:
    assert target_model_from({}) == TargetModel()


def test_the_defaults_round_trip_through_their_dict_form() -> None:
    as_dict = TargetModel().to_dict()

    assert as_dict["admission"] == "none"
    assert target_model_from(as_dict) == TargetModel()


@pytest.mark.parametrize(("batch", "step_ms"), [(0, 10), (1, 12), (8, 26)])
def test_a_decode_step_takes_the_base_plus_the_per_sequence_cost(batch: int, step_ms: float) -> None:
    assert EXAMPLE.step_ms(batch) == step_ms


@pytest.mark.parametrize(("prompt_tokens", "prefill_ms"), [(0, 5), (1000, 15), (32_000, 325)])
def test_prefill_takes_the_base_plus_the_per_token_cost(prompt_tokens: int, prefill_ms: float) -> None:
    assert EXAMPLE.prefill_ms(prompt_tokens) == pytest.approx(prefill_ms)


def test_peak_token_rate_is_a_full_batch_per_full_batch_step() -> None:
    # 8 tokens every 26 ms
    assert EXAMPLE.peak_tokens_per_s() == pytest.approx(8 * 1000 / 26)


def test_saturation_rate_accounts_for_decode_share_and_prefill_per_request() -> None:
    # 100 output tokens in batches of 8: 100 × 26 / 8 = 325 ms of decode per request; prefill of 1000 tokens 15 ms
    assert EXAMPLE.saturation_rps(1000, 100) == pytest.approx(1000 / (325 + 15))


def test_saturation_rate_rounds_a_mean_prompt_length_to_whole_tokens() -> None:
    assert EXAMPLE.saturation_rps(999.6, 100) == EXAMPLE.saturation_rps(1000, 100)


def test_a_bigger_batch_raises_the_token_ceiling_but_slows_each_sequence() -> None:
    small, large = TargetModel(max_batch=4), TargetModel(max_batch=64)

    assert large.peak_tokens_per_s() > small.peak_tokens_per_s()
    assert large.step_ms(large.max_batch) > small.step_ms(small.max_batch)


def test_overrides_replace_only_the_fields_they_name() -> None:
    model = target_model_from({"max_batch": 32, "admission": "deadline", "max_queue_wait_ms": 500, "seed": 9})

    assert model == TargetModel(max_batch=32, admission=Admission.DEADLINE, max_queue_wait_ms=500, seed=9)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"max_batch": 0}, ["max_batch: must be >= 1"]),
        ({"max_batch": 4097}, ["max_batch: must be <= 4096"]),
        ({"max_batch": 2.5}, ["max_batch: must be a whole number, got 2.5"]),
        ({"decode_base_ms": 0}, ["decode_base_ms: must be > 0"]),
        ({"step_jitter": 0.95}, ["step_jitter: must be <= 0.9"]),
        ({"admission": "drop"}, ["admission: must be one of none, queue_limit, deadline; got 'drop'"]),
        ({"model": ""}, ["model: must not be empty"]),
        ({"seed": -1}, ["seed: must be >= 0"]),
        ({"max_queue_wait_ms": None}, ["max_queue_wait_ms: must be a number, got null"]),
        ({"batch": 8}, ["batch: unknown key"]),
        (
            {"max_batch": 0, "admission": "drop", "prefill_per_token_ms": -1, "bogus": True},
            [
                "max_batch: must be >= 1",
                "prefill_per_token_ms: must be >= 0",
                "admission: must be one of none, queue_limit, deadline; got 'drop'",
                "bogus: unknown key",
            ],
        ),
    ],
)
def test_invalid_overrides_raise_listing_every_bad_field(overrides: dict[str, Any], expected: list[str]) -> None:
    with pytest.raises(TargetConfigInvalid) as caught:
        target_model_from(overrides)

    assert [str(p) for p in caught.value.problems] == expected
    assert str(caught.value) == "invalid target configuration: " + "; ".join(expected)


# --- The capacity model (docs/capacity-model.md), checked by hand and against the simulator's own scheduler.

# SLO-bound: the e2e SLO is reached well below saturation (the truth test's configuration).
SLO_BOUND = TargetModel(max_batch=64, decode_base_ms=20, decode_per_seq_ms=4, prefill_base_ms=2, prefill_per_token_ms=0)


def test_the_mean_step_of_a_busy_engine_is_the_base_stretched_by_the_work_each_request_adds() -> None:
    # k = prefill 6 ms + 2 ms × 20 tokens = 46 ms of work per request; at 10 req/s 46 % of each second
    assert EXAMPLE.mean_step_ms(10, 100, 20) == pytest.approx(10 / (1 - 10 * 46 / 1000))


def test_at_low_rates_each_step_holds_one_sequence_and_its_share_of_the_prefill() -> None:
    # A request every second: the engine idles between them, each step is step(1) plus 6 ms / 20 tokens
    assert EXAMPLE.mean_step_ms(1, 100, 20) == pytest.approx(12 + 6 / 20)
    assert EXAMPLE.mean_batch(1, 100, 20) == 1
    assert EXAMPLE.e2e_ms(1, 100, 20) == EXAMPLE.lone_request_ms(100, 20) == pytest.approx(6 + 20 * 12)


def test_the_mean_batch_follows_littles_law_and_stays_full_beyond_saturation() -> None:
    assert EXAMPLE.mean_batch(10, 100, 20) == pytest.approx(10 * 20 * EXAMPLE.mean_step_ms(10, 100, 20) / 1000)
    saturation = EXAMPLE.saturation_rps(100, 20)
    assert EXAMPLE.mean_batch(saturation, 100, 20) == pytest.approx(EXAMPLE.max_batch)
    assert EXAMPLE.mean_batch(2 * saturation, 100, 20) == EXAMPLE.max_batch
    assert EXAMPLE.mean_step_ms(2 * saturation, 100, 20) == pytest.approx(EXAMPLE.mean_step_ms(saturation, 100, 20))
    assert EXAMPLE.mean_batch(0, 100, 20) == 0


def test_the_saturation_rate_is_where_the_busy_engines_batch_fills() -> None:
    # Two derivations of the same ceiling: work per second, and Little's law with a full batch.
    saturation = EXAMPLE.saturation_rps(100, 20)
    assert saturation * 20 * EXAMPLE.mean_step_ms(saturation, 100, 20) / 1000 == pytest.approx(EXAMPLE.max_batch)


def test_e2e_latency_is_half_a_step_of_waiting_plus_one_step_per_token_and_unbounded_beyond_saturation() -> None:
    assert EXAMPLE.e2e_ms(10, 100, 20) == pytest.approx(20.5 * EXAMPLE.mean_step_ms(10, 100, 20))
    saturation = EXAMPLE.saturation_rps(100, 20)
    assert EXAMPLE.e2e_ms(saturation, 100, 20) < 1000
    assert EXAMPLE.e2e_ms(saturation * 1.001, 100, 20) == float("inf")


def test_the_tail_latency_is_a_whole_step_of_waiting_plus_one_step_per_token() -> None:
    assert EXAMPLE.e2e_tail_ms(10, 100, 20) == pytest.approx(21 * EXAMPLE.mean_step_ms(10, 100, 20))
    assert EXAMPLE.e2e_tail_ms(1, 100, 20) == EXAMPLE.lone_request_ms(100, 20)
    assert EXAMPLE.e2e_tail_ms(EXAMPLE.saturation_rps(100, 20) * 1.001, 100, 20) == float("inf")


def test_usable_capacity_is_where_the_modelled_tail_latency_reaches_the_slo() -> None:
    # (10 + 1) × 20 ms = 220 ms unloaded; k = 2 + 4 × 10 = 42 ms; 1000 × (1 − 220/400) / 42 = 10.71 req/s
    usable = SLO_BOUND.usable_rps(0, 10, 400)

    assert usable == pytest.approx(1000 * (1 - 220 / 400) / 42)
    assert usable < SLO_BOUND.saturation_rps(0, 10)
    assert SLO_BOUND.e2e_tail_ms(usable, 0, 10) == pytest.approx(400)
    assert SLO_BOUND.e2e_tail_ms(usable * 1.01, 0, 10) > 400


def test_usable_capacity_is_the_saturation_rate_when_the_slo_is_loose() -> None:
    assert EXAMPLE.usable_rps(100, 20, 10_000) == EXAMPLE.saturation_rps(100, 20)


def test_no_rate_is_usable_when_a_lone_request_misses_the_slo() -> None:
    # a lone request takes 6 + 20 × 12 = 246 ms
    assert EXAMPLE.usable_rps(100, 20, 245.9) == 0
    assert EXAMPLE.usable_rps(100, 20, 246.1) > 0


def test_no_rate_is_usable_when_the_slo_leaves_less_than_a_step_of_slack() -> None:
    # Steps of a fixed 20 ms: a lone request takes 400 ms, but one arriving just after a step began
    # takes 420 ms at any rate, so an SLO between the two is met or missed by arrival phase alone.
    fixed_steps = TargetModel(decode_base_ms=20, decode_per_seq_ms=0, prefill_base_ms=0, prefill_per_token_ms=0)

    assert fixed_steps.usable_rps(0, 20, 410) == 0
    assert fixed_steps.usable_rps(0, 20, 421) == fixed_steps.saturation_rps(0, 20)


@dataclass(frozen=True, kw_only=True)
class Simulated:
    mean_step_ms: float
    mean_batch: float
    mean_e2e_ms: float
    p99_e2e_ms: float


def simulate(model: TargetModel, rate: float, prompt_tokens: int, output_tokens: int) -> Simulated:
    """Constant arrivals at ``rate`` through the simulator's scheduler (``BatchCore``), on a made-up clock.

    The loop is ``Engine._steps`` without asyncio: each step starts when the last one ended, an idle engine
    starts at the next arrival, and requests arriving during a step are queued at their own times. Only the
    steady part is measured: from 10 s until 5 s before the arrivals stop (the queue drains after that).
    """
    core = BatchCore(model)
    duration_s, first_s, last_s = 45.0, 10.0, 40.0
    arrivals = [i / rate for i in range(int(duration_s * rate))]
    requests: list[EngineRequest] = []
    steps: list[tuple[float, int]] = []
    now, index = 0.0, 0
    while index < len(arrivals) or core.has_work:
        if not core.has_work:
            now = max(now, arrivals[index])
        while index < len(arrivals) and arrivals[index] <= now:
            requests.append(core.submit(prompt_tokens=prompt_tokens, max_tokens=output_tokens, now=arrivals[index]))
            index += 1
        step = core.begin_step(now)
        end = now + step.duration_s
        core.end_step(end)
        if first_s <= now < last_s:
            steps.append((step.duration_s * 1000, step.batch))
        now = end
    e2e = sorted(
        (r.ended_at - r.arrived_at) * 1000
        for r in requests
        if first_s <= r.arrived_at < last_s and r.ended_at is not None and r.result is Result.COMPLETED
    )
    return Simulated(
        mean_step_ms=statistics.fmean(ms for ms, _ in steps),
        mean_batch=statistics.fmean(batch for _, batch in steps),
        mean_e2e_ms=statistics.fmean(e2e),
        p99_e2e_ms=e2e[math.ceil(0.99 * len(e2e)) - 1],
    )


CONFIGURATIONS = [
    pytest.param(EXAMPLE, 100, 20, id="example"),
    pytest.param(SLO_BOUND, 0, 10, id="slo-bound"),
    pytest.param(TargetModel(), 160, 64, id="defaults"),
]


@pytest.mark.parametrize(("model", "prompt_tokens", "output_tokens"), CONFIGURATIONS)
# Up to 0.9: nearer saturation the busy formula's 1/(1 − λk) is so steep that 30 simulated seconds do not settle.
@pytest.mark.parametrize("load", [0.1, 0.3, 0.6, 0.9])
def test_the_model_matches_the_simulators_scheduler_up_to_saturation(
    model: TargetModel, prompt_tokens: int, output_tokens: int, load: float
) -> None:
    rate = load * model.saturation_rps(prompt_tokens, output_tokens)
    simulated = simulate(model, rate, prompt_tokens, output_tokens)

    assert model.mean_step_ms(rate, prompt_tokens, output_tokens) == pytest.approx(simulated.mean_step_ms, rel=0.01)
    assert model.mean_batch(rate, prompt_tokens, output_tokens) == pytest.approx(simulated.mean_batch, rel=0.01)
    assert model.e2e_ms(rate, prompt_tokens, output_tokens) == pytest.approx(simulated.mean_e2e_ms, rel=0.03)
    assert model.e2e_tail_ms(rate, prompt_tokens, output_tokens) == pytest.approx(simulated.p99_e2e_ms, rel=0.02)


def test_beyond_saturation_the_queue_grows_and_latency_with_it() -> None:
    saturation = EXAMPLE.saturation_rps(100, 20)
    simulated = simulate(EXAMPLE, 1.05 * saturation, 100, 20)

    assert simulated.mean_batch == pytest.approx(EXAMPLE.max_batch)
    assert simulated.p99_e2e_ms > 3 * EXAMPLE.e2e_ms(saturation, 100, 20)


@pytest.mark.parametrize(
    ("model", "prompt_tokens", "output_tokens", "slo_ms"),
    [
        pytest.param(SLO_BOUND, 0, 10, 400, id="slo-bound"),
        pytest.param(EXAMPLE, 100, 20, 450, id="slo-bound-small-batch"),
        pytest.param(EXAMPLE, 100, 20, 700, id="saturation-bound"),
        pytest.param(TargetModel(), 160, 64, 2500, id="defaults"),
    ],
)
def test_usable_capacity_is_within_3_percent_of_the_highest_rate_whose_simulated_p99_meets_the_slo(
    model: TargetModel, prompt_tokens: int, output_tokens: int, slo_ms: float
) -> None:
    modelled = model.usable_rps(prompt_tokens, output_tokens, slo_ms)
    good, bad = 0.5 * modelled, 1.2 * modelled
    assert simulate(model, good, prompt_tokens, output_tokens).p99_e2e_ms <= slo_ms
    assert simulate(model, bad, prompt_tokens, output_tokens).p99_e2e_ms > slo_ms
    while (bad - good) / bad > 0.005:
        middle = (good + bad) / 2
        if simulate(model, middle, prompt_tokens, output_tokens).p99_e2e_ms <= slo_ms:
            good = middle
        else:
            bad = middle

    assert modelled == pytest.approx(good, rel=0.03)
