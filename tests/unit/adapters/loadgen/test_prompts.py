"""Prompt text: exact lengths, a per-request opening, the same text for the same request, cheap at any length."""

from __future__ import annotations

import pickle

import pytest

from cliffwatch.adapters.loadgen.prompts import WORDS, prepare, prompt_bytes, prompt_text
from cliffwatch.adapters.loadgen.token_prompts import CalibratedPrompts
from cliffwatch.domain.workload.prompt_sizing import Calibration


@pytest.mark.parametrize("words", [0, 1, 2, 64, 4095, 4096, 4097, 20_000])
@pytest.mark.parametrize("request_id", [0, 1, 31, 12_345])
def test_a_prompt_has_exactly_the_words_asked_for_and_opens_with_its_request(request_id: int, words: int) -> None:
    """Every prompt has the requested number of words (at least the tag), the first naming its request,
    including lengths that wrap round the word sequence."""
    text = prompt_text(request_id, words)
    split = text.split(" ")
    assert len(split) == max(1, words)
    assert split[0] == f"req-{request_id}"
    assert all(split)


def test_the_same_request_always_gets_the_same_prompt_and_others_differ_beyond_the_tag() -> None:
    """Prompts are deterministic per request, and the words after the tag vary between requests."""
    assert prompt_text(7, 100) == prompt_text(7, 100)
    bodies = {prompt_text(i, 50).split(" ", 1)[1] for i in range(20)}
    assert len(bodies) == 20


def _reference(request_id: int, words: int) -> str:
    """The prompt as it was first defined: the words joined one by one from the cycle (slow, but plain)."""
    from cliffwatch.adapters.loadgen.prompts import _CYCLE_LENGTH, VOCABULARY, _cycle

    cycle = _cycle(VOCABULARY)
    start = (request_id * 131) % _CYCLE_LENGTH
    rest = [cycle[(start + i) % _CYCLE_LENGTH] for i in range(max(0, words - 1))]
    return " ".join([f"req-{request_id}", *rest])


@pytest.mark.parametrize("words", [0, 1, 2, 3, 4095, 4096, 4097, 8193, 50_000])
@pytest.mark.parametrize("request_id", [0, 1, 31, 4095, 12_345, 2**40])
def test_a_prompt_is_the_word_cycle_from_its_requests_offset_however_long(request_id: int, words: int) -> None:
    """Prompts made from the prepared text are exactly the words of the cycle from the request's offset,
    wrapping round it as often as the length needs."""
    assert prompt_text(request_id, words) == _reference(request_id, words)


def test_prepared_text_serves_every_length_up_to_what_was_prepared() -> None:
    prepare(10_000)
    assert prompt_bytes(4095, 10_000).decode() == _reference(4095, 10_000)


def test_prompts_of_another_vocabulary_use_only_its_words() -> None:
    """Token-exact prompts keep to the words a tokenizer counts as one token each (token_prompts.py)."""
    from cliffwatch.adapters.loadgen.prompts import WordPrompts

    few = WordPrompts(("alpha", "beta", "gamma"))
    text = b"".join(few.fragments(7, 5000)).decode()
    assert text.split()[0] == "req-7"
    assert set(text.split()[1:]) == {"alpha", "beta", "gamma"}
    assert len(text.split()) == 5000
    assert bytes(few.filler(7, 3)).decode().split() == text.split()[1:4]


def test_word_prompts_travel_to_a_worker_process_as_their_vocabulary_and_make_the_same_text() -> None:
    """A generator worker gets the coordinator's prompt sources pickled: the words come out identical, long
    stretches included (the copy grows its own buffer)."""
    calibrated = CalibratedPrompts(Calibration(intercept=7.0, slope=1.3, samples=((8, 17),), max_error=0.1), WORDS)
    copy = pickle.loads(pickle.dumps(calibrated))
    for request_id, tokens in ((0, 1), (5, 40), (77, 3_000)):
        assert b"".join(copy.fragments(request_id, tokens)) == b"".join(calibrated.fragments(request_id, tokens))
    assert len(pickle.dumps(WORDS)) < 2_000  # the vocabulary, not the grown text
