"""How a prompt of N tokens is made N tokens: where the count comes from, and the calibration fit.

``request.prompt_tokens`` means tokens as the server counts them. cliffwatch builds prompts from words, so
each run says how words became tokens (``PromptSizing.source``, the result's ``prompt_tokens_source``):

- ``tokenizer``: a Hugging Face tokenizer given by ``request.tokenizer: PATH`` counts every prompt exactly;
- ``server``: with ``request.tokenizer: server``, the target's own ``/tokenize`` finds, for each length the
  plan draws, the word count the server counts as that length;
- ``calibrated``: a preflight of probe requests read the server's ``usage.prompt_tokens`` for prompts of
  known word counts and fitted ``tokens ≈ a + b × words`` (:func:`fit_calibration`); prompts are sized by it;
- ``words``: one word is one token. True of the built-in target (it counts words), and the fallback for a
  real target whose answers carry no usage to calibrate from, which the run's notes then say.

Every result then holds the intended count against what the server reported (``PromptErrors``), so a
sizing that is off shows, whatever its source.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# Word counts of the calibration probes: spread over two orders of magnitude so the intercept (a chat
# template's tokens) and the slope (tokens per word) are both well determined.
PROBE_WORDS = (8, 32, 128, 512)


class PromptSource(StrEnum):
    TOKENIZER = "tokenizer"
    SERVER = "server"  # request.tokenizer: server, lengths fitted with the target's /tokenize
    CALIBRATED = "calibrated"
    WORDS = "words"


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """``tokens ≈ intercept + slope × words``, fitted on ``samples`` (words, server tokens) probes; its own
    error is the largest relative miss of the fit on them."""

    intercept: float
    slope: float
    samples: tuple[tuple[int, int], ...]
    max_error: float

    def words_for(self, tokens: int) -> int:
        """The word count whose prompt the server should count as ``tokens`` (at least 1)."""
        return max(1, round((tokens - self.intercept) / self.slope))

    def to_dict(self) -> dict[str, Any]:
        return {
            "intercept": round(self.intercept, 3),
            "slope": round(self.slope, 4),
            "samples": [list(s) for s in self.samples],
            "max_error": round(self.max_error, 4),
        }


def fit_calibration(samples: Sequence[tuple[int, int]]) -> Calibration | None:
    """Least squares over the probes; None with fewer than two distinct word counts or a slope that is not
    positive (a server whose count does not grow with the prompt cannot be sized by words)."""
    points = [(float(w), float(t)) for w, t in samples]
    if len({w for w, _ in points}) < 2:
        return None
    n = len(points)
    mean_w = math.fsum(w for w, _ in points) / n
    mean_t = math.fsum(t for _, t in points) / n
    spread = math.fsum((w - mean_w) ** 2 for w, _ in points)
    slope = math.fsum((w - mean_w) * (t - mean_t) for w, t in points) / spread
    if not slope > 0:
        return None
    intercept = mean_t - slope * mean_w
    worst = (
        max(abs(intercept + slope * w - t) / t for w, t in points if t > 0) if any(t > 0 for _, t in points) else 0.0
    )
    return Calibration(intercept=intercept, slope=slope, samples=tuple((int(w), int(t)) for w, t in points),
                       max_error=worst)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class PromptSizing:
    """How this run's prompts were sized; ``detail`` names the tokenizer or why calibration fell back."""

    source: PromptSource = PromptSource.WORDS
    calibration: Calibration | None = None
    detail: str | None = None
    probes: int = 0  # calibration requests sent to the target (each took a token of the attempt cap)
    # Why the sizing the run meant to have could not be had (a calibration that failed, a /tokenize that could
    # not be used): the prompts are then of sizes nobody measured, and the run says so (workload_mismatch).
    failure: str | None = None
    context_tokens: int | None = None  # one slot's context as the target reports it (/props, /v1/models)
    closed_loop: bool = False  # each answer's usage.prompt_tokens corrects the sizing (domain.workload.sizing_loop)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.value,
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "detail": self.detail,
            "probes": self.probes,
            "failure": self.failure,
            "context_tokens": self.context_tokens,
            "closed_loop": self.closed_loop,
        }


WORDS_SIZING = PromptSizing()
