"""The ``LoadGenerator`` of one run (or sweep step) sent from a ``WorkerPool``: workers send, this coordinates.

The coordinator keeps what must be one for the run: the clock (every worker sends from the same instant:
``start_ns`` on the machine's monotonic clock, translated for a worker on another machine by its measured
offset, ``domain.traffic.clock_agreement``), the plan (dealt round-robin, ``domain.traffic.shards``, shipped about
``LOOKAHEAD_S`` ahead of its time), stops (every worker is told at once), live counters (summed from the
workers' batches) and the records (each worker's, in order, handed to the run's listener as they arrive, so
phases, abort guards, progress, aggregation and the store work as with one process). Faults, leases and the
store stay with the run, which owns this generator.

A worker that dies (or fails, or fences itself) takes its share with it: every request it was given and did
not report, and every later one dealt to it, is ``not_sent`` with the reason, and the verdict says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from cliffwatch.adapters.distributed.pool import GeneratorWorker, WorkerPool
from cliffwatch.adapters.distributed.wire import WireBroken, plan_row, planned, receive, recorded
from cliffwatch.domain.errors import WorkersFailed
from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S
from cliffwatch.domain.ports import Clock, GeneratorListener, LiveCounters
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.clock_agreement import skew_ms
from cliffwatch.domain.traffic.generator_health import (
    GeneratorLimits,
    GeneratorMeasures,
    GeneratorReport,
    WorkerShare,
    judge_measures,
)
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.traffic.shards import client_share, lost_reason, merged_measures
from cliffwatch.domain.workload.prompt_sizing import PromptSizing

LOOKAHEAD_S = 1.0  # the plan reaches a worker this far ahead of its time
# The dealer sleeps only once it is this much further ahead, so it wakes (and ships) for a slice of the plan,
# not for every request: at 3,000 req/s a wake-up per request was a sixth of the coordinator's CPU.
DEAL_SLICE_S = 0.02
BATCH_ROWS = 256  # planned requests shipped in one message at most


@dataclass(kw_only=True)
class _Share:
    """One worker's part of this run: what it was given and what it reported."""

    worker: GeneratorWorker
    open: dict[int, PlannedRequest] = field(default_factory=dict)  # given or started, not yet reported
    rows: list[tuple[Any, ...]] = field(default_factory=list)  # dealt, not yet shipped
    planned: int = 0
    finished: int = 0
    lost: int = 0
    live: tuple[int, int, float] = (0, 0, 0.0)
    measures: GeneratorMeasures | None = None
    skew_ms: float | None = None  # another machine's: how far off its start could have been


class ShardedGenerator:
    """Implements ``LoadGenerator`` for one run of ``scenario`` over ``pool``'s workers (``next_prompts``: the
    workers send prompts no earlier run of the pool sent, as a sweep's next step does)."""

    def __init__(
        self,
        pool: WorkerPool,
        scenario: Scenario,
        clock: Clock,
        *,
        limits: GeneratorLimits | None = None,
        next_prompts: bool = False,
    ) -> None:
        self.pool = pool
        self.scenario = scenario
        self.clock = clock
        self.limits = limits or GeneratorLimits()
        self.next_prompts = next_prompts
        self._shares: list[_Share] = []
        self._stop: tuple[str, bool] | None = None
        self._stopped = asyncio.Event()

    async def preflight(self) -> PromptSizing:
        return await self.pool.preflight()

    @property
    def worker_pids(self) -> tuple[int, ...]:
        return self.pool.pids

    def live(self) -> LiveCounters:
        return LiveCounters(
            dispatched=sum(s.live[0] for s in self._shares),
            in_flight=sum(s.live[1] for s in self._shares),
            tokens=sum(s.live[2] for s in self._shares),
        )

    def stop(self, reason: str, *, cancel_in_flight: bool = False) -> None:
        if self._stop is None or (cancel_in_flight and not self._stop[1]):
            self._stop = (reason if self._stop is None else self._stop[0], cancel_in_flight)
            self._stopped.set()
            for share in self._shares:
                share.worker.send(("stop", self._stop[0], cancel_in_flight))

    async def run(
        self, plan: Iterable[PlannedRequest], *, start_ns: int, listener: GeneratorListener
    ) -> GeneratorReport:
        await self.pool.start()
        cpu_start, wall_start = time.process_time(), self.clock.now_ns()
        count = len(self.pool.workers)
        scenario = replace(self.scenario, client=client_share(self.scenario.client, count))
        self._shares = [_Share(worker=w) for w in self.pool.workers]
        for share in self._shares:  # each on its own clock: the same instant, whatever machine it runs on
            share.worker.send(("go", share.worker.clock.to_worker(start_ns), scenario, self.next_prompts))
        if self._stop is not None:  # stopped before the start: every worker is told, nothing is sent
            for share in self._shares:
                share.worker.send(("stop", *self._stop))
        readers = [asyncio.create_task(self._read(s, listener)) for s in self._shares]
        try:
            await self._deal(plan, start_ns, listener)
            await asyncio.gather(*readers)
        finally:
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
        for share in self._shares:
            share.skew_ms = await self._skew(share.worker)
        busy = (time.process_time() - cpu_start) / max(1e-9, (self.clock.now_ns() - wall_start) / NS_PER_S)
        measures = merged_measures([s.measures for s in self._shares if s.measures is not None])
        return judge_measures(measures, limits=self.limits, cap_limit=self.pool.cap,
                              workers=tuple(_report(s) for s in self._shares), coordinator_cpu_busy=busy)  # fmt: skip

    async def _deal(self, plan: Iterable[PlannedRequest], start_ns: int, listener: GeneratorListener) -> None:
        """Deals the plan round-robin, each worker's rows shipped in batches ``LOOKAHEAD_S`` ahead (to
        ``DEAL_SLICE_S`` more)."""
        shares, count = self._shares, len(self._shares)
        lookahead_ns, slice_ns = round(LOOKAHEAD_S * NS_PER_S), round(DEAL_SLICE_S * NS_PER_S)
        for number, request in enumerate(plan):
            if self._stop is not None:
                listener.finished(request.not_sent(self._stop[0]))
                continue
            share = shares[number % count]
            failure = share.worker.failure
            if failure is not None:
                share.lost += 1
                listener.finished(request.not_sent(lost_reason(share.worker.index, count, failure)))
                continue
            share.open[request.id] = request
            share.planned += 1
            share.rows.append(plan_row(request))
            if len(share.rows) >= BATCH_ROWS:
                self._ship(share)
            ahead_ns = start_ns + request.scheduled_ns - self.clock.now_ns() - lookahead_ns
            if ahead_ns > slice_ns:
                for each in shares:
                    self._ship(each)
                    await each.worker.drain()
                with contextlib.suppress(TimeoutError):  # not ``wait_for``: it may swallow a cancel (3.11)
                    async with asyncio.timeout(ahead_ns / NS_PER_S):
                        await self._stopped.wait()
        for share in shares:
            self._ship(share)
            share.worker.send(("end",))
            await share.worker.drain()

    async def _skew(self, worker: GeneratorWorker) -> float | None:
        """How far off the start a worker on another machine was sent could have been: its clock measured again
        now its run is done (``domain.traffic.clock_agreement``). None on the coordinator's clock."""
        if worker.clock.same_clock:
            return None
        end = None
        if worker.failure is None:
            with contextlib.suppress(WorkersFailed):
                end = await self.pool.agree_clock(worker)
        return skew_ms(worker.clock, end)

    @staticmethod
    def _ship(share: _Share) -> None:
        if share.rows:
            share.worker.send(("plan", share.rows))
            share.rows = []

    async def _read(self, share: _Share, listener: GeneratorListener) -> None:
        """Hands a worker's records to the run as they come, until it is done or gone."""
        worker = share.worker
        if worker.failure is not None:
            return
        try:
            while True:
                message = await receive(worker.reader)
                if message[0] == "batch":
                    _, dispatched, finished, counters = message
                    for known, at_ns in dispatched:
                        if isinstance(known, int):  # one it was dealt, by id
                            listener.dispatched(share.open[known], at_ns)
                        else:  # a conversation's later turn, made where the conversation runs
                            request = planned(known)
                            share.open[request.id] = request
                            listener.dispatched(request, at_ns)
                    for row in finished:
                        record = recorded(row)
                        share.open.pop(record.id, None)
                        share.finished += 1
                        listener.finished(record)
                    if counters is not None:
                        share.live = counters
                elif message[0] == "done":
                    share.measures = message[1]
                    return
                elif message[0] == "failed":
                    raise WireBroken(str(message[1]))
        except (WireBroken, ConnectionError) as exc:
            failure = await worker.lost(exc)
            reason = lost_reason(worker.index, len(self._shares), failure)
            for request in list(share.open.values()):
                listener.finished(request.not_sent(reason))
            share.lost += len(share.open)
            share.open.clear()


def _report(share: _Share) -> WorkerShare:
    m, worker = share.measures, share.worker
    return WorkerShare(
        index=worker.index, pid=worker.pid, planned=share.planned, dispatched=share.live[0],
        finished=share.finished, lost=share.lost, cpu_busy=None if m is None else m.cpu_busy,
        max_stall_ms=None if m is None else m.max_stall_ms,
        gc_max_pause_ms=None if m is None or m.collector is None else m.collector.max_pause_ms,
        failure=worker.failure, node=worker.node, clock_skew_ms=share.skew_ms,
        wall_offset_ms=None if worker.clock.same_clock else worker.clock.wall_offset_ns / NS_PER_MS,
        niceness=worker.niceness, run_niceness=os.getpriority(os.PRIO_PROCESS, 0),
    )  # fmt: skip
