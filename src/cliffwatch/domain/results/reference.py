"""What "normal" means for a run, the mark the score holds its stress and recovery to: the pooled baseline
without its spill-over (``spill_over``), or the ideal when there was no baseline traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cliffwatch.domain.results.run_metrics import RunMetrics, merge_phases
from cliffwatch.domain.results.spill_over import SPILL_OVER_TEXT, SpillOver
from cliffwatch.domain.scenario.scenario import PhaseRole


@dataclass(frozen=True, kw_only=True)
class _Reference:
    """What "normal" means for this run: the pooled baseline, or the ideal when there was no baseline traffic."""

    ratio: float  # on-time ratio to compare with: the baseline's, or 1.0
    p99_ms: float | None  # the baseline's p99 e2e; None without baseline traffic
    offered: int
    on_time: int
    measured: bool  # False: no baseline traffic, the ideal stands in
    spill_over: Mapping[SpillOver, int] = field(default_factory=dict)  # baseline requests left out, by why
    whole: bool = False  # every baseline request was spill-over, so the whole baseline stands in

    @property
    def name(self) -> str:
        return "the baseline" if self.measured else "the ideal (no baseline traffic)"

    def left_out(self) -> str | None:
        """The sentence saying how many baseline requests were left out of the reference and why; None when
        none was."""
        total = sum(self.spill_over.values())
        if total == 0:
            return None
        parts = [f"{count:,} {SPILL_OVER_TEXT[why]}" for why, count in self.spill_over.items() if count]
        noun = "request" if total == 1 else "requests"
        if self.whole:
            return (f"Every one of the {total:,} baseline {noun} was spill-over ({', '.join(parts)}), so the "
                    "whole baseline stands in as the reference")  # fmt: skip
        if len(parts) == 1:
            why = next(SPILL_OVER_TEXT[w] for w, c in self.spill_over.items() if c)
            return f"{total:,} baseline {noun} {why} {'was' if total == 1 else 'were'} left out of the reference"
        return f"{total:,} baseline {noun} were left out of the reference as spill-over: {', '.join(parts)}"

    def evidence(self) -> dict[str, float | int | str | None]:
        return {
            "baseline_offered": self.offered,
            "baseline_on_time": self.on_time,
            "baseline_ratio": self.ratio if self.measured else None,
            "reference_ratio": self.ratio,
            "baseline_spill_over": sum(self.spill_over.values()),
            "baseline_spill_over_reason": self.left_out(),
        }


def _reference(metrics: RunMetrics) -> _Reference:
    """The pooled baseline without its spill-over: the requests no fault and no next phase reached.

    Metrics not counted by an aggregator (``metrics.reference`` None) use the whole baseline; so does a run in
    which every baseline request was spill-over, and the evidence says so.
    """
    pooled = merge_phases(metrics.by_role(PhaseRole.BASELINE))
    if pooled is None or pooled.offered == 0:
        return _Reference(ratio=1.0, p99_ms=None, offered=0, on_time=0, measured=False)
    kept = metrics.reference
    spill_over = {} if kept is None else {why: kept.spill_over[why] for why in SpillOver if kept.spill_over[why]}
    if kept is None or kept.offered == 0:
        return _Reference(ratio=pooled.on_time / pooled.offered, p99_ms=pooled.latency["e2e"].quantile(0.99),
                          offered=pooled.offered, on_time=pooled.on_time, measured=True, spill_over=spill_over,
                          whole=bool(spill_over))  # fmt: skip
    return _Reference(ratio=kept.on_time / kept.offered, p99_ms=kept.e2e.quantile(0.99), offered=kept.offered,
                      on_time=kept.on_time, measured=True, spill_over=spill_over)  # fmt: skip
