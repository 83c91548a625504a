"""The open-loop scheduler: sends every planned request at its time, whatever is still outstanding.

Each logical request runs in its own task (``request_attempts``): attempts (through an
``AttemptExecutor``), retries decided by the domain's retry policy, then one ``RequestRecord`` to the
listener. The generator also watches itself (schedule lag, event-loop stalls, CPU) so a run it could not
drive faithfully says so.

Every attempt, first or retry, takes a token from the run's attempt cap (a ``TokenBucket`` on the
generator's monotonic clock) just before it is sent; with none left it is not sent: a first attempt makes
the request ``not_sent`` (reason ``CAP_REASON``), a refused retry ends the request with the attempts it made
(marked ``capped``). So what leaves never exceeds the cap, retries included, whatever the plan says.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import time
from collections.abc import AsyncIterable, Iterable

from cliffwatch.adapters.loadgen.collector import generator_collector
from cliffwatch.adapters.loadgen.request_attempts import AttemptExecutor, RequestAttempts
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S
from cliffwatch.domain.ports import Clock, GeneratorListener, LiveCounters
from cliffwatch.domain.scenario.conversations import turn_id
from cliffwatch.domain.scenario.retry import RetryBudgetState
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.generator_health import (
    GeneratorLimits,
    GeneratorMeasures,
    GeneratorReport,
    judge_measures,
)
from cliffwatch.domain.traffic.plan import PlannedRequest, later_turns_of, phase_windows
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.domain.traffic.shards import budget_share
from cliffwatch.domain.workload.prompt_sizing import PromptSizing

STALL_PROBE_S = 0.05


class OpenLoopGenerator(RequestAttempts):
    """Implements the ``LoadGenerator`` port on an ``AttemptExecutor``; ``cap``: the run's attempt cap (a
    bucket on ``clock``, shared by every generator of one sweep), None for none; ``shares``: the generator
    sends one of that many equal shares of the run (a worker process: ``adapters.distributed``)."""

    def __init__(
        self,
        scenario: Scenario,
        executor: AttemptExecutor,
        clock: Clock,
        limits: GeneratorLimits | None = None,
        *,
        cap: TokenBucket | None = None,
        shares: int = 1,
    ) -> None:
        self.scenario = scenario
        self.executor = executor
        self.clock = clock
        self.limits = limits or GeneratorLimits()
        self.cap = cap
        self._capped_first = 0
        self._capped_retries = 0
        self._cap_delays = 0
        self._tasks: set[asyncio.Task[object]] = set()
        self._stop_reason: str | None = None
        self._cancel_reason: str | None = None
        self._unstarted: set[int] = set()  # ids of dispatched requests whose task has not run yet
        self._active = 0  # requests being sent or retried (a conversation thinking between turns is not)
        self._wakeup: asyncio.Future[None] | None = None
        self._sleepers: set[asyncio.Future[None]] = set()
        self._dispatched = 0
        self._overflow = 0
        self._unsent = 0  # attempts whose time ran out before they left the client
        self._unsent_waiting = 0  # of them, those that had been waiting for a pooled connection
        self._lag = Histogram()
        self._max_stall_ns = 0
        # A retry budget is a client's: each traffic class (a tenant's client) has its own, in each phase. A
        # worker sending one of ``shares`` of the load keeps that share of each reserve (``domain.traffic.shards``).
        self._budgets = {
            (phase, klass): RetryBudgetState(budget_share(scenario.retry_for(phase, klass).budget, shares))
            for phase in range(len(scenario.phases))
            for klass in range(len(scenario.traffic_classes))
        }

    async def preflight(self) -> PromptSizing:
        return await self.executor.preflight()

    def live(self) -> LiveCounters:
        return LiveCounters(dispatched=self._dispatched, in_flight=self.executor.in_flight, tokens=self.executor.tokens)

    def stop(self, reason: str, *, cancel_in_flight: bool = False) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
            if self._wakeup is not None and not self._wakeup.done():
                self._wakeup.set_result(None)
            for sleeper in list(self._sleepers):  # conversations waiting for their next turn: there is none
                _resolve(sleeper)
        # A cancelling stop also counts after a plain one (an abort, then Ctrl-C).
        if cancel_in_flight and self._cancel_reason is None:
            self._cancel_reason = reason
            for task in list(self._tasks):
                task.cancel()

    async def run(
        self, plan: Iterable[PlannedRequest], *, start_ns: int, listener: GeneratorListener
    ) -> GeneratorReport:
        measures = await self.measure(plan, start_ns=start_ns, listener=listener)
        return judge_measures(measures, limits=self.limits, cap_limit=None if self.cap is None else self.cap.limit)

    async def measure(
        self,
        plan: Iterable[PlannedRequest] | AsyncIterable[Iterable[PlannedRequest]],
        *,
        start_ns: int,
        listener: GeneratorListener,
    ) -> GeneratorMeasures:
        """Sends ``plan`` (given ahead, or arriving in batches while it runs: a worker's share) and returns
        what the generator measured about itself, unjudged (a worker's measures are judged with the others')."""
        cpu_start = time.process_time()
        hops_before = self.executor.capped_hops  # the executor may serve several generators (a sweep's steps)
        wall_start = self.clock.now_ns()
        watcher = asyncio.create_task(self._watch_loop())
        with generator_collector() as collector:
            try:
                if isinstance(plan, AsyncIterable):
                    await self._dispatch_arriving(plan, start_ns, listener)
                else:
                    await self._dispatch(plan, start_ns, listener)
                while self._tasks:
                    await asyncio.wait(list(self._tasks))
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
                for task in list(self._tasks):
                    task.cancel()
                if self._tasks:
                    await asyncio.wait(list(self._tasks))
        wall_s = max(1e-9, (self.clock.now_ns() - wall_start) / NS_PER_S)
        return GeneratorMeasures(
            lag=self._lag, max_stall_ms=self._max_stall_ns / NS_PER_MS,
            cpu_busy=(time.process_time() - cpu_start) / wall_s, overflow=self._overflow, unsent=self._unsent,
            unsent_waiting=self._unsent_waiting, collector=collector.report(), capped_first=self._capped_first,
            capped_retries=self._capped_retries, cap_delays=self._cap_delays,
            capped_hops=self.executor.capped_hops - hops_before,
        )  # fmt: skip

    async def _dispatch_arriving(
        self, plan: AsyncIterable[Iterable[PlannedRequest]], start_ns: int, listener: GeneratorListener
    ) -> None:
        """``_dispatch`` over a plan that arrives while it runs, in batches ahead of their time."""
        async for batch in plan:
            await self._dispatch(batch, start_ns, listener)

    async def _dispatch(self, plan: Iterable[PlannedRequest], start_ns: int, listener: GeneratorListener) -> None:
        loop = asyncio.get_running_loop()
        max_in_flight = self.scenario.client.max_in_flight
        for request in plan:
            due_ns = start_ns + request.scheduled_ns
            # A loop timer may fire a hair early; never send before the planned time.
            while self._stop_reason is None and (delay_ns := due_ns - self.clock.now_ns()) > 0:
                self._wakeup = loop.create_future()
                handle = loop.call_later(delay_ns / NS_PER_S, _resolve, self._wakeup)
                await self._wakeup
                handle.cancel()
            if self._stop_reason is not None:
                listener.finished(request.not_sent(self._stop_reason))
                continue
            if self._active + len(self._unstarted) >= max_in_flight:  # tasks made but not yet running count too
                self._overflow += 1
                listener.finished(request.not_sent(f"generator: {max_in_flight} requests already in flight"))
                continue
            self._dispatched += 1
            listener.dispatched(request, self.clock.now_ns() - start_ns)
            self._unstarted.add(request.id)
            send = self._run_conversation if request.turn else self._run_request
            task = asyncio.create_task(send(request, start_ns, listener))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._task_done, request, listener))

    async def _run_conversation(
        self, first: PlannedRequest, start_ns: int, listener: GeneratorListener, *, prepaid: bool = False
    ) -> None:
        """A conversation: its first turn now, each next one when the previous answer came back plus the
        user's think time, for as long as its turns succeed, the run goes on and a turn's time falls within
        the run's phases (beyond them, the conversation is cut, and sends nothing more)."""
        scenario = self.scenario
        later = iter(later_turns_of(scenario, first.klass, first.conversation, first.prefix))
        windows = phase_windows(scenario)
        starts, end_ns = [w.start_ns for w in windows], windows[-1].end_ns
        request, paid = first, prepaid
        try:
            while True:
                record = await self._run_request(request, start_ns, listener, prepaid=paid)
                final = record.final
                turn = next(later, None)
                if turn is None or final is None or not final.succeeded or self._stop_reason is not None:
                    return
                scheduled_ns = final.end_ns + turn.think_ms * NS_PER_MS
                if scheduled_ns >= end_ns:
                    return  # the run is over before the user would ask again: the conversation is cut
                if not await self._sleep_until(start_ns + scheduled_ns):
                    return
                phase = bisect.bisect_right(starts, scheduled_ns) - 1
                request = PlannedRequest(
                    id=turn_id(first.conversation, request.turn + 1), phase=phase, scheduled_ns=scheduled_ns,
                    prompt_tokens=turn.prompt_tokens, max_tokens=turn.max_tokens, klass=first.klass,
                    prefix=turn.prefix, conversation=first.conversation, turn=request.turn + 1, turns=first.turns,
                )  # fmt: skip
                turn_paid = await self._turn_token(start_ns + end_ns)
                if turn_paid is None:
                    return  # stopped, or the run ended while waiting for the attempt cap: cut
                paid = turn_paid
                if self._active >= scenario.client.max_in_flight:
                    self._overflow += 1
                    listener.finished(request.not_sent(f"generator: {scenario.client.max_in_flight} requests "
                                                       "already in flight"))  # fmt: skip
                    return
                self._dispatched += 1
                listener.dispatched(request, self.clock.now_ns() - start_ns)
        finally:
            self.executor.end_conversation(first.conversation)

    async def _turn_token(self, until_ns: int) -> bool | None:
        """Before a conversation's later turn: open loop, it takes its attempt-cap token when sent, like any
        request (False: not paid ahead). A closed loop waits for one instead (True), or None when it cannot."""
        return False

    async def _sleep_until(self, due_ns: int) -> bool:
        """Sleeps until ``due_ns`` on the generator's clock; False when the run was stopped meanwhile."""
        loop = asyncio.get_running_loop()
        while self._stop_reason is None and (delay_ns := due_ns - self.clock.now_ns()) > 0:
            wakeup = loop.create_future()
            self._sleepers.add(wakeup)
            handle = loop.call_later(delay_ns / NS_PER_S, _resolve, wakeup)
            try:
                await wakeup
            finally:
                handle.cancel()
                self._sleepers.discard(wakeup)
        return self._stop_reason is None

    def _task_done(self, request: PlannedRequest, listener: GeneratorListener, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if request.id in self._unstarted:
            # Cancelled before its first step: the coroutine never ran, so it could not report itself.
            self._unstarted.discard(request.id)
            listener.finished(request.not_sent(self._cancel_reason or self._stop_reason or "cancelled"))

    async def _watch_loop(self) -> None:
        """Measures event-loop stalls: how much later than asked a short sleep wakes up."""
        while True:
            before = self.clock.now_ns()
            await asyncio.sleep(STALL_PROBE_S)
            overshoot = self.clock.now_ns() - before - round(STALL_PROBE_S * NS_PER_S)
            self._max_stall_ns = max(self._max_stall_ns, overshoot)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
