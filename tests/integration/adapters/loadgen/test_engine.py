"""The open-loop generator driving the HTTP client against loopback servers: schedule, retries, stopping."""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from loadgen_testkit import (
    CHAT_NONSTREAM,
    CHAT_STREAM,
    Changes,
    Serve,
    events_of,
    request_id,
    scenario_for,
    send_events,
)

from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S, Outcome, RequestRecord
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, GeneratorReport
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan

LEAD_S = 0.05  # the run starts this long after it is set up, as the runner does
# Generous for a shared 2-core machine, yet far below what a generator held back by responses would show.
LAG_MARGIN_MS = 100.0


class Collector:
    """A ``GeneratorListener`` that keeps everything it hears about."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []  # (request id, dispatched at, ns from the start)
        self.records: list[RequestRecord] = []
        self.changes = Changes()

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        self.sent.append((request.id, at_ns))
        self.changes.notify()

    def finished(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.changes.notify()

    def by_id(self) -> dict[int, RequestRecord]:
        ids = [r.id for r in self.records]
        assert len(ids) == len(set(ids)), f"requests recorded twice: {[i for i, n in Counter(ids).items() if n > 1]}"
        return {r.id: r for r in self.records}

    def sent_ids(self) -> set[int]:
        return {request_id for request_id, _ in self.sent}


def constant(rate: float, duration_s: float) -> list[dict[str, Any]]:
    return [
        {"name": "load", "role": "baseline", "duration_s": duration_s, "arrival": {"process": "constant", "rate": rate}}
    ]


def ok_response() -> web.Response:
    return web.Response(body=CHAT_NONSTREAM, content_type="application/json")


def refuse(status: int, **headers: str) -> web.Response:
    return web.json_response({"error": {"message": f"refused with {status}"}}, status=status, headers=headers)


class Run:
    """One generator over one executor, started in the background so a test can act while it runs."""

    def __init__(self, scenario: Scenario, executor: HttpExecutor, limits: GeneratorLimits | None) -> None:
        self.scenario = scenario
        self.executor = executor
        self.clock = MonotonicClock()
        self.generator = OpenLoopGenerator(scenario, executor, self.clock, limits)
        self.collector = Collector()
        self.planned = list(iter_plan(scenario))
        self.start_ns = 0
        self.task: asyncio.Task[GeneratorReport] | None = None

    def start(self, *, lead_s: float = LEAD_S) -> None:
        self.start_ns = self.clock.now_ns() + round(lead_s * NS_PER_S)
        self.task = asyncio.create_task(
            self.generator.run(self.planned, start_ns=self.start_ns, listener=self.collector)
        )

    async def finish(self, *, within_s: float = 10.0) -> GeneratorReport:
        assert self.task is not None
        async with asyncio.timeout(within_s):
            report = await self.task
        records = self.collector.by_id()
        assert sorted(records) == [p.id for p in self.planned], "every planned request has exactly one record"
        assert self.executor.in_flight == 0
        return report

    def elapsed_s(self) -> float:
        return (self.clock.now_ns() - self.start_ns) / NS_PER_S


@asynccontextmanager
async def running(scenario: Scenario, url: str, limits: GeneratorLimits | None = None) -> AsyncIterator[Run]:
    async with HttpExecutor(scenario, url) as executor:
        run = Run(scenario, executor, limits)
        try:
            yield run
        finally:
            if run.task is not None and not run.task.done():
                run.task.cancel()
                await asyncio.wait([run.task])


async def run_plan(scenario: Scenario, url: str, limits: GeneratorLimits | None = None) -> tuple[Run, GeneratorReport]:
    async with running(scenario, url, limits) as run:
        run.start()
        report = await run.finish()
    return run, report


def gaps_s(record: RequestRecord) -> list[float]:
    """The pause between each attempt's end and the next one's send."""
    attempts = record.attempts
    return [(b.sent_ns - a.end_ns) / NS_PER_S for a, b in itertools.pairwise(attempts)]


# -- open loop ----------------------------------------------------------------------------------------


async def test_requests_leave_on_schedule_while_earlier_ones_are_still_outstanding(serve: Serve) -> None:
    outstanding = 0
    most = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal outstanding, most
        outstanding += 1
        most = max(most, outstanding)
        try:
            await asyncio.sleep(1.0)
        finally:
            outstanding -= 1
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(
        served.url,
        request={"stream": False},
        slo={"e2e_ms": 3000, "timeout_ms": 5000},
        phases=constant(20, 1.0),
    )
    run, _ = await run_plan(scenario, served.url)

    records = run.collector.by_id()
    assert len(records) == 20
    assert most >= 15  # a closed loop would have had one outstanding
    for record in records.values():
        assert record.outcome is Outcome.ON_TIME
        assert record.schedule_lag_ms is not None
        assert record.schedule_lag_ms <= LAG_MARGIN_MS
        assert record.e2e_ms is not None
        assert 1000.0 <= record.e2e_ms < 1800.0
    scheduled = {p.id: p.scheduled_ns for p in run.planned}
    for request, at_ns in run.collector.sent:
        assert (at_ns - scheduled[request]) / NS_PER_MS <= LAG_MARGIN_MS


async def test_latency_counts_from_the_scheduled_time_including_the_wait_for_a_pooled_connection(
    serve: Serve,
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.2)
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(
        served.url,
        request={"stream": False},
        client={"pool_size": 1},
        slo={"e2e_ms": 500, "timeout_ms": 3000},
        phases=constant(20, 0.25),
    )
    run, _ = await run_plan(scenario, served.url)

    records = run.collector.by_id()
    assert len(records) == 5
    for record in records.values():
        assert record.schedule_lag_ms is not None
        assert record.schedule_lag_ms <= LAG_MARGIN_MS  # the generator sent on time; the client's pool held it
    last = records[4]
    final = last.final
    assert final is not None
    assert final.pool_wait_ns / NS_PER_S >= 0.5
    assert (final.end_ns - final.sent_ns - final.pool_wait_ns) / NS_PER_S < 0.45  # the server alone was quick
    assert last.e2e_ms is not None
    assert last.e2e_ms >= 700.0
    assert last.outcome is Outcome.LATE
    assert records[0].outcome is Outcome.ON_TIME


async def test_live_counters_follow_dispatched_requests_and_received_tokens(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_events(request, events_of(CHAT_STREAM))

    served = await serve(handler)
    scenario = scenario_for(served.url, phases=constant(20, 0.25))
    run, _ = await run_plan(scenario, served.url)

    live = run.generator.live()
    assert (live.dispatched, live.in_flight, live.tokens) == (5, 0, 40)
    assert all(r.outcome is Outcome.ON_TIME for r in run.collector.records)


async def test_a_healthy_small_run_is_not_generator_limited_and_summarises_its_schedule_lag(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": False}, phases=constant(20, 0.5))
    # Looser than the defaults only where a shared test machine (not the generator) could trip them.
    limits = GeneratorLimits(lag_p99_ms=50.0, lag_max_ms=250.0, stall_ms=250.0)
    _, report = await run_plan(scenario, served.url, limits)

    assert not report.limited, report.reasons
    assert report.reasons == ()
    assert report.overflow == 0
    assert report.lag["count"] == 10
    lag_max = report.lag["max"]
    assert lag_max is not None
    assert 0.0 <= lag_max < 50.0
    assert report.to_dict()["generator_limited"] is False


async def test_a_generator_so_late_that_deadlines_passed_before_sending_reports_itself_limited(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(
        served.url, request={"stream": False}, slo={"e2e_ms": 500, "timeout_ms": 1000}, phases=constant(10, 0.5)
    )
    async with running(scenario, served.url) as run:
        run.start(lead_s=-2.0)  # as if the generator had been stalled for two seconds
        report = await run.finish()

    assert served.requests == []
    for record in run.collector.records:
        assert record.outcome is Outcome.NOT_SENT
        assert record.not_sent_reason == "deadline passed before the first attempt"
    assert report.limited
    assert any("schedule lag" in reason for reason in report.reasons)


# -- retries ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer_delay_s", "e2e_ms", "outcome"), [(0.0, 1000, Outcome.ON_TIME), (0.3, 200, Outcome.LATE)]
)
async def test_immediate_retries_number_their_attempts_and_the_final_success_decides_the_outcome(
    serve: Serve, answer_delay_s: float, e2e_ms: float, outcome: Outcome
) -> None:
    tries: Counter[int] = Counter()

    async def handler(request: web.Request) -> web.StreamResponse:
        rid = request_id(await request.json())
        tries[rid] += 1
        if tries[rid] <= 2:
            return refuse(503)
        await asyncio.sleep(answer_delay_s)
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(
        served.url,
        request={"stream": False},
        slo={"e2e_ms": e2e_ms, "timeout_ms": 3000},
        client={"retry": {"policy": "immediate", "max_retries": 3}},
        phases=constant(10, 0.3),
    )
    run, _ = await run_plan(scenario, served.url)

    for record in run.collector.records:
        assert [a.number for a in record.attempts] == [1, 2, 3]
        assert [a.status for a in record.attempts] == [503, 503, 200]
        assert [a.failure for a in record.attempts] == [FailureKind.STATUS, FailureKind.STATUS, None]
        assert record.outcome is outcome
    assert tries == {0: 3, 1: 3, 2: 3}


async def test_a_failure_the_policy_does_not_retry_on_ends_the_request_after_one_attempt(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return refuse(503)

    served = await serve(handler)
    scenario = scenario_for(
        served.url,
        request={"stream": False},
        client={"retry": {"policy": "immediate", "max_retries": 3, "retry_on": ["timeout", "connection", "429"]}},
        phases=constant(10, 0.3),
    )
    run, _ = await run_plan(scenario, served.url)

    assert len(served.requests) == 3
    for record in run.collector.records:
        assert len(record.attempts) == 1
        assert record.outcome is Outcome.SHED


async def test_exponential_backoff_without_jitter_waits_each_doubling_delay_between_attempts(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return refuse(500)

    served = await serve(handler)
    policy = {"policy": "exponential", "max_retries": 3, "base_ms": 100, "cap_ms": 1000, "jitter": "none"}
    scenario = scenario_for(
        served.url,
        request={"stream": False},
        slo={"e2e_ms": 2000, "timeout_ms": 3000},
        client={"retry": policy},
        phases=constant(1, 1.0),
    )
    run, _ = await run_plan(scenario, served.url)

    [record] = run.collector.records
    assert [a.number for a in record.attempts] == [1, 2, 3, 4]
    assert record.outcome is Outcome.ERROR
    for gap, expected in zip(gaps_s(record), [0.1, 0.2, 0.4], strict=True):
        assert expected - 0.005 <= gap < expected + 0.25


@pytest.mark.parametrize("honour", [True, False])
async def test_retry_after_delays_the_retry_only_when_the_policy_honours_it(serve: Serve, honour: bool) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        if len(served.requests) == 1:
            return refuse(429, **{"Retry-After": "1"})
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(
        served.url,
        request={"stream": False},
        slo={"e2e_ms": 3000, "timeout_ms": 4000},
        client={"retry": {"policy": "immediate", "max_retries": 1, "honour_retry_after": honour}},
        phases=constant(1, 1.0),
    )
    run, _ = await run_plan(scenario, served.url)

    [record] = run.collector.records
    assert [a.status for a in record.attempts] == [429, 200]
    assert record.attempts[0].retry_after_s == 1.0
    [gap] = gaps_s(record)
    if honour:
        assert 1.0 - 0.005 <= gap < 1.5
    else:
        assert gap < 0.5
    assert record.outcome is Outcome.ON_TIME


async def test_a_retry_budget_caps_the_retries_of_a_whole_run(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return refuse(503)

    served = await serve(handler)
    retry = {"policy": "immediate", "max_retries": 3, "budget": {"ratio": 0.1, "reserve": 1}}
    scenario = scenario_for(served.url, request={"stream": False}, client={"retry": retry}, phases=constant(100, 0.5))
    run, _ = await run_plan(scenario, served.url)

    records = run.collector.records
    assert len(records) == 50
    retries = sum(len(r.attempts) - 1 for r in records)
    assert 1 <= retries <= 0.1 * 50 + 1
    assert len(served.requests) == 50 + retries
    assert all(r.outcome is Outcome.SHED for r in records)


async def test_the_request_deadline_ends_a_request_even_with_retries_left(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await served.hang()
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(
        served.url,
        request={"stream": False},
        slo={"e2e_ms": 500, "timeout_ms": 600},
        client={"attempt_timeout_ms": 250, "retry": {"policy": "immediate", "max_retries": 5}},
        phases=constant(1, 1.0),
    )
    run, _ = await run_plan(scenario, served.url)

    [record] = run.collector.records
    assert record.outcome is Outcome.TIMEOUT
    assert 2 <= len(record.attempts) <= 3
    assert all(a.failure is FailureKind.TIMEOUT for a in record.attempts)
    assert record.attempts[0].error == "attempt timeout after 0.25s"
    final = record.final
    assert final is not None
    assert final.error is not None
    assert final.error.startswith("request deadline reached after")
    assert record.e2e_ms is not None
    assert 595.0 <= record.e2e_ms < 800.0


# -- stopping -----------------------------------------------------------------------------------------


async def test_stop_leaves_the_rest_of_the_plan_unsent_with_its_reason_and_lets_in_flight_requests_finish(
    serve: Serve,
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.3)
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": False}, phases=constant(10, 1.0))
    async with running(scenario, served.url) as run:
        run.start()
        await run.collector.changes.until(lambda: len(run.collector.sent) >= 4, what="four dispatches")
        run.generator.stop("enough load")
        stopped_at = run.elapsed_s()
        await run.finish()
        assert run.elapsed_s() - stopped_at < 0.3 + 0.5

    records = run.collector.by_id()
    sent = run.collector.sent_ids()
    assert 4 <= len(sent) <= 5
    for rid, record in records.items():
        if rid in sent:
            assert record.outcome is Outcome.ON_TIME  # in flight at the stop, and finished
        else:
            assert record.outcome is Outcome.NOT_SENT
            assert record.not_sent_reason == "enough load"
            assert record.attempts == ()
    assert len(served.requests) == len(sent)


async def test_a_stopped_run_sends_no_more_retries(serve: Serve) -> None:
    """After a stop (an abort protecting the target), a failed in-flight request is not retried."""
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return refuse(503)

    served = await serve(handler)
    retry = {"policy": "immediate", "max_retries": 3, "retry_on": ["5xx"]}
    scenario = scenario_for(served.url, request={"stream": False}, client={"retry": retry}, phases=constant(10, 0.5))
    async with running(scenario, served.url) as run:
        run.start()
        await run.collector.changes.until(lambda: len(run.collector.sent) >= 2, what="two dispatches")
        run.generator.stop("aborted: error rate")
        release.set()
        await run.finish()
    for rid in run.collector.sent_ids():
        record = run.collector.by_id()[rid]
        assert len(record.attempts) == 1
        assert record.outcome is Outcome.SHED
    assert len(served.requests) == len(run.collector.sent_ids())


async def test_an_unexpected_client_failure_is_recorded_as_an_error_not_lost(serve: Serve) -> None:
    """If the HTTP client itself raises (a cliffwatch bug), the request still gets a record: an error
    outcome with an internal-error attempt, so no denominator loses it."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": False}, phases=constant(10, 0.3))

    async with HttpExecutor(scenario, served.url) as executor:

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise ValueError("boom")

        executor.attempt = broken  # type: ignore[method-assign]
        run = Run(scenario, executor, None)
        run.start()
        await run.finish()
    records = run.collector.by_id().values()
    assert records
    for record in records:
        assert record.outcome is Outcome.ERROR
        assert record.attempts[-1].failure is FailureKind.INTERNAL
        assert "boom" in (record.attempts[-1].error or "")


async def test_stop_with_cancel_in_flight_ends_outstanding_requests_with_a_cancelled_attempt(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await served.hang()
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": False}, phases=constant(10, 0.8))
    async with running(scenario, served.url) as run:
        run.start()
        await served.until_received(5)
        run.generator.stop("interrupted", cancel_in_flight=True)
        stopped_at = run.elapsed_s()
        await run.finish()
        assert run.elapsed_s() - stopped_at < 0.5

    sent = run.collector.sent_ids()
    assert len(sent) >= 5
    for rid, record in run.collector.by_id().items():
        if rid in sent:
            final = record.final
            assert final is not None
            assert (final.failure, final.error) == (FailureKind.CANCELLED, "interrupted")
            assert record.outcome is Outcome.ERROR
        else:
            assert (record.outcome, record.not_sent_reason) == (Outcome.NOT_SENT, "interrupted")


async def test_a_cancelling_stop_right_after_a_burst_was_dispatched_loses_no_request(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await served.hang()
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": False}, phases=constant(100, 0.1))
    async with running(scenario, served.url) as run:
        run.start(lead_s=-0.2)  # the whole plan is due at once, as after a stall
        # Queued behind the run's first step, which dispatches all ten before any of them has started.
        asyncio.get_running_loop().call_soon(
            functools.partial(run.generator.stop, "interrupted", cancel_in_flight=True)
        )
        await run.finish()

    assert len(run.collector.sent) == 10
    for record in run.collector.records:
        assert record.outcome in (Outcome.NOT_SENT, Outcome.ERROR)
        if record.final is not None:
            assert record.final.failure is FailureKind.CANCELLED
        else:
            assert record.not_sent_reason == "interrupted"


async def test_a_cancelling_stop_after_a_plain_stop_still_cancels_in_flight_requests(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await served.hang()
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(
        served.url, request={"stream": False}, slo={"e2e_ms": 2000, "timeout_ms": 3000}, phases=constant(10, 0.3)
    )
    async with running(scenario, served.url) as run:
        run.start()
        await served.until_received(3)
        run.generator.stop("aborted: error rate")  # the runner's abort guard
        run.generator.stop("run interrupted", cancel_in_flight=True)  # then Ctrl-C
        stopped_at = run.elapsed_s()
        await run.finish()
        assert run.elapsed_s() - stopped_at < 0.5

    for record in run.collector.records:
        final = record.final
        assert final is not None
        assert (final.failure, final.error) == (FailureKind.CANCELLED, "run interrupted")


async def test_beyond_max_in_flight_requests_are_not_sent_and_the_generator_says_it_was_limited(
    serve: Serve,
) -> None:
    gate = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        await gate.wait()
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(
        served.url, request={"stream": False}, client={"max_in_flight": 3}, phases=constant(20, 0.3)
    )
    async with running(scenario, served.url) as run:
        run.start()
        collector = run.collector
        await collector.changes.until(lambda: len(collector.records) >= 3, what="three overflows")
        gate.set()
        report = await run.finish()

    records = run.collector.by_id()
    assert [records[i].outcome for i in range(3)] == [Outcome.ON_TIME] * 3
    for rid in range(3, 6):
        assert records[rid].outcome is Outcome.NOT_SENT
        assert records[rid].not_sent_reason == "generator: 3 requests already in flight"
    assert report.limited
    assert report.overflow == 3
    assert "3 request(s) not sent: max_in_flight reached" in report.reasons
    assert len(served.requests) == 3


async def test_every_record_reaches_the_listener_once_whatever_happened_to_it(serve: Serve) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        rid = request_id(await request.json())
        if rid % 3 == 0:
            return refuse(503)
        if rid % 3 == 1:
            assert request.transport is not None
            request.transport.close()
        return ok_response()

    served = await serve(handler)
    scenario = scenario_for(served.url, request={"stream": False}, phases=constant(40, 0.5))
    started = time.perf_counter()
    run, _ = await run_plan(scenario, served.url)

    outcomes = Counter(r.outcome for r in run.collector.by_id().values())
    assert outcomes == {Outcome.SHED: 7, Outcome.ERROR: 7, Outcome.ON_TIME: 6}
    assert time.perf_counter() - started < 5.0
