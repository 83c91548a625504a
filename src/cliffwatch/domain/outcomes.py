"""What happened to one logical request: its attempts, and the outcome class they add up to.

Times are integer nanoseconds on the run's monotonic clock, counted from the run's start. Latencies
that judge the SLO are measured from the request's *scheduled* time, so a generator (or a queue) that
delays sending cannot hide the wait: the coordinated-omission-free view, as in wrk2.

The outcome classes are declared here once, with the words every table, report and sentence uses for
them (``OUTCOME_TEXT``); everything that lists them (store columns, API enums, tables, charts, sweep
steps, score evidence) iterates over ``OUTCOMES`` or one of the groups below, so adding a class is its
member here, its text, and what a test then names as missing (a chart colour, a sweep step's count, a
migration for the store's columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cliffwatch.domain.quick_init import quick_init
from cliffwatch.domain.scenario.retry import FailureKind

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
SHED_STATUSES = frozenset({429, 503})
CAP_REASON = "cap: the run's attempt cap was reached"


class Outcome(StrEnum):
    ON_TIME = "on_time"  # succeeded within every SLO bound
    LATE = "late"  # succeeded, but broke a latency bound
    SHED = "shed"  # the final answer was 429 or 503: the target refused the work
    TIMEOUT = "timeout"  # the attempt timeout or the request deadline ran out
    INCOMPLETE = "incomplete"  # a 2xx without a whole answer: a hollow stream, an aborted generation
    ERROR = "error"  # any other failure: connection, truncated stream, other status, a refused redirect hop
    REDIRECT = "redirect"  # the final answer was a 3xx that was not followed: the target sent the work elsewhere
    NOT_SENT = "not_sent"  # never attempted (the run stopped first, or the generator could not send it)


OUTCOMES = tuple(Outcome)
SUCCEEDED = frozenset({Outcome.ON_TIME, Outcome.LATE})
# Sent and answered without a usable response: the failures of the answer itself (sweep tables show these).
FAILED = tuple(o for o in OUTCOMES if o not in SUCCEEDED and o is not Outcome.NOT_SENT)
NOT_ON_TIME = tuple(o for o in OUTCOMES if o is not Outcome.ON_TIME)  # every way a request missed goodput


@dataclass(frozen=True, kw_only=True)
class OutcomeText:
    """The words for one outcome class: ``label`` heads a column or a legend entry, ``short`` a narrow
    terminal column; ``counted`` and ``shared`` put a count or a share of it in a sentence."""

    label: str
    short: str
    counted: str  # "{count} timed out"
    shared: str  # "{share} % timed out"


OUTCOME_TEXT: dict[Outcome, OutcomeText] = {
    Outcome.ON_TIME: OutcomeText(label="on time", short="on time", counted="{count} on time",
                                 shared="{share} % on time"),
    Outcome.LATE: OutcomeText(label="late", short="late", counted="{count} late", shared="{share} % late"),
    Outcome.SHED: OutcomeText(label="shed", short="shed", counted="{count} shed", shared="{share} % shed"),
    Outcome.TIMEOUT: OutcomeText(label="timeout", short="tmo", counted="{count} timed out",
                                 shared="{share} % timed out"),
    Outcome.INCOMPLETE: OutcomeText(label="incomplete", short="hollow", counted="{count} incomplete",
                                    shared="{share} % incomplete"),
    Outcome.ERROR: OutcomeText(label="error", short="err", counted="{count} errors",
                               shared="{share} % failed with errors"),
    Outcome.REDIRECT: OutcomeText(label="redirect", short="3xx", counted="{count} redirected",
                                  shared="{share} % redirected"),
    Outcome.NOT_SENT: OutcomeText(label="not sent", short="unsent", counted="{count} not sent",
                                  shared="{share} % not sent"),
}  # fmt: skip


class TokenSource(StrEnum):
    USAGE = "usage"  # the server's own count (``usage.completion_tokens``)
    CHUNKS = "chunks"  # counted content chunks: one per token on the servers we know
    ESTIMATED = "estimated"  # words of a non-streamed answer without usage: a rough undercount
    NONE = "none"  # no tokens in this response (plain HTTP, or nothing received)


@dataclass(frozen=True, kw_only=True)
class Slo:
    """Per-request latency bounds; ``timeout_ms`` is when the client gives up on the request altogether."""

    e2e_ms: float
    timeout_ms: float
    ttft_ms: float | None = None  # to the first generated output, reasoning included
    tpot_ms: float | None = None
    ttfa_ms: float | None = None  # to the first answer token (visible content, not reasoning)


@quick_init
@dataclass(frozen=True, kw_only=True)
class Attempt:
    number: int  # 1 for the first try
    sent_ns: int  # when the request was handed to the client, before waiting for a connection
    end_ns: int  # when the attempt finished, either way
    failure: FailureKind | None = None  # None: a complete, successful response
    status: int | None = None
    error: str | None = None
    pool_wait_ns: int = 0  # time spent waiting for a pooled connection
    first_byte_ns: int | None = None  # response headers received
    first_token_ns: int | None = None  # first chunk carrying generated text (reasoning included)
    first_answer_ns: int | None = None  # first chunk carrying answer text (content or a tool call, not reasoning)
    chunk_times_ns: tuple[int, ...] = ()  # arrival of each token-carrying chunk
    output_tokens: int = 0
    token_source: TokenSource = TokenSource.NONE
    reasoning_tokens: int | None = None  # of output_tokens, the reasoning ones; None: no split known
    server_prompt_tokens: int | None = None  # the server's count of the prompt (usage.prompt_tokens)
    retry_after_s: float | None = None
    # What the answer's headers said of the server's state (``domain.server.state_headers``): (name, value) readings.
    state: tuple[tuple[str, float], ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.failure is None


@quick_init
@dataclass(frozen=True, kw_only=True)
class RequestRecord:
    """One logical request as the user saw it, with every attempt made for it."""

    id: int
    phase: int
    scheduled_ns: int
    prompt_tokens: int
    max_tokens: int
    attempts: tuple[Attempt, ...]
    outcome: Outcome
    not_sent_reason: str | None = None  # why it was never attempted (``CAP_REASON`` for the attempt cap)
    # An attempt of it was refused by the run's attempt cap: the first (it is not_sent, ``not_sent_reason`` says
    # why) or a retry its policy asked for (its earlier attempts stand and decide its outcome; the retry was
    # never sent).
    capped: bool = False
    klass: int = 0  # its traffic class: an index into ``Scenario.traffic_classes``
    conversation: int = -1  # the id of its conversation's first turn (``domain.scenario.conversations``); -1: none
    turn: int = 0  # 1-based turn in its conversation
    turns: int = 0  # the turns its conversation asks for
    prefixed: bool = False  # its prompt opened with a shared prefix

    @property
    def sized_alone(self) -> bool:
        """Whether ``prompt_tokens`` is the whole prompt: not when a shared prefix or a conversation's history
        came before it (the server's count is then of more than cliffwatch sized)."""
        return not self.prefixed and self.turn <= 1

    @property
    def final(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def finished_ns(self) -> int | None:
        final = self.final
        return final.end_ns if final is not None else None

    @property
    def e2e_ms(self) -> float | None:
        """From the scheduled time to the end of the final attempt (success or not)."""
        final = self.final
        return None if final is None else (final.end_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def ttft_ms(self) -> float | None:
        final = self.final
        if final is None or not final.succeeded or final.first_token_ns is None:
            return None
        return (final.first_token_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def ttfa_ms(self) -> float | None:
        """Time to the first answer token: the first visible content after any reasoning."""
        final = self.final
        if final is None or not final.succeeded or final.first_answer_ns is None:
            return None
        return (final.first_answer_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def tpot_ms(self) -> float | None:
        final = self.final
        if final is None or not final.succeeded:
            return None
        return time_per_output_token_ms(final)

    @property
    def schedule_lag_ms(self) -> float | None:
        """How late the first attempt left relative to its plan: the generator's own delay."""
        return None if not self.attempts else (self.attempts[0].sent_ns - self.scheduled_ns) / NS_PER_MS


def time_per_output_token_ms(attempt: Attempt) -> float | None:
    """Mean time between tokens after the first (the usual TPOT); None with fewer than two tokens."""
    if attempt.first_token_ns is None or attempt.output_tokens < 2:
        return None
    return (attempt.end_ns - attempt.first_token_ns) / NS_PER_MS / (attempt.output_tokens - 1)


def classify(attempts: tuple[Attempt, ...], *, scheduled_ns: int, slo: Slo) -> Outcome:
    """The outcome class of a logical request from its attempts; only the final attempt decides it."""
    if not attempts:
        return Outcome.NOT_SENT
    final = attempts[-1]
    if final.succeeded:
        return Outcome.ON_TIME if meets_slo(final, scheduled_ns=scheduled_ns, slo=slo) else Outcome.LATE
    if final.failure is FailureKind.STATUS and final.status in SHED_STATUSES:
        return Outcome.SHED
    if final.failure is FailureKind.TIMEOUT:
        return Outcome.TIMEOUT
    if final.failure is FailureKind.REDIRECT:
        return Outcome.REDIRECT
    if final.failure is FailureKind.INCOMPLETE:
        return Outcome.INCOMPLETE
    return Outcome.ERROR


def meets_slo(attempt: Attempt, *, scheduled_ns: int, slo: Slo) -> bool:
    """Whether a successful attempt met every configured bound, measured from the scheduled time."""
    return not missed_bounds(attempt, scheduled_ns=scheduled_ns, slo=slo)


def missed_bounds(attempt: Attempt, *, scheduled_ns: int, slo: Slo) -> tuple[str, ...]:
    """The SLO bounds a successful attempt broke ("e2e", "ttft", "tpot", "ttfa"), measured from the scheduled
    time; empty when it met them all. An answer that never showed a content token (all reasoning) broke
    ``ttfa``: its user saw no answer."""
    missed: list[str] = []
    if (attempt.end_ns - scheduled_ns) / NS_PER_MS > slo.e2e_ms:
        missed.append("e2e")
    if slo.ttft_ms is not None:
        first = attempt.first_token_ns if attempt.first_token_ns is not None else attempt.end_ns
        if (first - scheduled_ns) / NS_PER_MS > slo.ttft_ms:
            missed.append("ttft")
    if slo.tpot_ms is not None:
        tpot = time_per_output_token_ms(attempt)
        if tpot is not None and tpot > slo.tpot_ms:
            missed.append("tpot")
    if slo.ttfa_ms is not None:
        answer = attempt.first_answer_ns
        if answer is None or (answer - scheduled_ns) / NS_PER_MS > slo.ttfa_ms:
            missed.append("ttfa")
    return tuple(missed)
