"""The built-in target's parameters: defaults, the throughput they imply, and their validation."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.errors import TargetConfigInvalid
from cliffwatch.domain.target_model import Admission, TargetModel, target_model_from

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
