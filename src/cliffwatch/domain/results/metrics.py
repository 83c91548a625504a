"""Incremental aggregation of request records into per-phase statistics and a per-second time series.

Records arrive as requests finish, in any order; nothing per request is kept once it is counted, so
memory is bounded by the run's duration, not its request count. Conventions (also in docs/scoring.md):
- outcome counts and latency histograms belong to the phase and second the request was *scheduled* in,
  so ``on_time / offered`` is exact for each of them, every failure in the denominator;
- output tokens, completions and attempts are counted when they *happened* (chunk arrival, finish, send),
  which is what a throughput chart shows;
- ``in_flight`` is the mean number of attempts outstanding during the second (exact, from their intervals);
- a baseline request no fault or next phase reached is also counted into the score's reference; one they did
  reach is spill-over, counted apart (``spill_over``).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import (
    NS_PER_MS,
    NS_PER_S,
    Attempt,
    Outcome,
    RequestRecord,
    TokenSource,
    time_per_output_token_ms,
)
from cliffwatch.domain.results.run_metrics import PhaseStats, RunMetrics, SecondStats
from cliffwatch.domain.results.spill_over import ReferenceBook
from cliffwatch.domain.scenario.conversations import ConversationBook
from cliffwatch.domain.traffic.plan import PhaseWindow

_SOURCE_NAMES = {source: source.value for source in TokenSource}  # a dict lookup, not an enum property per record


@dataclass(frozen=True, kw_only=True)
class ClassBook:
    """A traffic class the aggregator keeps apart: its name and the bounds its requests are judged by."""

    name: str
    e2e_ms: float
    fast_fail_ms: float


# Answers whose output was counted (the server's usage, or one chunk a token), not guessed from words.
COUNTED_OUTPUT = frozenset((TokenSource.USAGE, TokenSource.CHUNKS))


class RunAggregator:
    """Counts records into phases and seconds as they finish; answers the live abort checks.

    With ``classes`` (more than one traffic class), each class's records are also counted into an aggregator
    of the class's own, so every figure exists per class beside the totals. ``faulted``: the indices of the
    phases with faults, whose windows the baseline reference keeps clear of (``spill_over``)."""

    def __init__(
        self,
        windows: Sequence[PhaseWindow],
        *,
        e2e_ms: float,
        fast_fail_ms: float,
        classes: Sequence[ClassBook] = (),
        faulted: Collection[int] = (),
    ) -> None:
        self._class_names = tuple(c.name for c in classes)
        self._by_class = [RunAggregator(windows, e2e_ms=c.e2e_ms, fast_fail_ms=c.fast_fail_ms, faulted=faulted)
                          for c in classes]  # fmt: skip
        self.windows = tuple(windows)
        self._starts = [w.start_ns for w in self.windows]
        self._phases = [PhaseStats(window=w) for w in self.windows]
        self._seconds: dict[int, SecondStats] = {}
        self._e2e_ns = int(e2e_ms * NS_PER_MS)
        self._fast_fail_ns = int(fast_fail_ms * NS_PER_MS)
        self._reference = ReferenceBook(self.windows, faulted=faulted)
        # A request's deadline is its own class's e2e bound: the one its outcome was judged by.
        self._class_e2e_ns = tuple(int(c.e2e_ms * NS_PER_MS) for c in classes)
        self._outstanding: dict[int, tuple[int, int]] = {}  # request id → (phase, scheduled_ns)
        self._conversations: ConversationBook | None = None  # made when the first turn of one is counted

    # -- feeding -----------------------------------------------------------------------------------

    def dispatched(self, request_id: int, phase: int, scheduled_ns: int) -> None:
        """A request left for the target; until it finishes it counts in the live checks as outstanding."""
        self._outstanding[request_id] = (phase, scheduled_ns)

    def add(self, record: RequestRecord) -> None:
        """Counts one finished (or never sent) logical request."""
        if self._by_class:
            self._by_class[record.klass].add(record)
        self._outstanding.pop(record.id, None)
        if record.conversation >= 0:
            if self._conversations is None:
                self._conversations = ConversationBook(len(self._phases))
            final = record.final
            self._conversations.add(conversation=record.conversation, turn=record.turn, turns=record.turns,
                                    phase=record.phase, on_time=record.outcome is Outcome.ON_TIME,
                                    succeeded=final is not None and final.succeeded,
                                    attempted=bool(record.attempts))  # fmt: skip
        # Every finished request passes here, on the generator's event loop: one lookup of each second and
        # attribute, no properties (docs/performance.md, "the whole run path").
        outcome, scheduled_ns = record.outcome, record.scheduled_ns
        phase = self._phases[record.phase]
        scheduled = self._second(scheduled_ns)
        phase.offered += 1
        phase.outcomes[outcome] += 1
        phase.capped += record.capped
        scheduled.offered += 1
        scheduled.outcomes[outcome] += 1
        self._reference.add(record, self._class_e2e_ns[record.klass] if self._class_e2e_ns else self._e2e_ns)
        attempts = record.attempts
        if not attempts:
            return
        final = attempts[-1]
        self._add_attempts(attempts, phase)
        if final.server_prompt_tokens is not None and record.prompt_tokens > 0 and record.sized_alone:
            error = 100.0 * (final.server_prompt_tokens - record.prompt_tokens) / record.prompt_tokens
            phase.prompt_error.add(abs(error))
            phase.prompt_error_signed += error
        if outcome is Outcome.ON_TIME:
            phase.on_time_output_tokens += final.output_tokens
        if final.failure is None and record.max_tokens > 0 and final.token_source in COUNTED_OUTPUT:
            phase.output_shortfall.add(max(0.0, 100.0 * (record.max_tokens - final.output_tokens) / record.max_tokens))
        latency = phase.latency
        latency["schedule_lag"].add(max(0.0, (attempts[0].sent_ns - scheduled_ns) / NS_PER_MS))
        end_ns = final.end_ns
        finish_second = self._second(end_ns)
        finish_second.finished[outcome] += 1
        # A send timer may fire a little early, so a quick refusal can end before its scheduled time;
        # that is 0 ms of latency, not a negative one (which the histograms refuse).
        e2e_ms = max(0.0, (end_ns - scheduled_ns) / NS_PER_MS)
        if final.failure is None:
            self._add_success(record, final, e2e_ms, phase, scheduled, finish_second)
        elif outcome is Outcome.SHED:
            latency["shed_latency"].add(e2e_ms)
            if end_ns - scheduled_ns <= self._fast_fail_ns:
                phase.fast_shed += 1
        else:
            latency["failure_latency"].add(e2e_ms)

    def _add_success(
        self,
        record: RequestRecord,
        final: Attempt,
        e2e_ms: float,
        phase: PhaseStats,
        scheduled: SecondStats,
        finish_second: SecondStats,
    ) -> None:
        latency = phase.latency
        latency["e2e"].add(e2e_ms)
        scheduled.e2e.add(e2e_ms)
        if final.first_token_ns is not None:  # as ``RequestRecord.ttft_ms`` and ``tpot_ms`` read a success
            ttft = max(0.0, (final.first_token_ns - record.scheduled_ns) / NS_PER_MS)
            latency["ttft"].add(ttft)
            scheduled.ttft.add(ttft)
            tpot = time_per_output_token_ms(final)
            if tpot is not None:
                latency["tpot"].add(tpot)
        if final.first_answer_ns is not None:
            latency["ttfa"].add(max(0.0, (final.first_answer_ns - record.scheduled_ns) / NS_PER_MS))
        if final.reasoning_tokens is not None:
            reasoning = min(final.reasoning_tokens, final.output_tokens)
            phase.reasoning_tokens += reasoning
            phase.answer_tokens += final.output_tokens - reasoning
            phase.split_answers += 1
        chunks = final.chunk_times_ns
        if len(chunks) > 1:
            itl = latency["itl"]
            for before, after in itertools.pairwise(chunks):
                itl.add((after - before) / NS_PER_MS)
        phase.token_sources[_SOURCE_NAMES[final.token_source]] += 1
        on_time = record.outcome is Outcome.ON_TIME
        finish_second.completions += 1
        finish_second.on_time_completions += on_time
        finish_phase = self._phase_at(final.end_ns)
        if finish_phase is not None:
            finish_phase.completions += 1
            finish_phase.on_time_completions += on_time

    def _add_attempts(self, attempts: Iterable[Attempt], phase: PhaseStats) -> None:
        for attempt in attempts:
            phase.attempts += 1
            sent = self._second(attempt.sent_ns)
            sent.attempts += 1
            sent.retries += attempt.number > 1
            if attempt.pool_wait_ns:
                phase.latency["pool_wait"].add(attempt.pool_wait_ns / NS_PER_MS)
            for name, value in attempt.state:
                histogram = phase.state_headers.get(name)
                if histogram is None:
                    histogram = phase.state_headers[name] = Histogram()
                histogram.add(value)
            self._spread_in_flight(attempt.sent_ns, attempt.end_ns)
            if attempt.output_tokens > 0:
                self._spread_tokens(attempt)

    def _spread_in_flight(self, start_ns: int, end_ns: int) -> None:
        while start_ns < end_ns:
            second = start_ns // NS_PER_S
            boundary = min(end_ns, (second + 1) * NS_PER_S)
            self._second(start_ns).in_flight_ns += boundary - start_ns
            start_ns = boundary

    def _spread_tokens(self, attempt: Attempt) -> None:
        if attempt.output_tokens <= 0:
            return
        times = attempt.chunk_times_ns or (attempt.end_ns,)
        share = attempt.output_tokens / len(times)
        for at in times:
            self._second(at).output_tokens += share
            window_phase = self._phase_at(at)
            if window_phase is not None:
                window_phase.output_tokens += share

    def _second(self, at_ns: int) -> SecondStats:
        index = at_ns // NS_PER_S if at_ns > 0 else 0
        stats = self._seconds.get(index)
        if stats is None:
            stats = self._seconds[index] = SecondStats(t=index)
        return stats

    def _phase_at(self, at_ns: int) -> PhaseStats | None:
        position = bisect.bisect_right(self._starts, at_ns) - 1
        if position < 0 or at_ns >= self.windows[position].end_ns:
            return None
        return self._phases[position]

    # -- live checks -------------------------------------------------------------------------------

    def window_ratio(self, now_ns: int, window_s: float, outcomes: frozenset[Outcome]) -> tuple[float, int]:
        """Share of the requests finished in the last ``window_s`` with an outcome in ``outcomes``, and their count."""
        last = now_ns // NS_PER_S
        first = (now_ns - int(window_s * NS_PER_S)) // NS_PER_S
        total = bad = 0
        for index in range(max(0, first), last + 1):
            stats = self._seconds.get(index)
            if stats is None:
                continue
            total += stats.finished.total()
            bad += sum(stats.finished[o] for o in outcomes)
        return (bad / total if total else 0.0), total

    def phase_health(self, phase: int, now_ns: int) -> tuple[float | None, int]:
        """On-time share of a phase's requests that are already decided, and how many are decided.

        Requests still outstanding past the e2e bound can no longer be on time, so they count as
        failures now; younger outstanding ones are left out until they finish.
        """
        stats = self._phases[phase]
        overdue = sum(
            1 for p, scheduled in self._outstanding.values() if p == phase and now_ns - scheduled > self._e2e_ns
        )
        decided = stats.offered + overdue
        return (stats.on_time / decided if decided else None), decided

    # -- results -----------------------------------------------------------------------------------

    def result(self) -> RunMetrics:
        classes = tuple((name, book.result()) for name, book in zip(self._class_names, self._by_class, strict=True))
        conversations = () if self._conversations is None else self._conversations.result()
        seconds: tuple[SecondStats, ...] = ()
        if self._seconds:
            last = max(self._seconds)
            seconds = tuple(self._seconds.get(t) or SecondStats(t=t) for t in range(last + 1))
        return RunMetrics(phases=tuple(self._phases), seconds=seconds, classes=classes, conversations=conversations,
                          reference=self._reference.stats)  # fmt: skip
