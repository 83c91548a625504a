"""One logical request's task: its attempts through an ``AttemptExecutor``, the retries the domain's retry
policy grants, the attempt cap's token for each, and its one ``RequestRecord`` to the listener.
``OpenLoopGenerator`` (``engine``) starts one such task per planned request.
"""

from __future__ import annotations

import asyncio
import random
from typing import Protocol

import structlog

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import CAP_REASON, NS_PER_MS, NS_PER_S, Attempt, RequestRecord
from cliffwatch.domain.ports import Clock, GeneratorListener
from cliffwatch.domain.scenario.retry import FailureKind, RetryBudgetState, RetryKind, decide_retry
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.domain.workload.prompt_sizing import PromptSizing

log = structlog.get_logger(__name__)


class AttemptExecutor(Protocol):
    """Makes one attempt of a planned request and reports it; never raises for target failures."""

    in_flight: int
    tokens: float
    capped_hops: int  # redirect hops the attempt cap kept it from following (0 when it follows none)

    async def preflight(self) -> PromptSizing:
        """Proves the target is there (raises ``TargetUnreachable``) and says how prompts are sized."""

    async def attempt(
        self, request: PlannedRequest, number: int, timeout_s: float, *, origin_ns: int, deadline_bound: bool
    ) -> Attempt:
        """One attempt with a total timeout of ``timeout_s``, its times in ns from ``origin_ns``;
        ``deadline_bound`` says the timeout is the request's deadline, not the per-attempt limit. A turn of a
        conversation is sent with the conversation's history, and a successful one adds to it."""

    def end_conversation(self, conversation: int) -> None:
        """Forgets a conversation's history: it has no more turns to send."""

    def next_prompts(self) -> None:
        """From now on, prompts no earlier plan sent (a sweep's next step: its plan numbers requests from 0
        again, and a server's prefix cache must not serve one step's prompts from another's)."""


class RequestAttempts:
    """The generator's part that sends one request: its attempts, retries and record, on the generator's state."""

    scenario: Scenario
    executor: AttemptExecutor
    clock: Clock
    cap: TokenBucket | None
    _capped_first: int
    _capped_retries: int
    _budgets: dict[tuple[int, int], RetryBudgetState]
    _unstarted: set[int]
    _active: int
    _lag: Histogram
    _unsent: int
    _unsent_waiting: int
    _stop_reason: str | None
    _cancel_reason: str | None

    def _may_send(self, attempts: list[Attempt], prepaid: bool) -> bool:
        """Takes a token of the attempt cap for the next attempt (``prepaid``: the caller took it for the
        first); False, counted, when the cap has none."""
        if self.cap is None or (prepaid and not attempts) or self.cap.try_take(self.clock.now_ns()):
            return True
        if attempts:
            self._capped_retries += 1
        else:
            self._capped_first += 1
        return False

    async def _run_request(
        self, request: PlannedRequest, start_ns: int, listener: GeneratorListener, *, prepaid: bool = False
    ) -> RequestRecord:
        scenario = self.scenario
        policy = scenario.retry_for(request.phase, request.klass)
        budget = self._budgets[request.phase, request.klass]
        attempt_timeout_s = scenario.attempt_timeout_for(request.klass) / 1000.0
        deadline_ns = start_ns + request.scheduled_ns + round(scenario.slo_for(request.klass).timeout_ms * NS_PER_MS)
        attempts: list[Attempt] = []
        rng: random.Random | None = None
        number = 1
        began_ns: int | None = None
        capped = False
        unsent: str | None = None
        self._unstarted.discard(request.id)
        self._active += 1
        try:
            while True:
                remaining_s = (deadline_ns - self.clock.now_ns()) / NS_PER_S
                if remaining_s <= 0:
                    if not attempts:  # the generator was so late the deadline passed: that is schedule lag too
                        self._lag.add((self.clock.now_ns() - start_ns - request.scheduled_ns) / NS_PER_MS)
                    break
                if not self._may_send(attempts, prepaid):
                    if attempts:  # a retry the budget paid for, never sent: its token goes back
                        budget.refund()
                    capped = True
                    break
                if not attempts:  # a request the run really sends deposits into the retry budget
                    budget.on_new_request()
                began_ns = self.clock.now_ns()
                attempt = await self.executor.attempt(
                    request,
                    number,
                    min(attempt_timeout_s, remaining_s),
                    origin_ns=start_ns,
                    deadline_bound=remaining_s < attempt_timeout_s,
                )
                began_ns = None
                if attempt.failure is FailureKind.UNSENT:
                    # Never reached the target: not its timeout. A first attempt leaves the request not sent;
                    # a retry leaves its earlier attempts to decide it, and its budget token goes back.
                    self._unsent += 1
                    self._unsent_waiting += attempt.pool_wait_ns > 0
                    if attempts:
                        budget.refund()
                    unsent = attempt.error
                    break
                attempts.append(attempt)
                if attempt.succeeded or policy.kind is RetryKind.NONE or attempt.failure is None:
                    break
                if self._stop_reason is not None:
                    break  # a stopped run (an abort protecting the target) sends no more retries either
                rng = rng or random.Random(f"{scenario.seed}:retry:{request.id}")
                decision = decide_retry(
                    policy,
                    failure=attempt.failure,
                    status=attempt.status,
                    retries_done=number - 1,
                    retry_after_s=attempt.retry_after_s,
                    remaining_s=(deadline_ns - self.clock.now_ns()) / NS_PER_S,
                    rng=rng,
                    budget=budget,
                )
                if not decision.retry:
                    break
                if decision.delay_s > 0:
                    await asyncio.sleep(decision.delay_s)
                number += 1
        except asyncio.CancelledError:
            if began_ns is not None:
                attempts.append(
                    Attempt(
                        number=number,
                        sent_ns=began_ns - start_ns,
                        end_ns=self.clock.now_ns() - start_ns,
                        failure=FailureKind.CANCELLED,
                        error=self._cancel_reason or self._stop_reason or "cancelled",
                    )
                )
            self._active -= 1
            self._finish(request, attempts, listener, capped=capped, unsent=unsent)
            raise
        except Exception as exc:
            # The executor turns every target failure into an Attempt; reaching here is our own bug. The
            # request still counts (as an error) so no denominator loses it, and the bug is logged loudly.
            log.exception("load client failed unexpectedly", request_id=request.id)
            attempts.append(
                Attempt(
                    number=number,
                    sent_ns=(began_ns or self.clock.now_ns()) - start_ns,
                    end_ns=self.clock.now_ns() - start_ns,
                    failure=FailureKind.INTERNAL,
                    error=f"cliffwatch internal error: {type(exc).__name__}: {exc}",
                )
            )
        self._active -= 1
        return self._finish(request, attempts, listener, capped=capped, unsent=unsent)

    def _finish(
        self,
        request: PlannedRequest,
        attempts: list[Attempt],
        listener: GeneratorListener,
        *,
        capped: bool = False,
        unsent: str | None = None,
    ) -> RequestRecord:
        record_attempts = tuple(attempts)
        if record_attempts:
            self._lag.add(max(0.0, (record_attempts[0].sent_ns - request.scheduled_ns) / NS_PER_MS))
        reason = CAP_REASON if capped else unsent or "deadline passed before the first attempt"
        slo = self.scenario.slo_for(request.klass)
        record = request.record(record_attempts, slo=slo, not_sent_reason=reason, capped=capped)
        listener.finished(record)
        return record
