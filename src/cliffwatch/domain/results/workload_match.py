"""Whether a run sent the workload its scenario asks for, as far as the server's own counts can tell.

A run's figures are about the prompts it sent. When those were not the sizes asked for (the server counted
them more than ``MAX_PROMPT_ERROR_PCT`` off on average, by ``usage.prompt_tokens``), or nobody could measure
them (a calibration or a ``tokenizer: server`` fit that failed, so they went out one word a token), the
figures describe another workload: a prefill of 1,900 tokens where 600 were asked queues very differently.
Such a run is flagged ``workload_mismatch`` with the reason and cannot pass, as a run whose generator could
not keep its schedule cannot (``generator_limited``).

The output side is reported, not judged: each phase says how far the successful answers fell short of their
``max_tokens`` (``output_shortfall``), since a model may end its answer early by design; a hollow or cut
answer is already an outcome of its own (``target.expect``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.results.run_metrics import PhaseStats, merge_phases
from cliffwatch.domain.workload.prompt_sizing import PromptSizing

MAX_PROMPT_ERROR_PCT = 10.0  # mean absolute, of the intended size, over every answer that carried a count


def workload_mismatch(sizing: PromptSizing, phases: Sequence[PhaseStats]) -> str | None:
    """Why the run's prompts are not the workload its scenario asks for, or None when nothing says so."""
    pooled = merge_phases(phases)
    if pooled is None or not pooled.prompt_error.count:
        return prompt_mismatch(sizing, answers=0, mean_abs_pct=0.0, mean_pct=0.0)
    errors = pooled.prompt_error
    return prompt_mismatch(sizing, answers=errors.count, mean_abs_pct=errors.total / errors.count,
                           mean_pct=pooled.prompt_error_signed / errors.count)  # fmt: skip


def prompt_mismatch(sizing: PromptSizing, *, answers: int, mean_abs_pct: float, mean_pct: float) -> str | None:
    """The rule, on the server's counts of ``answers`` prompts (mean absolute and signed error, in percent of the
    intended sizes): a run's phases pooled, or a sweep's steps."""
    if sizing.failure is not None:
        return (f"{sizing.failure}; the prompts went out one word a token and nobody measured them (request.tokenizer: "
                "PATH sizes them with the model's own tokenizer, without the server's help)")  # fmt: skip
    if not answers or mean_abs_pct <= MAX_PROMPT_ERROR_PCT:
        return None
    direction = "longer" if mean_pct > 0 else "shorter"
    return (f"the server counted the prompts {mean_abs_pct:.1f} % off the sizes asked (mean absolute, {answers:,} "
            f"answers; mostly {direction}), more than the {MAX_PROMPT_ERROR_PCT:g} % a run can vouch for")  # fmt: skip


def output_shortfall_summary(shortfall: Histogram) -> dict[str, Any] | None:
    """``output_shortfall`` of a phase: over the successful answers whose output was counted, the mean
    shortfall from ``max_tokens`` in percent, the share of answers that fell short, and the p99; None without
    such answers."""
    if not shortfall.count:
        return None
    p99 = shortfall.quantile(0.99)
    return {
        "answers": shortfall.count,
        "mean_pct": round(shortfall.total / shortfall.count, 3),
        "short_share": round((shortfall.count - shortfall.zero) / shortfall.count, 4),
        "p99_pct": None if p99 is None else round(p99, 3),
    }
