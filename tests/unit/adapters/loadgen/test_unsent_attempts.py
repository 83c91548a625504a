"""Attempts whose time ran out before they left the client: what the generator records and reports (against
an executor that answers 503 or reports the attempt unsent, as it is told)."""

from __future__ import annotations

import asyncio

from generator_kit import Listener

from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import Attempt, Outcome
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.service.runs import StoredOutcome
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing

STALLED = "not sent: attempt timeout after 1s before the request left the client, with a connection in hand"
POOLED = "not sent: attempt timeout after 1s before the request left the client, 990 ms of it waiting"


def scenario(duration_s: float = 0.4) -> Scenario:
    return parse_scenario({
        "name": "unsent",
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "client": {"retry": {"policy": "immediate", "max_retries": 2,
                             "budget": {"ratio": 0.5, "reserve": 10}}},
        "phases": [{"name": "p", "role": "stress", "duration_s": duration_s,
                    "arrival": {"process": "constant", "rate": 10}}],
    })  # fmt: skip


class Scripted:
    """Each request's attempts, by number: ``unsent`` (stalled), ``pooled`` (unsent after a pool wait) or 503."""

    def __init__(self, clock: MonotonicClock, script: dict[tuple[int, int], str]) -> None:
        self.clock = clock
        self.script = script
        self.in_flight = 0
        self.capped_hops = 0
        self.tokens = 0.0
        self.calls: list[tuple[int, int]] = []

    async def preflight(self) -> PromptSizing:
        return WORDS_SIZING

    def end_conversation(self, conversation: int) -> None:
        return None

    def next_prompts(self) -> None:
        return None

    async def attempt(
        self, request: PlannedRequest, number: int, timeout_s: float, *, origin_ns: int, deadline_bound: bool
    ) -> Attempt:
        self.calls.append((request.id, number))
        now = self.clock.now_ns() - origin_ns
        await asyncio.sleep(0)
        kind = self.script.get((request.id, number), "503")
        if kind == "unsent":
            return Attempt(number=number, sent_ns=now, end_ns=now, failure=FailureKind.UNSENT, error=STALLED)
        if kind == "pooled":
            return Attempt(number=number, sent_ns=now, end_ns=now, failure=FailureKind.UNSENT, error=POOLED,
                           pool_wait_ns=990_000_000)  # fmt: skip
        return Attempt(number=number, sent_ns=now, end_ns=now, status=503, failure=FailureKind.STATUS,
                       error="HTTP 503")  # fmt: skip


async def test_an_unsent_first_attempt_leaves_the_request_not_sent_and_an_unsent_retry_the_attempts_made() -> None:
    """Request 0's first attempt never left: not sent, with the reason, and never retried. Request 1's second
    attempt never left: its first 503 stands (shed), no third attempt is made, and its budget token goes back.
    Request 2 waited for the pool: not sent too. None of them is the target's timeout; the report counts
    three, one of them waiting for the pool, so two make the generator limited."""
    clock = MonotonicClock()
    plan = scenario()
    executor = Scripted(clock, {(0, 1): "unsent", (1, 2): "unsent", (2, 1): "pooled"})
    listener = Listener()
    generator = OpenLoopGenerator(plan, executor, clock)
    report = await generator.run(iter_plan(plan), start_ns=clock.now_ns(), listener=listener)

    records = listener.records
    assert (records[0].outcome, records[0].not_sent_reason, records[0].attempts) == (Outcome.NOT_SENT, STALLED, ())
    assert StoredOutcome.of("r", records[0]).error == STALLED
    assert [c for c in executor.calls if c[0] == 0] == [(0, 1)]
    assert records[1].outcome is Outcome.SHED
    assert [a.number for a in records[1].attempts] == [1]
    assert [c for c in executor.calls if c[0] == 1] == [(1, 1), (1, 2)]
    assert (records[2].outcome, records[2].not_sent_reason) == (Outcome.NOT_SENT, POOLED)
    assert all(r.outcome is not Outcome.TIMEOUT for r in records.values())
    assert (report.unsent, report.unsent_waiting) == (3, 1)
    assert report.limited
    assert "2 attempt(s) ran out of time before the client could send them" in report.reasons


async def test_the_retry_budget_gets_back_the_token_of_a_retry_that_never_left() -> None:
    """One request: its first attempt a 503, its retry (paid from the budget) unsent: the budget ends as if
    the retry had never been decided, 10 (the reserve, the deposit held there)."""
    clock = MonotonicClock()
    plan = scenario(duration_s=0.1)
    generator = OpenLoopGenerator(plan, Scripted(clock, {(0, 2): "unsent"}), clock)
    await generator.run(iter_plan(plan), start_ns=clock.now_ns(), listener=Listener())
    assert generator._budgets[0, 0].tokens == 10.0
