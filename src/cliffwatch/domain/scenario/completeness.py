"""What counts as a whole answer: the scenario's ``target.expect``, and the judgement of one answer against it.

An HTTP 200 is not an answer. A server that is out of slots may end a stream early with ``[DONE]`` and no
``finish_reason`` (the role chunk and nothing else), abort a request (vLLM's ``finish_reason: "abort"``),
or send a body without choices. Such an attempt is *incomplete*: a failure class of its own
(``FailureKind.INCOMPLETE``, outcome ``incomplete``), never on time, with the reason kept on the attempt.

The reader of the wire format (``adapters.loadgen.openai_stream``) finds the structural cases (no
``finish_reason``, error events in a stream, no choices); :func:`shortfall` then holds what was received
against the expectation: the finish reason, the least output, and with ``exact_output`` (or vLLM's
``ignore_eos`` in ``extra_body``) the whole of ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cliffwatch.domain.validation import Reader, short_repr

# vLLM's finish reasons are stop, length, abort, error and repetition (``FINISH_REASON_STRINGS`` in
# vllm/v1/engine/__init__.py); SGLang also sends "abort". The last two of vLLM's that are not an answer:
NOT_AN_ANSWER = frozenset({"abort", "error"})
MAX_FINISH_REASONS = 32


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """What a successful answer must show. ``finish_reasons`` None: any real one (not in ``NOT_AN_ANSWER``)."""

    finish_reasons: frozenset[str] | None = None
    min_output_tokens: int = 1
    exact_output: bool = False  # an answer shorter than the request's max_tokens is incomplete


DEFAULT_EXPECTATION = Expectation()


def parse_expectation(reader: Reader | None, *, extra_body: Mapping[str, Any] | None) -> Expectation | None:
    """``target.expect``; None when it has a problem (recorded). ``ignore_eos: true`` in ``extra_body`` makes
    ``exact_output`` the default, since the server was told to generate every one of ``max_tokens``."""
    ignore_eos = extra_body is not None and extra_body.get("ignore_eos") is True
    if reader is None:
        return Expectation(exact_output=ignore_eos)
    reasons: list[str] = []
    bad = False
    if reader.has("finish_reasons"):
        for path, item in reader.items("finish_reasons", nonempty=True):
            if not isinstance(item, str) or not item.strip():
                reader.problems.add(path, f"must be a non-empty string, got {short_repr(item)}")
                bad = True
            else:
                reasons.append(item)
        if reasons and len(reasons) > MAX_FINISH_REASONS:
            reader.error("finish_reasons", f"must list at most {MAX_FINISH_REASONS} reasons")
            bad = True
        if not reasons:
            bad = True
    least = reader.number("min_output_tokens", 1, ge=0, le=1_000_000, integer=True)
    exact = reader.boolean("exact_output", ignore_eos)
    reader.done()
    if bad or least is None or exact is None:
        return None
    return Expectation(
        finish_reasons=frozenset(reasons) if reasons else None, min_output_tokens=least, exact_output=exact
    )


def shortfall(
    expectation: Expectation, *, finish_reason: str | None, output_tokens: int, max_tokens: int
) -> str | None:
    """Why an answer that ended properly is still not a whole one; None when it is.

    ``finish_reason`` None means the answer carried none; ``output_tokens`` is the best count there is (the
    server's usage, else the token chunks or words received)."""
    if finish_reason is None:
        return "incomplete: no finish_reason"
    allowed = expectation.finish_reasons
    if allowed is None and finish_reason in NOT_AN_ANSWER:
        return f"incomplete: finish_reason {finish_reason!r}"
    if allowed is not None and finish_reason not in allowed:
        return f"incomplete: finish_reason {finish_reason!r}, expected {' or '.join(map(repr, sorted(allowed)))}"
    if output_tokens < expectation.min_output_tokens:
        return f"incomplete: {output_tokens} output tokens, expected at least {expectation.min_output_tokens}"
    if expectation.exact_output and output_tokens < max_tokens:
        return f"incomplete: {output_tokens} of {max_tokens} output tokens (exact_output)"
    return None
