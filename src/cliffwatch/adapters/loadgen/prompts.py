"""Prompt text of a chosen length in words, different for every request, cheap to make at any length.

Each prompt opens with the request's own id so servers with prefix caching cannot serve one request's
prefill from another's; the rest cycles a fixed vocabulary from a request-dependent offset. The words are
plain ASCII with nothing JSON must escape, so a prompt's bytes are also its JSON string's content: a body
is assembled from them by copying, never by encoding (``bodies.py``).

Making a prompt is one slice of a text prepared ahead (the word cycle repeated, grown to the longest prompt
asked for so far, at most the hard limit's ~6 MB) and one copy, so its cost is a memory copy of its length:
about a millisecond for the largest prompt validation allows (1,000,000 words), where joining the words one
by one cost tens. ``fragments`` hands out the pieces without even that copy, for a body to join once.
"""

from __future__ import annotations

import itertools
from typing import Any

_VOCABULARY = (
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "while", "seven", "bright", "stars",
    "watch", "a", "quiet", "river", "flow", "under", "old", "stone", "bridges", "near", "green", "hills",
    "where", "farmers", "plant", "wheat", "and", "barley", "each", "spring", "before", "summer", "storms",
    "roll", "across", "wide", "open", "plains", "carrying", "rain", "toward", "distant", "mountain", "villages",
)  # fmt: skip
_CYCLE_LENGTH = 4096


def _cycle(vocabulary: tuple[str, ...]) -> tuple[str, ...]:
    """A fixed, non-repeating-looking word sequence; the prompt after the tag is a stretch of it, repeated."""
    return tuple(vocabulary[(i * 7 + i // len(vocabulary)) % len(vocabulary)] for i in range(_CYCLE_LENGTH))


class WordPrompts:
    """Prompts of a chosen number of words from ``vocabulary`` (ASCII words nothing in JSON must escape).

    The word cycle is held repeated, grown (by doubling) to the longest stretch asked for, never shrunk.
    ``tag_width``: the request id's digits in the tag, zero-padded to at least that many. Prompts sized by
    the server's counts use it: most tokenizers split digits by their number (one a digit in SentencePiece
    vocabularies, groups of three in Llama 3's), so every request's tag is then as many tokens as the
    probes' were, where ``req-7`` and ``req-123456`` would differ by up to five. ``same_words``: every
    request's words are the same stretch (after its own tag), so a prompt of N words is as many tokens for
    every request as it was for the probes; under a tokenizer that splits words into several tokens, two
    stretches of N words differ by more than a token. The tag first still keeps a prefix cache from serving
    one request's prompt from another's.
    """

    def __init__(
        self, vocabulary: tuple[str, ...] = _VOCABULARY, *, tag_width: int = 0, same_words: bool = False
    ) -> None:
        self._vocabulary = vocabulary
        self.tag_width = tag_width
        self.same_words = same_words
        words = _cycle(vocabulary)
        self._unit = (" ".join(words) + " ").encode("ascii")  # one cycle, each word followed by its space
        self._offsets = tuple(itertools.accumulate((len(w) + 1 for w in words[:-1]), initial=0))  # word i's first byte
        self.cycles = 1
        self.text = self._unit
        self.view = memoryview(self.text)

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to a generator worker as its vocabulary: the text is made again from it, word for word.
        return (_remade, (self._vocabulary, self.tag_width, self.same_words))

    def prepare(self, words: int) -> None:
        """Holds any stretch of ``words`` words from then on (with room for its start in the first cycle), so
        that no request pays for growing it."""
        needed = (words + _CYCLE_LENGTH) // _CYCLE_LENGTH + 1
        if needed > self.cycles:
            self.cycles = max(needed, 2 * self.cycles)
            self.text = self._unit * self.cycles
            self.view = memoryview(self.text)

    def stretch(self, start: int, words: int) -> memoryview:
        """Words ``start`` (< one cycle) to ``start + words`` of the sequence, spaces between, no copy."""
        end = start + words
        if end // _CYCLE_LENGTH + 1 > self.cycles:
            self.prepare(words)
        last = (end // _CYCLE_LENGTH) * len(self._unit) + self._offsets[end % _CYCLE_LENGTH]
        return self.view[self._offsets[start] : last - 1]  # without the space after the last word

    def fragments(self, request_id: int, words: int) -> tuple[bytes | memoryview, ...]:
        """The prompt of exactly ``words`` whitespace-separated words (at least one: the request's tag) as
        pieces to be joined (ASCII, nothing to escape in JSON); the pieces share a buffer prepared ahead."""
        tag = b"req-%0*d" % (self.tag_width, request_id)
        rest = max(0, words - 1)
        if not rest:
            return (tag,)
        return tag, b" ", self.stretch(0 if self.same_words else (request_id * 131) % _CYCLE_LENGTH, rest)

    def filler(self, request_id: int, words: int) -> memoryview:
        """``words`` words of the cycle for this request, without its tag (at least one)."""
        return self.stretch((request_id * 131) % _CYCLE_LENGTH, max(1, words))


def _remade(vocabulary: tuple[str, ...], tag_width: int, same_words: bool) -> WordPrompts:
    return WordPrompts(vocabulary, tag_width=tag_width, same_words=same_words)


VOCABULARY = _VOCABULARY
WORDS = WordPrompts()
TAG_WIDTH = 10  # every run's request ids, a sweep's rounds included (2**28 apart), fit in ten digits
# Prompts sized by the server's counts (calibrated, /tokenize): every request as many tokens as the probes
SIZED_WORDS = WordPrompts(tag_width=TAG_WIDTH, same_words=True)


def prepare(words: int) -> None:
    """Prepares the default word prompts for up to ``words`` words ahead (before a run)."""
    WORDS.prepare(words)


def fragments(request_id: int, words: int) -> tuple[bytes | memoryview, ...]:
    return WORDS.fragments(request_id, words)


def prompt_bytes(request_id: int, words: int) -> bytes:
    return b"".join(fragments(request_id, words))


def prompt_text(request_id: int, words: int) -> str:
    """A prompt of exactly ``words`` whitespace-separated words (at least one: the request's tag)."""
    return prompt_bytes(request_id, words).decode("ascii")
