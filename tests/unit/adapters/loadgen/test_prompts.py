"""Prompt text: exact lengths, a per-request opening, the same text for the same request."""

from __future__ import annotations

import pytest

from cliffwatch.adapters.loadgen.prompts import prompt_text


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
