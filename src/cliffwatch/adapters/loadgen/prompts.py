"""Prompt text of a chosen length in words, different for every request.

Each prompt opens with the request's own id so servers with prefix caching cannot serve one request's
prefill from another's; the rest cycles a fixed vocabulary from a request-dependent offset.
"""

from __future__ import annotations

_VOCABULARY = (
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "while", "seven", "bright", "stars",
    "watch", "a", "quiet", "river", "flow", "under", "old", "stone", "bridges", "near", "green", "hills",
    "where", "farmers", "plant", "wheat", "and", "barley", "each", "spring", "before", "summer", "storms",
    "roll", "across", "wide", "open", "plains", "carrying", "rain", "toward", "distant", "mountain", "villages",
)  # fmt: skip
_CYCLE_LENGTH = 4096
# A fixed, non-repeating-looking word sequence long enough that slicing it is cheap for any prompt.
_WORDS = tuple(_VOCABULARY[(i * 7 + i // len(_VOCABULARY)) % len(_VOCABULARY)] for i in range(_CYCLE_LENGTH))


def prompt_text(request_id: int, words: int) -> str:
    """A prompt of exactly ``words`` whitespace-separated words (at least one: the request's tag)."""
    start = (request_id * 131) % _CYCLE_LENGTH
    remaining = max(0, words - 1)
    parts = [f"req-{request_id}"]
    # Tuple slices, wrapping round the sequence: walking a cycle up to ``start`` cost thousands of steps.
    while remaining:
        piece = _WORDS[start : start + remaining]
        parts.extend(piece)
        remaining -= len(piece)
        start = 0
    return " ".join(parts)
