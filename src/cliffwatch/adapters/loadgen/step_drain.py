"""Waiting for the target itself to be idle between sweep steps (``domain.capacity.step_drain`` has the rule).

With the target's metrics the server's own gauges are read (``ServerWatcher.backlog``: waiting plus running);
without, a small probe request (the scenario's own request, ``DRAIN_PROBE_TOKENS`` of prompt and one token of
output) goes through the sweep's executor and is timed to its first token. The probes' idle reference is taken
before the first step, on the target as the sweep found it. Every probe takes a token of the sweep's attempt
cap, like any request; a cap that refuses one leaves the wait to the client's side, and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics

from cliffwatch.adapters.loadgen.request_attempts import AttemptExecutor
from cliffwatch.domain.capacity.step_drain import DrainSignal, StepDrain, probe_bound_ms, probe_steady
from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S, Attempt
from cliffwatch.domain.ports import Clock, ServerWatcher
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.traffic.rate_limit import TokenBucket

DRAIN_PROBE_TOKENS = 16
PROBE_TIMEOUT_S = 30.0
IDLE_PROBES = 3  # the idle reference is their median
POLL_S = 0.25  # between two readings of the server's gauges, or two probes
CLIENT_POLL_S = 0.05
PROBE_ID_BASE = 1 << 38  # far from any step's request ids (a sweep numbers them from 0 a round, 2**28 apart)


class TargetDrain:
    """Waits, after each step, for the client's in-flight requests to end and then for the target to be idle."""

    def __init__(
        self,
        executor: AttemptExecutor,
        clock: Clock,
        *,
        watcher: ServerWatcher | None,
        stopped: asyncio.Event,
        timeout_s: float,
        cap: TokenBucket | None = None,
    ) -> None:
        self.executor = executor
        self.clock = clock
        self.watcher = watcher
        self.stopped = stopped
        self.timeout_s = timeout_s
        self.cap = cap
        self.idle_ms: float | None = None  # the probes' first-token time on the idle target
        self._why_no_probe: str | None = None
        self._probes = 0

    async def reference(self) -> None:
        """Before the first step: the idle first-token time the probes are held to (once; not with metrics)."""
        if self.idle_ms is not None or self._why_no_probe is not None:
            return
        if self.watcher is not None and await self.watcher.backlog() is not None:
            return  # the server's own gauges say when it is idle: no probes needed
        times = []
        for _ in range(IDLE_PROBES):
            probe = await self._probe()
            if isinstance(probe, str):
                self._why_no_probe = probe
                return
            times.append(probe)
        self.idle_ms = statistics.median(times)

    async def drain(self) -> StepDrain:
        """Waits for the target to be idle, at most ``timeout_s`` from now; says how long it took and how."""
        started = self.clock.now_ns()
        deadline = started + round(self.timeout_s * NS_PER_S)
        # in_flight is a counter the executor keeps, with no event to wait on: it is polled
        while self.executor.in_flight > 0 and self.clock.now_ns() < deadline and not self.stopped.is_set():  # noqa: ASYNC110
            await asyncio.sleep(CLIENT_POLL_S)
        if self.executor.in_flight > 0:
            left = f"{self.executor.in_flight} request(s) still in flight at the client"
            return self._report(DrainSignal.CLIENT, started, drained=False, detail=left)
        if self.watcher is not None:
            held = await self.watcher.backlog()
            if held is not None:
                while held is not None and held > 0 and self.clock.now_ns() < deadline and not self.stopped.is_set():
                    await self._pause()
                    held = await self.watcher.backlog()
                detail = f"the server held {held:g} request(s) (waiting and running)" if held is not None else None
                return self._report(DrainSignal.SERVER_METRICS, started, drained=held == 0, detail=detail)
        if self.stopped.is_set():  # a stopped sweep sends nothing more, probes included
            return self._report(DrainSignal.CLIENT, started, drained=False, detail="the sweep was stopped")
        await self.reference()
        if self.idle_ms is None:
            return self._report(DrainSignal.CLIENT, started, drained=True, detail=self._why_no_probe)
        bound = probe_bound_ms(self.idle_ms)
        previous: float | None = None
        while True:
            probe = await self._probe()
            if isinstance(probe, str):
                return self._report(DrainSignal.CLIENT, started, drained=True, detail=probe)
            detail = f"a probe's first token in {probe:.1f} ms (idle {self.idle_ms:.1f} ms, bound {bound:.1f} ms)"
            if probe <= bound:
                return self._report(DrainSignal.PROBE, started, drained=True, detail=detail)
            if previous is not None and probe_steady(previous, probe):
                detail += (f", no faster than the probe before it ({previous:.1f} ms): no backlog left, the target "
                           "is slower now")  # fmt: skip
                return self._report(DrainSignal.PROBE, started, drained=True, detail=detail)
            previous = probe
            await self._pause()
            if self.clock.now_ns() >= deadline or self.stopped.is_set():
                return self._report(DrainSignal.PROBE, started, drained=False, detail=detail)

    def _report(self, by: DrainSignal, started_ns: int, *, drained: bool, detail: str | None) -> StepDrain:
        return StepDrain(by=by, seconds=(self.clock.now_ns() - started_ns) / NS_PER_S, drained=drained, detail=detail)

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopped.wait(), POLL_S)

    async def _probe(self) -> float | str:
        """One probe's first-token time in ms (first byte for a plain HTTP target), or why it gave none."""
        now = self.clock.now_ns()
        if self.cap is not None and not self.cap.try_take(now):
            return "the attempt cap left no room for a drain probe"
        self._probes += 1
        request = PlannedRequest(id=PROBE_ID_BASE + self._probes, phase=0, scheduled_ns=0,
                                 prompt_tokens=DRAIN_PROBE_TOKENS, max_tokens=1)  # fmt: skip
        attempt = await self.executor.attempt(request, 1, PROBE_TIMEOUT_S, origin_ns=now, deadline_bound=False)
        if not attempt.succeeded:
            return f"a drain probe failed ({attempt.error or attempt.failure})"
        return _first_token_ms(attempt)


def _first_token_ms(attempt: Attempt) -> float:
    first = attempt.first_token_ns
    if first is None:
        first = attempt.first_byte_ns if attempt.first_byte_ns is not None else attempt.end_ns
    return max(0.0, (first - attempt.sent_ns) / NS_PER_MS)
