"""What a run measured: each phase's and each second's counts and histograms, and how phases pool into one.

``metrics.RunAggregator`` fills them as requests finish; the result, the score and the reports read them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_S, OUTCOMES, Outcome
from cliffwatch.domain.results.spill_over import ReferenceStats
from cliffwatch.domain.scenario.conversations import ConversationStats
from cliffwatch.domain.scenario.scenario import PhaseRole
from cliffwatch.domain.traffic.plan import PhaseWindow

LATENCY_METRICS = (
    "ttft",
    "ttfa",
    "e2e",
    "tpot",
    "itl",
    "shed_latency",
    "failure_latency",
    "schedule_lag",
    "pool_wait",
)


@dataclass(kw_only=True)
class PhaseStats:
    """What happened to the requests scheduled in one phase, and what the target did during it."""

    window: PhaseWindow
    offered: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    attempts: int = 0  # every attempt made for this phase's requests, retries included
    fast_shed: int = 0  # shed within the fast-fail bound of the scheduled time
    capped: int = 0  # requests an attempt of which the run's attempt cap refused (RequestRecord.capped)
    output_tokens: float = 0.0  # received during the phase's time window, from any request
    completions: int = 0  # successful finishes during the window
    on_time_completions: int = 0
    token_sources: Counter[str] = field(default_factory=Counter)
    # Output tokens of the successful answers whose split is known (``Attempt.reasoning_tokens``): reasoning,
    # the rest (the answer), and how many answers that covers.
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    split_answers: int = 0
    # The server's count of each prompt (usage.prompt_tokens) against the intended one: the absolute error in
    # percent of the intended count, and the signed errors' sum (over prompt_error.count answers).
    prompt_error: Histogram = field(default_factory=Histogram)
    prompt_error_signed: float = 0.0
    # Of each successful answer, how far its output fell short of the max_tokens asked, in percent of them (0 for
    # an answer as long as asked): a server that stops early serves a lighter workload than the scenario's.
    output_shortfall: Histogram = field(default_factory=Histogram)
    on_time_output_tokens: int = 0  # output tokens of the requests that finished on time (what a cost buys)
    latency: dict[str, Histogram] = field(default_factory=lambda: {m: Histogram() for m in LATENCY_METRICS})
    # What the answers' server-state headers said (domain.server.state_headers): each reading's values, by name.
    state_headers: dict[str, Histogram] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return self.offered - self.outcomes[Outcome.NOT_SENT]

    @property
    def on_time(self) -> int:
        return self.outcomes[Outcome.ON_TIME]

    @property
    def on_time_ratio(self) -> float | None:
        """On-time share of every request offered in the phase; None when nothing was offered."""
        return self.on_time / self.offered if self.offered else None

    @property
    def amplification(self) -> float | None:
        """Attempts per logical request sent: 1.0 without retries."""
        return self.attempts / self.sent if self.sent else None

    @property
    def retries(self) -> int:
        return self.attempts - self.sent

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.window.duration_s

    @property
    def goodput_rps(self) -> float:
        return self.on_time / self.window.duration_s

    @property
    def offered_rps(self) -> float:
        return self.offered / self.window.duration_s


@dataclass(kw_only=True)
class SecondStats:
    t: int  # seconds since the run started
    offered: int = 0
    attempts: int = 0
    retries: int = 0
    in_flight_ns: int = 0  # attempt-nanoseconds outstanding during this second
    outcomes: Counter[Outcome] = field(default_factory=Counter)  # by scheduled second
    finished: Counter[Outcome] = field(default_factory=Counter)  # by finish second, for sliding windows
    output_tokens: float = 0.0
    completions: int = 0
    on_time_completions: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)

    @property
    def in_flight(self) -> float:
        return self.in_flight_ns / NS_PER_S

    @property
    def on_time_ratio(self) -> float | None:
        return self.outcomes[Outcome.ON_TIME] / self.offered if self.offered else None


@dataclass(frozen=True, kw_only=True)
class RunMetrics:
    phases: tuple[PhaseStats, ...]
    seconds: tuple[SecondStats, ...]
    # With traffic classes: each class's own metrics, by name, in the classes' order (the totals are the above).
    classes: tuple[tuple[str, RunMetrics], ...] = ()
    # With conversations: those that started in each phase, and how they ended (empty without sessions).
    conversations: tuple[ConversationStats, ...] = ()
    # The baseline requests the score's reference is built from, and the spill-over it left out; None when the
    # metrics were not counted by an aggregator (the whole baseline is then the reference).
    reference: ReferenceStats | None = None

    def by_role(self, role: PhaseRole) -> list[PhaseStats]:
        return [p for p in self.phases if p.window.role is role]


def merge_phases(phases: Sequence[PhaseStats]) -> PhaseStats | None:
    """Several phases (e.g. every stress phase) pooled into one, spanning their combined duration."""
    if not phases:
        return None
    first = phases[0].window
    duration_ns = sum(p.window.end_ns - p.window.start_ns for p in phases)
    pooled = PhaseStats(
        window=PhaseWindow(
            index=first.index,
            name="+".join(p.window.name for p in phases),
            role=first.role,
            start_ns=first.start_ns,
            end_ns=first.start_ns + duration_ns,
        )
    )
    for p in phases:
        pooled.offered += p.offered
        pooled.outcomes.update(p.outcomes)
        pooled.attempts += p.attempts
        pooled.fast_shed += p.fast_shed
        pooled.capped += p.capped
        pooled.output_tokens += p.output_tokens
        pooled.completions += p.completions
        pooled.on_time_completions += p.on_time_completions
        pooled.token_sources.update(p.token_sources)
        pooled.reasoning_tokens += p.reasoning_tokens
        pooled.answer_tokens += p.answer_tokens
        pooled.split_answers += p.split_answers
        pooled.prompt_error.merge(p.prompt_error)
        pooled.prompt_error_signed += p.prompt_error_signed
        pooled.output_shortfall.merge(p.output_shortfall)
        pooled.on_time_output_tokens += p.on_time_output_tokens
        for name, hist in p.latency.items():
            pooled.latency[name].merge(hist)
        for name, hist in p.state_headers.items():
            pooled.state_headers.setdefault(name, Histogram()).merge(hist)
    return pooled


def outcome_counts(counter: Mapping[Outcome, int]) -> dict[str, int]:
    """Every outcome class with its count, zeros included, in a fixed order."""
    return {o.value: int(counter.get(o, 0)) for o in OUTCOMES}
