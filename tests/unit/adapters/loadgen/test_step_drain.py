"""TargetDrain: after a sweep step, wait for the target itself to be idle, by its gauges or by a probe."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from cliffwatch.adapters.loadgen.step_drain import IDLE_PROBES, TargetDrain
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.capacity.step_drain import DrainSignal
from cliffwatch.domain.outcomes import NS_PER_MS, Attempt
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.traffic.rate_limit import RateLimit, TokenBucket
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing


class Probed:
    """An executor whose answers take the first-token times it is given, in turn."""

    def __init__(self, first_token_ms: Iterator[float], *, fail: bool = False) -> None:
        self.times = first_token_ms
        self.fail = fail
        self.in_flight = 0
        self.tokens = 0.0
        self.capped_hops = 0
        self.sent: list[PlannedRequest] = []

    async def preflight(self) -> PromptSizing:
        return WORDS_SIZING

    async def attempt(
        self, request: PlannedRequest, number: int, timeout_s: float, *, origin_ns: int, deadline_bound: bool
    ) -> Attempt:
        self.sent.append(request)
        if self.fail:
            return Attempt(number=1, sent_ns=0, end_ns=1, failure=FailureKind.STATUS, status=503, error="HTTP 503")
        ms = next(self.times)
        return Attempt(number=1, sent_ns=0, first_token_ns=round(ms * NS_PER_MS), end_ns=round((ms + 1) * NS_PER_MS))

    def end_conversation(self, conversation: int) -> None:
        pass

    def next_prompts(self) -> None:
        pass


class Gauges:
    """A watcher whose backlog readings are given in turn (the last repeats)."""

    def __init__(self, *readings: float | None) -> None:
        self.readings = list(readings)

    async def check(self) -> str | None:
        return None

    def start(self, origin_ns: int) -> None:
        pass

    async def stop(self) -> ServerView | None:
        return None

    async def backlog(self) -> float | None:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def drain(executor: Probed, watcher: Gauges | None = None, *, timeout_s: float = 5.0, cap: TokenBucket | None = None,
          ) -> TargetDrain:  # fmt: skip
    return TargetDrain(executor, MonotonicClock(), watcher=watcher, stopped=asyncio.Event(), timeout_s=timeout_s,
                       cap=cap)  # fmt: skip


async def test_with_the_servers_gauges_the_step_waits_until_nothing_is_waiting_or_running() -> None:
    executor = Probed(iter(()))
    report = await drain(executor, Gauges(4, 4, 1, 0)).drain()
    assert report.by is DrainSignal.SERVER_METRICS
    assert report.drained
    assert report.seconds >= 0.5  # three pauses between four readings
    assert executor.sent == []  # the gauges need no probe


async def test_gauges_that_never_reach_zero_end_the_wait_at_the_timeout_and_say_so() -> None:
    report = await drain(Probed(iter(())), Gauges(7), timeout_s=0.6).drain()
    assert report.by is DrainSignal.SERVER_METRICS
    assert not report.drained
    assert report.detail == "the server held 7 request(s) (waiting and running)"


async def test_without_gauges_a_probe_must_come_within_twice_the_idle_first_token_time() -> None:
    # idle reference 10 ms (median of 9, 10, 30); after the step 80 ms and 25 ms are too slow, 18 ms drains
    executor = Probed(iter([9.0, 10.0, 30.0, 80.0, 25.0, 18.0]))
    target = drain(executor, Gauges(None))
    await target.reference()
    assert target.idle_ms == 10.0
    report = await target.drain()
    assert report.by is DrainSignal.PROBE
    assert report.drained
    assert report.detail == "a probe's first token in 18.0 ms (idle 10.0 ms, bound 20.0 ms)"
    assert len(executor.sent) == IDLE_PROBES + 3
    assert all(r.max_tokens == 1 for r in executor.sent)


async def test_a_target_slower_than_it_was_idle_has_drained_once_two_probes_agree() -> None:
    # idle 10 ms; after the step the backlog drains (900, 300 ms), then the target is steady at about 60 ms:
    # slower than it was idle (it drifted), but nothing of the step is left ahead of the probes
    executor = Probed(iter([10.0, 10.0, 10.0, 900.0, 300.0, 62.0, 60.0]))
    report = await drain(executor, Gauges(None)).drain()
    assert report.by is DrainSignal.PROBE
    assert report.drained
    assert report.detail is not None
    assert report.detail.endswith(
        "no faster than the probe before it (62.0 ms): no backlog left, the target is slower now"
    )
    assert len(executor.sent) == 3 + 4


async def test_probes_the_target_refuses_leave_the_wait_to_the_client_and_say_why() -> None:
    report = await drain(Probed(iter(()), fail=True)).drain()
    assert report.by is DrainSignal.CLIENT
    assert report.detail == "a drain probe failed (HTTP 503)"


async def test_a_probe_takes_a_token_of_the_attempt_cap_and_a_full_cap_sends_none() -> None:
    executor = Probed(iter(()))
    clock = MonotonicClock()
    cap = TokenBucket(RateLimit(rate=0.001, burst=1), clock.now_ns())
    assert cap.try_take(clock.now_ns())  # the one token is gone
    report = await drain(executor, cap=cap).drain()
    assert executor.sent == []
    assert report.detail == "the attempt cap left no room for a drain probe"


async def test_requests_still_in_flight_at_the_client_are_waited_for_first() -> None:
    executor = Probed(iter([5.0, 5.0, 5.0, 5.0]))
    executor.in_flight = 1

    async def finish() -> None:
        await asyncio.sleep(0.2)
        executor.in_flight = 0

    finishing = asyncio.create_task(finish())
    report = await drain(executor).drain()
    await finishing
    assert report.drained
    assert report.seconds >= 0.2
