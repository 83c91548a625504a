"""SizingLoop: each answer's own count corrects how the next prompts are sized."""

from __future__ import annotations

import pytest

from cliffwatch.domain.workload.prompt_sizing import Calibration
from cliffwatch.domain.workload.sizing_loop import MAX_PENDING, SizingLoop


def line(intercept: float, slope: float) -> Calibration:
    return Calibration(intercept=intercept, slope=slope, samples=(), max_error=0.0)


def server(words: int) -> int:
    """A server that counts 12 template tokens and 1.5 tokens a word."""
    return round(12 + 1.5 * words)


def test_one_length_corrects_the_offset_and_keeps_the_slope() -> None:
    loop = SizingLoop(line(0.0, 1.5))  # the probes missed the template's 12 tokens
    first = loop.aim(1, 64)
    assert first == (43, 0)  # 64 / 1.5: the prompt the uncorrected line makes, 76 tokens by the server
    loop.observe(1, server(first[0]))
    words, _ = loop.aim(2, 64)
    assert server(words) == pytest.approx(64, abs=1)
    assert loop.describe()["slope"] == 1.5


def test_answers_of_prompts_sized_before_a_correction_do_not_correct_it_twice() -> None:
    loop = SizingLoop(line(0.0, 1.5))
    in_flight = [(key, loop.aim(key, 64)[0]) for key in range(10)]  # all sent before any answer
    for key, words in in_flight:
        loop.observe(key, server(words))
    words, _ = loop.aim(99, 64)
    assert server(words) == pytest.approx(64, abs=1)  # not over-corrected tenfold


def test_spread_lengths_refit_the_slope() -> None:
    loop = SizingLoop(line(0.0, 1.0))  # both wrong
    for key, tokens in enumerate(range(40, 600, 20)):
        loop.observe(key, server(loop.aim(key, tokens)[0]))
    assert loop.describe()["slope"] == pytest.approx(1.5, abs=0.02)
    for tokens in (50, 300, 590):
        assert server(loop.words_for(tokens)) == pytest.approx(tokens, abs=1)


def test_a_table_hits_its_lengths_with_pads_and_shifts_by_the_answers_mean_miss() -> None:
    table = {64: (30, 2, 64), 57: (26, 1, 57)}  # tokens -> (words, pads, /tokenize's count)
    loop = SizingLoop(line(10.0, 1.8), table)
    assert loop.aim(1, 64) == (30, 2)
    loop.observe(1, 71)  # the server counts 7 more than /tokenize did (a template it did not see)
    assert loop.offset == 7.0
    assert loop.aim(2, 64) == (26, 1)  # aims at 57 by the table


def test_an_answer_without_a_sent_prompt_or_a_count_teaches_nothing() -> None:
    loop = SizingLoop(line(5.0, 2.0))
    loop.observe(7, 100)  # never aimed: a prefix's or another run's
    loop.aim(8, 64)
    loop.observe(8, 0)  # no count
    assert loop.answers == 0


def test_predictions_waiting_for_answers_are_bounded() -> None:
    loop = SizingLoop(line(0.0, 1.0))
    for key in range(MAX_PENDING + 10):
        loop.aim(key, 32)
    loop.observe(0, 40)  # the oldest were forgotten
    assert loop.answers == 0
    loop.observe(MAX_PENDING + 9, 40)
    assert loop.answers == 1
