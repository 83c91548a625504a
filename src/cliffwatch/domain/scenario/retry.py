"""Client retry policies: their values, their parsing, and the pure decision "retry this attempt, when?".

A policy retries a failed attempt when the failure is one it retries on, retries remain, the delay fits
before the request's deadline and (with a budget) a retry token is available. The budget is a token
bucket in the spirit of gRPC retry throttling and Google SRE's 10 % rule: each new logical request
deposits ``ratio`` tokens (up to ``reserve``), each retry spends one, so over a run retries stay below
``ratio`` × requests + ``reserve`` however hard the target fails.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from enum import StrEnum

from cliffwatch.domain.validation import Problems, Reader, short_repr


class RetryKind(StrEnum):
    NONE = "none"
    IMMEDIATE = "immediate"
    EXPONENTIAL = "exponential"


class Jitter(StrEnum):
    NONE = "none"
    FULL = "full"
    EQUAL = "equal"


class FailureKind(StrEnum):
    """Why an attempt did not succeed, in the terms a retry policy reasons with."""

    STATUS = "status"  # an HTTP error status (see the status code)
    REDIRECT = "redirect"  # a 3xx answer the client did not follow (see the status code); never retried
    REFUSED = "refused"  # cliffwatch would not send there (a redirect hop outside the allowlist); never retried
    TIMEOUT = "timeout"  # the attempt's own timeout (connect, read or total)
    CONNECTION = "connection"  # refused, reset, or closed before a response
    TRUNCATED = "truncated"  # a 2xx body cut off or malformed: the bytes stopped, or were not the format
    INCOMPLETE = "incomplete"  # a 2xx that ended properly without a whole answer (domain.scenario.completeness)
    CANCELLED = "cancelled"  # cut short by the run itself (interrupted); never retried
    INTERNAL = "internal"  # cliffwatch's own fault, not the target's; never retried
    # The attempt's time ran out before its request left the client (a stalled event loop, a full connection
    # pool): the target never saw it, so it is the client's, never the target's timeout; never retried.
    UNSENT = "unsent"


RETRY_ON_WORDS = ("timeout", "connection", "truncated", "incomplete", "429", "5xx", "4xx")
# Never retried, whatever retry_on says: a redirect sent again is redirected again (and following it is the
# client's own option, not a retry), a refusal is ours, and the run's own cut or bug is not the target's.
NEVER_RETRIED = frozenset(
    {FailureKind.REDIRECT, FailureKind.REFUSED, FailureKind.CANCELLED, FailureKind.INTERNAL, FailureKind.UNSENT}
)
_STATUS = re.compile(r"^[45]\d\d$")
DEFAULT_RETRY_ON = frozenset({"timeout", "connection", "429", "5xx"})


@dataclass(frozen=True, kw_only=True)
class RetryBudget:
    ratio: float
    reserve: float


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    kind: RetryKind = RetryKind.NONE
    max_retries: int = 0
    retry_on: frozenset[str] = DEFAULT_RETRY_ON
    base_ms: float = 100.0
    cap_ms: float = 5_000.0
    multiplier: float = 2.0
    jitter: Jitter = Jitter.FULL
    honour_retry_after: bool = False
    retry_after_cap_ms: float = 30_000.0
    budget: RetryBudget | None = None

    def retries_on(self, failure: FailureKind, status: int | None) -> bool:
        """Whether this policy retries a failure of this kind (and HTTP status, for STATUS failures)."""
        if failure in NEVER_RETRIED:
            return False
        if failure is not FailureKind.STATUS:
            return failure.value in self.retry_on
        if status is None:
            return False
        return str(status) in self.retry_on or f"{status // 100}xx" in self.retry_on

    def backoff_s(self, retry_number: int, rng: random.Random) -> float:
        """The delay before retry number ``retry_number`` (1 for the first retry), jitter applied."""
        if self.kind is not RetryKind.EXPONENTIAL:
            return 0.0
        ceiling = min(self.cap_ms, self.base_ms * self.multiplier ** (retry_number - 1)) / 1000.0
        if self.jitter is Jitter.FULL:
            return rng.uniform(0.0, ceiling)
        if self.jitter is Jitter.EQUAL:
            return ceiling / 2 + rng.uniform(0.0, ceiling / 2)
        return ceiling

    def describe(self) -> str:
        if self.kind is RetryKind.NONE or self.max_retries == 0:
            return "no retries"
        parts = [f"{self.kind.value} ×{self.max_retries} on {', '.join(sorted(self.retry_on))}"]
        if self.kind is RetryKind.EXPONENTIAL:
            parts.append(f"backoff {self.base_ms:g}–{self.cap_ms:g} ms, {self.jitter.value} jitter")
        if self.honour_retry_after:
            parts.append("honours Retry-After")
        if self.budget is not None:
            parts.append(f"budget {self.budget.ratio:.0%}")
        return "; ".join(parts)


class RetryBudgetState:
    """The live token bucket of one run's retry budget; no budget means every retry is allowed."""

    def __init__(self, budget: RetryBudget | None) -> None:
        self.budget = budget
        self.tokens = budget.reserve if budget is not None else 0.0
        self.denied = 0

    def on_new_request(self) -> None:
        if self.budget is not None:
            self.tokens = min(self.budget.reserve, self.tokens + self.budget.ratio)

    def try_spend(self) -> bool:
        if self.budget is None:
            return True
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.denied += 1
        return False

    def refund(self) -> None:
        """Gives back the token of a retry that was decided but not sent (the attempt cap refused it)."""
        if self.budget is not None:
            self.tokens = min(self.budget.reserve, self.tokens + 1.0)


@dataclass(frozen=True, kw_only=True)
class RetryDecision:
    retry: bool
    delay_s: float = 0.0
    reason: str = ""


def decide_retry(
    policy: RetryPolicy,
    *,
    failure: FailureKind,
    status: int | None,
    retries_done: int,
    retry_after_s: float | None,
    remaining_s: float,
    rng: random.Random,
    budget: RetryBudgetState,
) -> RetryDecision:
    """Whether to retry a failed attempt, and after how long; ``remaining_s`` is what is left to the deadline."""
    if policy.kind is RetryKind.NONE or retries_done >= policy.max_retries:
        return RetryDecision(retry=False, reason="no retries left")
    if not policy.retries_on(failure, status):
        return RetryDecision(retry=False, reason="not retried on this failure")
    delay = policy.backoff_s(retries_done + 1, rng)
    if policy.honour_retry_after and retry_after_s is not None:
        delay = max(delay, min(retry_after_s, policy.retry_after_cap_ms / 1000.0))
    if delay >= remaining_s:
        return RetryDecision(retry=False, reason="deadline before the retry")
    if not budget.try_spend():
        return RetryDecision(retry=False, reason="retry budget exhausted")
    return RetryDecision(retry=True, delay_s=delay)


def parse_retry(value: object, path: str, problems: Problems) -> RetryPolicy | None:
    """A retry policy from its YAML form (``policy: none | immediate | exponential`` plus options)."""
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    kind = reader.string("policy", choices=tuple(k.value for k in RetryKind))
    if kind is None:
        # Which options belong depends on the policy, which is already reported as wrong.
        for key in reader.data:
            reader.raw(key, None)
        return None
    if kind == RetryKind.NONE:
        reader.done()
        return RetryPolicy()
    max_retries = reader.number("max_retries", ge=1, le=100, integer=True)
    retry_on = _parse_retry_on(reader)
    honour = reader.boolean("honour_retry_after", False)
    retry_after_cap = reader.number("retry_after_cap_ms", 30_000.0, gt=0)
    base = cap = multiplier = None
    jitter: str | None = Jitter.NONE
    if kind == RetryKind.EXPONENTIAL:
        base = reader.number("base_ms", 100.0, gt=0)
        cap = reader.number("cap_ms", 5_000.0, gt=0)
        multiplier = reader.number("multiplier", 2.0, ge=1, le=10)
        jitter = reader.string("jitter", Jitter.FULL.value, choices=tuple(j.value for j in Jitter))
        if base is not None and cap is not None and cap < base:
            reader.error("cap_ms", f"must be >= base_ms ({base:g})")
            cap = None
    budget = _parse_budget(reader)
    reader.done()
    if max_retries is None or retry_on is None or honour is None or retry_after_cap is None:
        return None
    if kind == RetryKind.EXPONENTIAL and (base is None or cap is None or multiplier is None or jitter is None):
        return None
    if reader.has("budget") and budget is None:
        return None
    return RetryPolicy(
        kind=RetryKind(kind),
        max_retries=max_retries,
        retry_on=retry_on,
        base_ms=base if base is not None else 0.0,
        cap_ms=cap if cap is not None else 0.0,
        multiplier=multiplier if multiplier is not None else 1.0,
        jitter=Jitter(jitter or Jitter.NONE),
        honour_retry_after=honour,
        retry_after_cap_ms=retry_after_cap,
        budget=budget,
    )


def _parse_retry_on(reader: Reader) -> frozenset[str] | None:
    if not reader.has("retry_on"):
        reader.raw("retry_on", None)
        return DEFAULT_RETRY_ON
    words: set[str] = set()
    ok = True
    for path, item in reader.items("retry_on", nonempty=True):
        # YAML reads a bare 503 as a number; only three-digit ones can be statuses (str() of a huge int raises)
        word = str(item) if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < 1000 else item
        if not isinstance(word, str) or not (word in RETRY_ON_WORDS or _STATUS.fullmatch(word)):
            reader.problems.add(
                path, f"must be one of {', '.join(RETRY_ON_WORDS)} or a 4xx/5xx status code, got {short_repr(item)}"
            )
            ok = False
        else:
            words.add(word)
    return frozenset(words) if ok and words else None


def _parse_budget(reader: Reader) -> RetryBudget | None:
    budget_reader = reader.mapping("budget", None)
    if budget_reader is None:
        return None
    ratio = budget_reader.number("ratio", gt=0, le=1)
    reserve = budget_reader.number("reserve", 10.0, ge=1, le=10_000)
    budget_reader.done()
    if ratio is None or reserve is None:
        return None
    return RetryBudget(ratio=ratio, reserve=reserve)
