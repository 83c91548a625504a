"""What "normal" means for a run, the mark the score holds its stress and recovery to: the pooled baseline
without each baseline's unsettled last ``e2e_ms``, or the ideal when there was no baseline traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S, Outcome, Slo
from cliffwatch.domain.results.run_metrics import RunMetrics, merge_phases
from cliffwatch.domain.scenario.scenario import PhaseRole


@dataclass(frozen=True, kw_only=True)
class _Reference:
    """What "normal" means for this run: the pooled baseline, or the ideal when there was no baseline traffic."""

    ratio: float  # on-time ratio to compare with: the baseline's, or 1.0
    p99_ms: float | None  # the baseline's p99 e2e; None without baseline traffic
    offered: int
    on_time: int
    measured: bool  # False: no baseline traffic, the ideal stands in

    @property
    def name(self) -> str:
        return "the baseline" if self.measured else "the ideal (no baseline traffic)"

    def evidence(self) -> dict[str, float | int | str | None]:
        return {
            "baseline_offered": self.offered,
            "baseline_on_time": self.on_time,
            "baseline_ratio": self.ratio if self.measured else None,
            "reference_ratio": self.ratio,
        }


def _reference(metrics: RunMetrics, slo: Slo) -> _Reference:
    """The pooled baseline, without the requests of each baseline's last ``e2e_ms``.

    Those requests may still be running when the next phase changes conditions (a toxic goes on, a burst
    queues ahead of them), so they describe the change, not the normal. A baseline too short to keep any
    whole second is used whole.
    """
    baselines = metrics.by_role(PhaseRole.BASELINE)
    pooled = merge_phases(baselines)
    if pooled is None or pooled.offered == 0:
        return _Reference(ratio=1.0, p99_ms=None, offered=0, on_time=0, measured=False)
    offered = on_time = 0
    e2e = Histogram()
    for phase in baselines:
        first = math.ceil(phase.window.start_ns / NS_PER_S)
        settled_end = (phase.window.end_ns - slo.e2e_ms * NS_PER_MS) / NS_PER_S
        for second in metrics.seconds:
            if first <= second.t and second.t + 1 <= settled_end:
                offered += second.offered
                on_time += second.outcomes[Outcome.ON_TIME]
                e2e.merge(second.e2e)
    if offered == 0:
        offered, on_time, e2e = pooled.offered, pooled.on_time, pooled.latency["e2e"]
    return _Reference(
        ratio=on_time / offered, p99_ms=e2e.quantile(0.99), offered=offered, on_time=on_time, measured=True
    )
