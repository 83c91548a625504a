"""What the server's own series say about a run's stress, in numbers and in one clause of a sentence.

The hidden-overload flag quotes it ("the server's waiting queue grew from 0 to 183 …"): the client sees
tokens and latencies, the server's queue shows why. The baseline level is the mean over the baseline
phases (the queue a healthy target keeps), the stress level the highest reading during stress.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cliffwatch.domain.outcomes import NS_PER_S
from cliffwatch.domain.scenario.metrics_spec import Signal
from cliffwatch.domain.scenario.scenario import PhaseRole
from cliffwatch.domain.server.server_view import ServerView, WindowStats, window_stats
from cliffwatch.domain.traffic.plan import PhaseWindow

Evidence = dict[str, float | int | str | None]


@dataclass(frozen=True, kw_only=True)
class StressView:
    """A signal over the baseline and the stress windows."""

    signal: Signal
    expr: str
    baseline: WindowStats | None
    stress: WindowStats | None


def stress_views(server: ServerView, windows: Sequence[PhaseWindow]) -> dict[Signal, StressView]:
    """Each signal the server view carries, over the baseline and the stress phases pooled."""
    views: dict[Signal, StressView] = {}
    for series in server.series:
        if series.signal is None:
            continue
        pooled: dict[PhaseRole, list[tuple[float, float]]] = {PhaseRole.BASELINE: [], PhaseRole.STRESS: []}
        for window in windows:
            if window.role not in pooled:
                continue
            start, end = window.start_ns / NS_PER_S, window.end_ns / NS_PER_S
            pooled[window.role] += [(t, v) for t, v in zip(server.times_s, series.values, strict=True)
                                    if v is not None and start <= t < end]  # fmt: skip
        views[series.signal] = StressView(signal=series.signal, expr=series.expr,
                                          baseline=window_stats(pooled[PhaseRole.BASELINE]),
                                          stress=window_stats(pooled[PhaseRole.STRESS]))  # fmt: skip
    return views


def _count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == round(value) else f"{value:.1f}"


def server_clause(server: ServerView | None, windows: Sequence[PhaseWindow]) -> tuple[str | None, Evidence]:
    """The clause the flag quotes ("the server's waiting queue grew from 0 to 183 (vllm:num_requests_waiting)")
    and its numbers; (None, {}) without server series, or without any scraped during stress."""
    if server is None:
        return None, {}
    views = stress_views(server, windows)
    evidence: Evidence = {"server_scrapes": server.scrapes, "server_scrapes_failed": server.failed}
    parts: list[str] = []
    waiting = views.get(Signal.WAITING)
    if waiting is not None and waiting.stress is not None:
        before = waiting.baseline.mean if waiting.baseline is not None else waiting.stress.first
        peak = waiting.stress.high
        evidence.update(server_waiting_baseline=before, server_waiting_stress_max=peak,
                        server_waiting_stress_last=waiting.stress.last, server_waiting_expr=waiting.expr)  # fmt: skip
        if peak > before:
            parts.append(f"the server's waiting queue grew from {_count(before)} to {_count(peak)} ({waiting.expr})")
        else:
            parts.append(f"the server's waiting queue held at {_count(peak)} at most ({waiting.expr})")
    kv = views.get(Signal.KV_CACHE)
    if kv is not None and kv.stress is not None:
        evidence["server_kv_cache_stress_max"] = kv.stress.high
        parts.append(f"its KV cache reached {kv.stress.high * 100:.0f} % full")
    preempted = views.get(Signal.PREEMPTIONS)
    if preempted is not None and preempted.stress is not None and preempted.stress.high > 0:
        evidence["server_preemptions_per_s_stress_max"] = preempted.stress.high
        parts.append(f"it preempted up to {preempted.stress.high:,.1f} requests/s")
    queue_time = views.get(Signal.QUEUE_TIME)
    if queue_time is not None and queue_time.stress is not None:
        evidence["server_queue_time_s_stress_max"] = queue_time.stress.high
        parts.append(f"its mean queue time reached {queue_time.stress.high:,.2f} s")
    if not parts:
        return None, evidence if server.scrapes else {}
    return ", ".join(parts), evidence
