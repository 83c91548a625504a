"""Whether the load generator kept its schedule: the verdict that says if a run measured the target.

An open-loop generator that falls behind sends later than planned, so its numbers describe the
client, not the target. The verdict is a pure function of what the generator measured about itself.
The report also says what the run's attempt cap held back (``CapReport``): a run the cap held back did not
send the load as written, which is a verdict of its own (``capped``), not a fault of the generator.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.traffic.clock_agreement import skew_problem
from cliffwatch.domain.traffic.rate_limit import RateLimit


@dataclass(frozen=True, kw_only=True)
class GeneratorLimits:
    lag_p99_ms: float = 10.0  # 99 % of requests must leave within this of their scheduled time
    lag_max_ms: float = 250.0  # and none later than this
    stall_ms: float = 100.0  # longest tolerated event-loop stall
    cpu_busy: float = 0.9  # share of one core the generator process may use on average
    # A worker on another machine whose clock is known less well than this sent off schedule (clock_agreement).
    clock_skew_ms: float = 5.0


@dataclass(frozen=True, kw_only=True)
class CapReport:
    """What the run's attempt cap (a token bucket at ``limit``) held back."""

    limit: RateLimit
    first_attempts: int = 0  # requests not sent at all (not_sent, reason cap)
    retries: int = 0  # retries not sent (the request keeps its earlier attempts)
    delayed: int = 0  # closed-loop requests whose client waited for the cap before sending
    redirect_hops: int = 0  # redirects not followed (the 3xx stands as the answer)

    @property
    def capped(self) -> bool:
        return bool(self.first_attempts or self.retries or self.delayed or self.redirect_hops)

    def summary(self) -> str:
        kinds = (
            (self.first_attempts, "request(s) not sent"),
            (self.retries, "retry(ies) not sent"),
            (self.delayed, "closed-loop request(s) delayed"),
            (self.redirect_hops, "redirect hop(s) not followed"),
        )
        held = ", ".join(f"{n:,} {what}" for n, what in kinds if n) or "never"
        return (
            f"the run's attempt cap ({self.limit.describe()}) held the load back ({held}): what was sent is not "
            "the load as written"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.limit.rate,
            "burst": self.limit.burst,
            "capped": self.capped,
            "first_attempts_not_sent": self.first_attempts,
            "retries_not_sent": self.retries,
            "closed_loop_delayed": self.delayed,
            "redirect_hops_not_followed": self.redirect_hops,
        }


@dataclass(frozen=True, kw_only=True)
class CollectorReport:
    """The garbage collector's pauses while the generator ran (each one stopped its event loop)."""

    collections: tuple[int, ...]  # by generation: young, middle, oldest (full)
    total_ms: float
    max_pause_ms: float
    frozen: int = 0  # long-lived objects moved out of the collections' way when the run started

    def to_dict(self) -> dict[str, Any]:
        return {
            "collections": list(self.collections),
            "total_ms": round(self.total_ms, 3),
            "max_pause_ms": round(self.max_pause_ms, 3),
            "frozen_objects": self.frozen,
        }


@dataclass(frozen=True, kw_only=True)
class GeneratorMeasures:
    """What one generator measured about itself, before any verdict: the figures workers send back, merged
    into the run's before it is judged."""

    lag: Histogram  # schedule lag (ms) of every first attempt
    max_stall_ms: float
    cpu_busy: float
    overflow: int
    unsent: int
    unsent_waiting: int
    collector: CollectorReport | None
    capped_first: int = 0
    capped_retries: int = 0
    cap_delays: int = 0
    capped_hops: int = 0


@dataclass(frozen=True, kw_only=True)
class WorkerShare:
    """What one worker process did with its share: the run says how many processes sent what."""

    index: int
    pid: int | None
    planned: int  # requests of the plan dealt to it
    dispatched: int  # of them and of its conversations' later turns, those it started
    finished: int  # records it sent back
    lost: int  # requests it was given and never reported: not_sent when it died
    cpu_busy: float | None
    max_stall_ms: float | None
    gc_max_pause_ms: float | None
    failure: str | None = None  # why it ended early (it died, failed or fenced itself); None: it finished
    node: str | None = None  # the machine it ran on (a Ray node); None: the coordinator's
    # Another machine's clock (``domain.traffic.clock_agreement``), None on the coordinator's: how far off the start it
    # was sent could have been, and its wall clock against the coordinator's.
    clock_skew_ms: float | None = None
    wall_offset_ms: float | None = None
    # Its nice value, and the run's: a worker at a higher one than its run (Ray starts workers at 15) yields its
    # core to everything else on its machine. None: not known.
    niceness: int | None = None
    run_niceness: int | None = None

    @property
    def deprioritized(self) -> bool:
        return self.niceness is not None and self.run_niceness is not None and self.niceness > self.run_niceness

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pid": self.pid,
            "node": self.node,
            "planned": self.planned,
            "dispatched": self.dispatched,
            "finished": self.finished,
            "lost": self.lost,
            "cpu_busy": None if self.cpu_busy is None else round(self.cpu_busy, 4),
            "max_event_loop_stall_ms": None if self.max_stall_ms is None else round(self.max_stall_ms, 3),
            "gc_max_pause_ms": None if self.gc_max_pause_ms is None else round(self.gc_max_pause_ms, 3),
            "failure": self.failure,
            "clock_skew_ms": None if self.clock_skew_ms is None else round(self.clock_skew_ms, 3),
            "wall_clock_offset_ms": None if self.wall_offset_ms is None else round(self.wall_offset_ms, 3),
            "niceness": self.niceness,
        }


@dataclass(frozen=True, kw_only=True)
class GeneratorReport:
    """What the generator measured about itself during a run, and the verdict drawn from it."""

    lag: dict[str, float | int | None]  # schedule lag summary (ms): count, mean, p50, p90, p99, max
    max_stall_ms: float
    cpu_busy: float  # process CPU seconds / wall seconds
    overflow: int  # requests not sent because max_in_flight was reached
    limited: bool
    reasons: tuple[str, ...]
    cap: CapReport | None = None  # None: the run had no attempt cap
    # Attempts whose time ran out before they left the client (``FailureKind.UNSENT``): never the target's
    # timeouts. ``unsent_waiting`` of them had been waiting for a pooled connection (client.pool_size).
    unsent: int = 0
    unsent_waiting: int = 0
    collector: CollectorReport | None = None  # None: not measured (a test double's generator)
    workers: tuple[WorkerShare, ...] = ()  # the worker processes that sent the load (none: the run's own)
    # With workers: the coordinator's CPU (its records, aggregation, progress), a share of one core.
    coordinator_cpu_busy: float | None = None

    @property
    def capped(self) -> bool:
        return self.cap is not None and self.cap.capped

    def to_dict(self) -> dict[str, Any]:
        return {
            "generator_limited": self.limited,
            "reasons": list(self.reasons),
            "schedule_lag_ms": self.lag,
            "max_event_loop_stall_ms": round(self.max_stall_ms, 3),
            "cpu_busy": round(self.cpu_busy, 4),
            "overflow_not_sent": self.overflow,
            "attempts_not_sent": self.unsent,
            "attempts_not_sent_pool_full": self.unsent_waiting,
            "attempt_cap": None if self.cap is None else self.cap.to_dict(),
            "gc": None if self.collector is None else self.collector.to_dict(),
            "workers": [w.to_dict() for w in self.workers] or None,
            "nodes": nodes_of(self.workers) or None,
            "coordinator_cpu_busy": None if self.coordinator_cpu_busy is None else round(self.coordinator_cpu_busy, 4),
        }


def judge_generator(
    lag: Histogram,
    *,
    max_stall_ms: float,
    cpu_busy: float,
    overflow: int,
    limits: GeneratorLimits,
    cap: CapReport | None = None,
    unsent: int = 0,
    unsent_waiting: int = 0,
    collector: CollectorReport | None = None,
) -> GeneratorReport:
    """The generator's verdict: limited when any measured figure crossed its limit, with every reason.

    Attempts that ran out of time before leaving with a connection in hand make it limited: the client could
    not write them. Those that ran out waiting for a pooled connection do not: a target holding every
    connection fills the pool as it would a real client's (they are still not sent, never its timeouts)."""
    reasons: list[str] = []
    late = _late_beyond_allowance(lag, limits.lag_p99_ms)
    if late is not None:
        reasons.append(f"p99 schedule lag {late:.1f} ms > {limits.lag_p99_ms:g} ms")
    if lag.count and lag.max > limits.lag_max_ms:
        reasons.append(f"max schedule lag {lag.max:.1f} ms > {limits.lag_max_ms:g} ms")
    if max_stall_ms > limits.stall_ms:
        cause = ""
        if collector is not None and collector.max_pause_ms > limits.stall_ms:
            cause = f" (the longest garbage collection took {collector.max_pause_ms:.0f} ms)"
        reasons.append(f"event loop stalled {max_stall_ms:.0f} ms > {limits.stall_ms:g} ms{cause}")
    if cpu_busy > limits.cpu_busy:
        reasons.append(f"generator CPU {cpu_busy:.0%} of a core > {limits.cpu_busy:.0%}")
    if overflow:
        reasons.append(f"{overflow} request(s) not sent: max_in_flight reached")
    if unsent > unsent_waiting:
        reasons.append(f"{unsent - unsent_waiting} attempt(s) ran out of time before the client could send them")
    return GeneratorReport(
        lag=lag.summary(),
        max_stall_ms=max_stall_ms,
        cpu_busy=cpu_busy,
        overflow=overflow,
        limited=bool(reasons),
        reasons=tuple(reasons),
        cap=cap,
        unsent=unsent,
        unsent_waiting=unsent_waiting,
        collector=collector,
    )


def judge_measures(
    measures: GeneratorMeasures,
    *,
    limits: GeneratorLimits,
    cap_limit: RateLimit | None,
    workers: tuple[WorkerShare, ...] = (),
    coordinator_cpu_busy: float | None = None,
) -> GeneratorReport:
    """The verdict on a generator's measures (a run's own, or its workers' merged); a worker that ended early
    took its share of the load with it, so the run did not send what it planned: limited, saying which."""
    m = measures
    report = judge_generator(
        m.lag, max_stall_ms=m.max_stall_ms, cpu_busy=m.cpu_busy, overflow=m.overflow, limits=limits,
        unsent=m.unsent, unsent_waiting=m.unsent_waiting, collector=m.collector,
        cap=None if cap_limit is None else CapReport(
            limit=cap_limit, first_attempts=m.capped_first, retries=m.capped_retries, delayed=m.cap_delays,
            redirect_hops=m.capped_hops),
    )  # fmt: skip
    lost = tuple(
        f"generator worker {w.index + 1} of {len(workers)} {w.failure}: {w.lost:,} request(s) lost (not sent)"
        for w in workers
        if w.failure is not None
    )
    skewed = tuple(
        problem
        for w in workers
        if w.clock_skew_ms is not None
        and (problem := skew_problem(_label(w, len(workers)), w.clock_skew_ms, bound_ms=limits.clock_skew_ms))
    )
    reasons = report.reasons + lost + skewed
    if reasons:  # what may explain it: a worker that yields its core to everything else on its machine
        reasons += tuple(
            f"{_label(w, len(workers))} ran at nice {w.niceness}, below its run's priority (nice {w.run_niceness}): "
            "whatever else runs there takes the CPU first (Ray starts its workers at nice 15 unless its cluster is "
            "started with RAY_worker_niceness=0)"
            for w in workers
            if w.deprioritized
        )
    return replace(report, limited=bool(reasons), reasons=reasons, workers=workers,
                   coordinator_cpu_busy=coordinator_cpu_busy)  # fmt: skip


def _label(worker: WorkerShare, count: int) -> str:
    where = "" if worker.node is None else f" on {worker.node}"
    return f"generator worker {worker.index + 1} of {count}{where}"


def nodes_of(workers: tuple[WorkerShare, ...]) -> list[dict[str, Any]]:
    """What each machine sent, when the workers ran on more than the coordinator's (Ray nodes): its processes,
    their counts summed, its busiest process and longest stall, the worst clock skew, and its processes that
    ended early. Judged as the whole run is: any failure or a skew past the bound is in the run's reasons."""
    by_node: dict[str, list[WorkerShare]] = {}
    for worker in workers:
        if worker.node is not None:
            by_node.setdefault(worker.node, []).append(worker)
    rows = []
    for node, mine in by_node.items():
        rows.append({
            "node": node,
            "processes": len(mine),
            "planned": sum(w.planned for w in mine),
            "dispatched": sum(w.dispatched for w in mine),
            "finished": sum(w.finished for w in mine),
            "lost": sum(w.lost for w in mine),
            "max_cpu_busy": _worst([w.cpu_busy for w in mine], 4),
            "max_event_loop_stall_ms": _worst([w.max_stall_ms for w in mine], 3),
            "clock_skew_ms": _worst([w.clock_skew_ms for w in mine], 3),
            "failed": sum(w.failure is not None for w in mine),
        })  # fmt: skip
    return rows


def _worst(values: list[float | None], digits: int) -> float | None:
    known = [v for v in values if v is not None]
    return round(max(known), digits) if known else None


def _late_beyond_allowance(lag: Histogram, limit_ms: float) -> float | None:
    """The lag of the first send beyond the 1 % allowed to leave later than ``limit_ms``, or None when
    within it. Fewer than 100 sends cannot show a 99th percentile, so one late send is always allowed there:
    otherwise a single event-loop hiccup would invalidate a short step. ``lag_max_ms`` still bounds them all.
    """
    allowed = max(1, lag.count // 100)
    if lag.count <= allowed:
        return None
    value = lag.quantile((lag.count - 1 - allowed) / (lag.count - 1))
    return value if value is not None and value > limit_ms else None
