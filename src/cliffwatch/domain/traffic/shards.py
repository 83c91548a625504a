"""How one run's load is split between generator worker processes (``client.workers``), and put back together.

The plan is dealt round-robin in scheduled order: request ``i`` of the plan goes to worker ``i mod N``, a
conversation with its first turn (its later turns are made where it runs). The union of the shares is
therefore exactly the plan, whatever ``N``, and each share is itself a faithful thinning of the schedule.

What a run allows itself is split in equal shares so that together the workers never exceed it: the
connection pool and ``max_in_flight`` (rounded up, at least one), the attempt cap (rate and burst, a burst
of at least one), and each retry budget's reserve (its ratio stays: a worker deposits for the requests it
sends). A worker cannot borrow another's unused share, so under uneven load a run may use a little less
than its limits, never more; with round-robin shares the load is even to within one request.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.scenario.client_spec import AUTO_WORKERS, ClientSpec
from cliffwatch.domain.scenario.retry import RetryBudget
from cliffwatch.domain.traffic.generator_health import CollectorReport, GeneratorMeasures
from cliffwatch.domain.traffic.rate_limit import RateLimit


def worker_count(asked: int, *, cores: int, most: int) -> int:
    """The workers a run starts: ``asked``, or with ``auto`` one a usable core, never more than ``most`` (the
    caps refuse an ``asked`` above it before any load). The coordinator shares their cores: a request costs it
    about a tenth of what it costs a worker (docs/performance.md). 0: ``auto`` found one core, and the run's own
    process sends: one worker does the same work as that process and hands every record over besides."""
    if asked != AUTO_WORKERS:
        return min(most, asked)
    count = min(most, cores)
    return count if count >= 2 else 0


def share_of(total: int, count: int) -> int:
    """One worker's share of a whole limit: rounded up, at least one."""
    return max(1, math.ceil(total / count))


def client_share(client: ClientSpec, count: int) -> ClientSpec:
    """The client one of ``count`` workers runs: its share of the pool and of ``max_in_flight``."""
    return replace(
        client, pool_size=share_of(client.pool_size, count), max_in_flight=share_of(client.max_in_flight, count)
    )


def cap_share(limit: RateLimit, count: int) -> RateLimit:
    """One worker's share of the run's attempt cap."""
    return RateLimit(rate=limit.rate / count, burst=max(1.0, limit.burst / count))


def budget_share(budget: RetryBudget | None, count: int) -> RetryBudget | None:
    """One worker's retry budget: the same ratio, its share of the reserve."""
    return None if budget is None else RetryBudget(ratio=budget.ratio, reserve=budget.reserve / count)


def merged_measures(parts: list[GeneratorMeasures]) -> GeneratorMeasures:
    """The run's measures from its workers': lags together, counts summed, and the worst process's stall and
    CPU (each sends on its own core: the busiest one is the one that falls behind)."""
    lag = Histogram()
    for part in parts:
        lag.merge(part.lag)
    collectors = [p.collector for p in parts if p.collector is not None]
    return GeneratorMeasures(
        lag=lag,
        max_stall_ms=max((p.max_stall_ms for p in parts), default=0.0),
        cpu_busy=max((p.cpu_busy for p in parts), default=0.0),
        overflow=sum(p.overflow for p in parts),
        unsent=sum(p.unsent for p in parts),
        unsent_waiting=sum(p.unsent_waiting for p in parts),
        collector=merged_collectors(collectors) if collectors else None,
        capped_first=sum(p.capped_first for p in parts),
        capped_retries=sum(p.capped_retries for p in parts),
        cap_delays=sum(p.cap_delays for p in parts),
        capped_hops=sum(p.capped_hops for p in parts),
    )


def merged_collectors(reports: list[CollectorReport]) -> CollectorReport:
    collections = [sum(r.collections[g] for r in reports if g < len(r.collections)) for g in range(3)]
    return CollectorReport(
        collections=tuple(collections),
        total_ms=sum(r.total_ms for r in reports),
        max_pause_ms=max(r.max_pause_ms for r in reports),
        frozen=sum(r.frozen for r in reports),
    )


def lost_reason(index: int, count: int, why: str) -> str:
    """The not_sent reason of a request a worker took with it."""
    return f"generator worker {index + 1} of {count} {why}: its share of the load was lost"
