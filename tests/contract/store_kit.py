"""Helpers of the store contract tests: the stores' common protocol, a settable clock, the backend a test
gets, and builders for runs and request records."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from cliffwatch.adapters.store import SqlStore, create_engine
from cliffwatch.domain.gameday_ports import DeliveryStore, GamedayStore
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_MS, Attempt, Outcome, RequestRecord, TokenSource
from cliffwatch.domain.ports import (
    ControlStore,
    FaultLedger,
    LeaderLock,
    RunStore,
    ScenarioStore,
    ScheduleStore,
    TokenStore,
)
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.result import PhaseTiming, RunResult, RunStatus
from cliffwatch.domain.results.scoring import score_run
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.service.runs import Overrides, Run, RunEnd, Trigger
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, judge_generator
from cliffwatch.domain.traffic.plan import iter_plan, phase_windows
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.worker import run_end

BACKENDS = ("memory", "sqlite", "postgres")
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


class Store(ScenarioStore, RunStore, ScheduleStore, TokenStore, ControlStore, GamedayStore, DeliveryStore, Protocol):
    """Every store port at once, as both implementations provide them."""


class Clock:
    """A wall clock that moves only when told to."""

    def __init__(self, at: datetime = T0) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> datetime:
        self.at += timedelta(seconds=seconds)
        return self.at


@dataclass(kw_only=True)
class Backend:
    name: str
    store: Store
    clock: Clock
    url: str | None = None  # None for the in-memory store
    engines: list[AsyncEngine] = field(default_factory=list)
    memory: InMemoryStore | None = None

    def another_store(self) -> Store:
        """A store of another instance on the same database (on its own engine); the same store in memory."""
        if self.memory is not None:
            return self.memory
        return SqlStore(self.engine(), now=self.clock)

    def ledger(self, *, grace: timedelta = timedelta(0)) -> FaultLedger:
        """A fault ledger of another instance (its own engine), judging leases by the test's clock and
        presuming a run's owner dead ``grace`` after its lease ended."""
        store = self.memory or SqlStore(self.engine(), now=self.clock)
        return store.fault_ledger(now=self.clock, grace=grace)

    def leader_lock(self) -> LeaderLock:
        """The leader lock of another instance."""
        return (self.memory or SqlStore(self.engine())).leader_lock()

    def engine(self) -> AsyncEngine:
        assert self.url is not None
        engine = create_engine(self.url)
        self.engines.append(engine)
        return engine


def sql_only(*names: str) -> pytest.MarkDecorator:
    """Runs a test on these backends only (``backend_source`` parametrized indirectly)."""
    return pytest.mark.parametrize("backend_source", names or ("sqlite", "postgres"), indirect=True)


def make_run(run_id: str, *, at: datetime = T0, **changes: Any) -> Run:
    values: dict[str, Any] = {
        "id": run_id,
        "scenario_name": "burst",
        "scenario_hash": "h" * 64,
        "status": RunStatus.QUEUED,
        "trigger": Trigger.API,
        "triggered_by": "ci-token",
        "created_at": at,
        "target_url": "http://127.0.0.1:8000",
        "seed": 42,
        "threshold": 70.5,
        "overrides": Overrides(seed=42, threshold=70.5),
    }
    values.update(changes)
    return Run(**values)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def make_record(request_id: int, *, phase: int = 0, retried: bool = False, sent: bool = True) -> RequestRecord:
    """A finished request: on time, or shed once then on time (``retried``), or never sent."""
    scheduled = request_id * 10 * NS_PER_MS
    attempts: list[Attempt] = []
    if retried:
        attempts.append(Attempt(number=1, sent_ns=scheduled + NS_PER_MS, end_ns=scheduled + 5 * NS_PER_MS,
                                failure=FailureKind.STATUS, status=429, error="HTTP 429"))  # fmt: skip
    if sent:
        start = scheduled + (7 if retried else 1) * NS_PER_MS
        attempts.append(
            Attempt(number=len(attempts) + 1, sent_ns=start, end_ns=start + 120 * NS_PER_MS, status=200,
                    first_token_ns=start + 30 * NS_PER_MS, output_tokens=9, token_source=TokenSource.USAGE)
        )  # fmt: skip
    return RequestRecord(
        id=request_id,
        phase=phase,
        scheduled_ns=scheduled,
        prompt_tokens=16,
        max_tokens=32,
        attempts=tuple(attempts),
        outcome=Outcome.ON_TIME if sent else Outcome.NOT_SENT,
        not_sent_reason=None if sent else "the run was aborted",
    )


def scored_end(
    run_id: str,
    *,
    finished_at: datetime,
    score_seed: int = 5,
    redirects: bool = False,
    incompletes: bool = False,
    server: ServerView | None = None,
) -> RunEnd:
    """How a real run of a small two-phase scenario ends, as the worker reports it: ``RunResult.to_dict()``
    split by ``run_end`` into the document and its per-second rows. With ``redirects``, a quarter of the
    burst (ids 13, 17, …, 29: five) is answered with a 307 that is not followed; with ``incompletes``, another
    quarter (ids 11, 15, …, 27: five) with a stream that ended with [DONE] and no finish_reason."""
    scenario = parse_scenario(
        {
            "name": "burst",
            "seed": score_seed,
            "slo": {"e2e_ms": 1000, "timeout_ms": 3000, "ttft_ms": 500},
            "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 10}},
            "phases": [
                {"name": "calm", "role": "baseline", "duration_s": 2, "arrival": {"process": "constant", "rate": 5}},
                {"name": "burst", "role": "stress", "duration_s": 2, "arrival": {"process": "constant", "rate": 10}},
            ],
        }
    )
    windows = phase_windows(scenario)
    aggregator = RunAggregator(windows, e2e_ms=scenario.slo.e2e_ms, fast_fail_ms=100.0)
    for request in iter_plan(scenario):
        slow = request.phase == 1 and request.id % 2 == 0  # half the burst is late
        start = request.scheduled_ns + NS_PER_MS
        end = start + (1_500 if slow else 200) * NS_PER_MS
        attempt = Attempt(number=1, sent_ns=start, end_ns=end, status=200, first_token_ns=start + 50 * NS_PER_MS,
                          chunk_times_ns=tuple(start + (50 + 10 * i) * NS_PER_MS for i in range(8)),
                          output_tokens=8, token_source=TokenSource.USAGE)  # fmt: skip
        outcome = Outcome.LATE if slow else Outcome.ON_TIME
        if redirects and request.phase == 1 and request.id % 4 == 1:
            attempt = Attempt(number=1, sent_ns=start, end_ns=start + 5 * NS_PER_MS, status=307,
                              failure=FailureKind.REDIRECT, error="HTTP 307 redirect, not followed")  # fmt: skip
            outcome = Outcome.REDIRECT
        if incompletes and request.phase == 1 and request.id % 4 == 3:
            attempt = Attempt(number=1, sent_ns=start, end_ns=start + 5 * NS_PER_MS, status=200,
                              failure=FailureKind.INCOMPLETE,
                              error="incomplete: [DONE] without a finish_reason")  # fmt: skip
            outcome = Outcome.INCOMPLETE
        aggregator.add(RequestRecord(id=request.id, phase=request.phase, scheduled_ns=request.scheduled_ns,
                                     prompt_tokens=request.prompt_tokens, max_tokens=request.max_tokens,
                                     attempts=(attempt,), outcome=outcome))  # fmt: skip
    metrics = aggregator.result()
    result = RunResult(
        run_id=run_id,
        scenario=scenario,
        target_url="http://127.0.0.1:8000",
        status=RunStatus.SUCCEEDED,
        abort_reason=None,
        started_at=finished_at - timedelta(seconds=4),
        finished_at=finished_at,
        duration_s=4.0,
        metrics=metrics,
        generator=judge_generator(Histogram(), max_stall_ms=1.0, cpu_busy=0.1, overflow=0, limits=GeneratorLimits()),
        score=score_run(metrics, slo=scenario.slo, spec=scenario.score, server=server),
        phase_timings=tuple(PhaseTiming(index=w.index, began_ns=w.start_ns, ended_ns=w.end_ns) for w in windows),
        server=server,
    )
    return run_end(result, finished_at)
