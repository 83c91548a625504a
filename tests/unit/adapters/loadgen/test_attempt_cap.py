"""The generators' attempt cap: what a refused first attempt and a refused retry leave in the records, how
closed-loop clients wait for the cap, and what the report says (against an executor that refuses at once)."""

from __future__ import annotations

import asyncio

from generator_kit import Listener

from cliffwatch.adapters.loadgen.closed_loop import ClosedLoopGenerator
from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import CAP_REASON, NS_PER_S, Attempt, Outcome
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.service.runs import StoredOutcome
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan
from cliffwatch.domain.traffic.rate_limit import RateLimit, TokenBucket
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing


def scenario(*, rate: float, duration_s: float, retries: int) -> Scenario:
    retry = {"policy": "immediate", "max_retries": retries} if retries else {"policy": "none"}
    return parse_scenario({
        "name": "capped",
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "client": {"retry": retry},
        "phases": [{"name": "p", "role": "stress", "duration_s": duration_s,
                    "arrival": {"process": "constant", "rate": rate}}],
    })  # fmt: skip


class Refusing:
    """Answers every attempt 503 at once, noting when each was sent."""

    def __init__(self, clock: MonotonicClock) -> None:
        self.clock = clock
        self.in_flight = 0
        self.capped_hops = 0
        self.tokens = 0.0
        self.sent: list[int] = []

    async def preflight(self) -> PromptSizing:
        return WORDS_SIZING

    def end_conversation(self, conversation: int) -> None:
        return None

    def next_prompts(self) -> None:
        self.prompt_rounds = getattr(self, "prompt_rounds", 0) + 1

    async def attempt(
        self, request: PlannedRequest, number: int, timeout_s: float, *, origin_ns: int, deadline_bound: bool
    ) -> Attempt:
        now = self.clock.now_ns()
        self.sent.append(now)
        await asyncio.sleep(0)
        return Attempt(number=number, sent_ns=now - origin_ns, end_ns=now - origin_ns, status=503,
                       failure=FailureKind.STATUS, error="HTTP 503")  # fmt: skip


async def test_a_refused_first_attempt_is_not_sent_and_a_refused_retry_keeps_the_attempts_made() -> None:
    """With three tokens for five requests of two attempts each: the first request makes both its attempts,
    the second makes one and its retry is refused (its 503 stands: shed, capped), the rest are not sent
    (reason cap). The report counts each kind; nothing else was sent."""
    clock = MonotonicClock()
    executor = Refusing(clock)
    plan = scenario(rate=10, duration_s=0.5, retries=1)
    cap = TokenBucket(RateLimit(rate=0.01, burst=3), clock.now_ns())
    listener = Listener()
    report = await OpenLoopGenerator(plan, executor, clock, cap=cap).run(
        iter_plan(plan), start_ns=clock.now_ns(), listener=listener
    )
    records = listener.records
    assert [len(records[i].attempts) for i in range(5)] == [2, 1, 0, 0, 0]
    assert [records[i].capped for i in range(5)] == [False, True, True, True, True]
    assert records[1].outcome is Outcome.SHED
    assert records[1].not_sent_reason is None
    assert {(records[i].outcome, records[i].not_sent_reason) for i in (2, 3, 4)} == {(Outcome.NOT_SENT, CAP_REASON)}
    assert len(executor.sent) == 3
    assert report.cap is not None
    assert (report.cap.first_attempts, report.cap.retries, report.cap.delayed) == (3, 1, 0)
    assert report.capped
    assert not report.limited  # the cap is not a fault of the generator
    stored = StoredOutcome.of("r", records[1])
    assert [entry.get("number") for entry in stored.attempt_log] == [1, 2]
    assert stored.attempt_log[-1] == {"number": 2, "not_sent": CAP_REASON}
    assert StoredOutcome.of("r", records[2]).error == CAP_REASON


async def test_within_the_cap_nothing_is_held_back() -> None:
    clock = MonotonicClock()
    plan = scenario(rate=10, duration_s=0.3, retries=2)
    cap = TokenBucket(RateLimit(rate=1000, burst=100), clock.now_ns())
    listener = Listener()
    report = await OpenLoopGenerator(plan, Refusing(clock), clock, cap=cap).run(
        iter_plan(plan), start_ns=clock.now_ns(), listener=listener
    )
    assert all(len(r.attempts) == 3 and not r.capped for r in listener.records.values())
    assert report.cap is not None
    assert not report.capped


async def test_closed_loop_clients_answered_at_once_wait_for_the_cap_instead_of_flooding() -> None:
    """Two clients against instant refusals would send thousands a second; under a 20/s cap with a burst of 2
    they send at most 2 + 20 × T, record nothing not_sent (a request exists once sent) and report the waits."""
    clock = MonotonicClock()
    executor = Refusing(clock)
    plan = scenario(rate=1, duration_s=0.5, retries=0)
    cap = TokenBucket(RateLimit(rate=20, burst=2), clock.now_ns())
    listener = Listener()
    start = clock.now_ns()
    report = await ClosedLoopGenerator(plan, executor, clock, clients=2, cap=cap).run(
        iter_plan(plan), start_ns=start, listener=listener
    )
    elapsed_s = (clock.now_ns() - start) / NS_PER_S
    assert 5 <= len(executor.sent) <= 2 + 20 * elapsed_s
    assert all(r.attempts and not r.capped for r in listener.records.values())
    assert report.cap is not None
    assert report.cap.delayed > 0
    assert report.cap.first_attempts == 0
    assert report.capped


async def test_the_cap_and_the_retry_budget_count_only_what_was_sent() -> None:
    """A retry the budget paid for but the cap refused gives its token back, and a request the cap kept from
    being sent deposits nothing: with three cap tokens for five requests, the budget ends as the two requests
    sent and the one retry sent leave it."""
    clock = MonotonicClock()
    plan = parse_scenario({
        "name": "budgeted",
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "client": {"retry": {"policy": "immediate", "max_retries": 1, "budget": {"ratio": 0.5, "reserve": 10}}},
        "phases": [{"name": "p", "role": "stress", "duration_s": 0.5,
                    "arrival": {"process": "constant", "rate": 10}}],
    })  # fmt: skip
    cap = TokenBucket(RateLimit(rate=0.01, burst=3), clock.now_ns())
    generator = OpenLoopGenerator(plan, Refusing(clock), clock, cap=cap)
    await generator.run(iter_plan(plan), start_ns=clock.now_ns(), listener=Listener())
    # 10 (the reserve), +0.5 at the first request (held at 10), −1 for its retry, +0.5 at the second, −1 for its
    # retry and +1 back when the cap refused it; the three requests not sent deposit nothing (they made it 10)
    assert generator._budgets[0, 0].tokens == 9.5
