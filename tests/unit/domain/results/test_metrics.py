"""RunAggregator: which phase and second each count belongs to, the live checks, and the final series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from cliffwatch.domain.outcomes import NS_PER_S, OUTCOMES, Attempt, Outcome, RequestRecord, TokenSource
from cliffwatch.domain.results.metrics import ClassBook, PhaseWindow, RunAggregator
from cliffwatch.domain.results.run_metrics import merge_phases, outcome_counts
from cliffwatch.domain.results.spill_over import SpillOver
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import PhaseRole

WINDOWS = (
    PhaseWindow(index=0, name="warmup", role=PhaseRole.BASELINE, start_ns=0, end_ns=10 * NS_PER_S),
    PhaseWindow(index=1, name="burst", role=PhaseRole.STRESS, start_ns=10 * NS_PER_S, end_ns=20 * NS_PER_S),
    PhaseWindow(index=2, name="cooldown", role=PhaseRole.RECOVERY, start_ns=20 * NS_PER_S, end_ns=30 * NS_PER_S),
)


def _ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


def _aggregator() -> RunAggregator:
    return RunAggregator(WINDOWS, e2e_ms=2000, fast_fail_ms=200)


def _attempt(
    sent_s: float,
    end_s: float,
    *,
    number: int = 1,
    failure: FailureKind | None = None,
    status: int | None = 200,
    chunks_s: Sequence[float] = (),
    tokens: int | None = None,
    first_token_s: float | None = None,
    pool_wait_s: float = 0,
    source: TokenSource = TokenSource.CHUNKS,
) -> Attempt:
    return Attempt(
        number=number,
        sent_ns=_ns(sent_s),
        end_ns=_ns(end_s),
        failure=failure,
        status=status,
        pool_wait_ns=_ns(pool_wait_s),
        first_token_ns=_ns(first_token_s if first_token_s is not None else chunks_s[0])
        if chunks_s or first_token_s
        else None,
        chunk_times_ns=tuple(_ns(c) for c in chunks_s),
        output_tokens=len(chunks_s) if tokens is None else tokens,
        token_source=source,
    )


_next_id = iter(range(1_000_000))


def _record(
    phase: int, scheduled_s: float, outcome: Outcome, *attempts: Attempt, request_id: int | None = None
) -> RequestRecord:
    return RequestRecord(
        id=next(_next_id) if request_id is None else request_id,
        phase=phase,
        scheduled_ns=_ns(scheduled_s),
        prompt_tokens=10,
        max_tokens=10,
        attempts=attempts,
        outcome=outcome,
    )


def _feed(*records: RequestRecord) -> RunAggregator:
    aggregator = _aggregator()
    for record in records:
        aggregator.add(record)
    return aggregator


# -- what belongs where ----------------------------------------------------------------------------


def test_outcomes_and_latencies_belong_to_the_phase_a_request_was_scheduled_in_completions_to_where_it_finished() -> (
    None
):
    late = _record(0, 9.5, Outcome.LATE, _attempt(9.5, 12.0, chunks_s=(11.0, 12.0)))

    metrics = _feed(late).result()
    warmup, burst, _ = metrics.phases

    assert (warmup.offered, warmup.outcomes[Outcome.LATE], warmup.latency["e2e"].count) == (1, 1, 1)
    assert (burst.offered, burst.latency["e2e"].count) == (0, 0)
    assert (warmup.completions, burst.completions) == (0, 1)
    assert (metrics.seconds[9].offered, metrics.seconds[9].outcomes[Outcome.LATE]) == (1, 1)
    assert (metrics.seconds[12].finished[Outcome.LATE], metrics.seconds[12].completions) == (1, 1)
    assert metrics.seconds[9].e2e.count == 1


def test_on_time_completions_count_where_they_finished() -> None:
    metrics = _feed(
        _record(0, 9.0, Outcome.ON_TIME, _attempt(9.0, 10.5, chunks_s=(9.5,))),
        _record(1, 11.0, Outcome.LATE, _attempt(11.0, 14.0, chunks_s=(12.0,))),
    ).result()

    assert metrics.phases[1].completions == 2
    assert metrics.phases[1].on_time_completions == 1
    assert metrics.seconds[10].on_time_completions == 1
    assert metrics.seconds[14].on_time_completions == 0


def test_tokens_count_when_their_chunk_arrived_even_from_failed_attempts() -> None:
    success = _attempt(9.7, 10.5, chunks_s=(9.8, 10.2, 10.4))
    truncated = _attempt(19.0, 20.6, failure=FailureKind.TRUNCATED, chunks_s=(19.5, 20.5), tokens=4)
    no_chunk_times = _attempt(24.0, 25.3, tokens=5, source=TokenSource.USAGE)

    metrics = _feed(
        _record(0, 9.7, Outcome.ON_TIME, success),
        _record(1, 19.0, Outcome.ERROR, truncated),
        _record(2, 24.0, Outcome.ON_TIME, no_chunk_times),
    ).result()

    assert [p.output_tokens for p in metrics.phases] == [1, 2 + 2, 2 + 5]
    assert metrics.seconds[9].output_tokens == 1
    assert metrics.seconds[10].output_tokens == 2
    assert metrics.seconds[19].output_tokens == 2
    assert metrics.seconds[20].output_tokens == 2
    assert metrics.seconds[25].output_tokens == 5  # no chunk times: all at the end


def test_reported_token_counts_are_spread_evenly_over_the_chunks() -> None:
    usage = _attempt(1.0, 3.0, chunks_s=(1.2, 1.4, 2.1, 2.2, 2.9), tokens=10, source=TokenSource.USAGE)

    metrics = _feed(_record(0, 1.0, Outcome.ON_TIME, usage)).result()

    assert [s.output_tokens for s in metrics.seconds[1:3]] == [4, 6]
    assert metrics.phases[0].token_sources == {"usage": 1}


def test_in_flight_is_the_exact_mean_concurrency_of_each_second() -> None:
    metrics = _feed(
        _record(0, 0.5, Outcome.ON_TIME, _attempt(0.5, 2.25)),
        _record(0, 1.0, Outcome.ON_TIME, _attempt(1.0, 1.5)),
        _record(0, 9.5, Outcome.ON_TIME, _attempt(9.5, 11.0)),
    ).result()

    assert [s.in_flight for s in metrics.seconds[:3]] == pytest.approx([0.5, 1.5, 0.25])
    assert [s.in_flight for s in metrics.seconds[9:11]] == pytest.approx([0.5, 1.0])
    assert metrics.seconds[5].in_flight == 0


def test_every_attempt_counts_so_retries_show_as_amplification() -> None:
    retried = _record(
        1,
        10.0,
        Outcome.ON_TIME,
        _attempt(10.0, 10.1, failure=FailureKind.STATUS, status=503),
        _attempt(10.3, 10.4, number=2, failure=FailureKind.TIMEOUT, status=None),
        _attempt(11.2, 11.5, number=3),
    )
    single = _record(1, 12.0, Outcome.ON_TIME, _attempt(12.0, 12.5))
    never_sent = _record(1, 13.0, Outcome.NOT_SENT)

    metrics = _feed(retried, single, never_sent).result()
    burst = metrics.phases[1]

    assert (burst.offered, burst.sent, burst.attempts, burst.retries) == (3, 2, 4, 2)
    assert burst.amplification == 2.0
    assert (metrics.seconds[10].attempts, metrics.seconds[10].retries) == (2, 1)
    assert (metrics.seconds[11].attempts, metrics.seconds[11].retries) == (1, 1)
    assert metrics.seconds[13].offered == 1


def test_a_phase_with_nothing_sent_has_no_amplification() -> None:
    metrics = _feed(_record(0, 1.0, Outcome.NOT_SENT)).result()

    assert metrics.phases[0].amplification is None
    assert metrics.phases[0].on_time_ratio == 0.0
    assert metrics.phases[1].on_time_ratio is None


@pytest.mark.parametrize(("shed_after_s", "fast"), [(0.15, True), (0.2, True), (0.3, False), (1.5, False)])
def test_a_shed_within_the_fast_fail_bound_of_its_scheduled_time_counts_as_fast(
    shed_after_s: float, fast: bool
) -> None:
    shed = _record(1, 10.0, Outcome.SHED, _attempt(10.0, 10.0 + shed_after_s, failure=FailureKind.STATUS, status=429))

    burst = _feed(shed).result().phases[1]

    assert burst.fast_shed == int(fast)
    assert burst.latency["shed_latency"].count == 1
    assert burst.latency["failure_latency"].count == 0


def test_other_failures_are_timed_as_failures_and_successes_by_their_phases() -> None:
    success = _attempt(10.1, 11.0, first_token_s=10.3, chunks_s=(10.3, 10.5, 10.9), tokens=3, pool_wait_s=0.05)
    metrics = _feed(
        _record(1, 10.0, Outcome.ON_TIME, success),
        _record(1, 10.0, Outcome.TIMEOUT, _attempt(10.0, 15.0, failure=FailureKind.TIMEOUT, status=None)),
    ).result()
    latency = metrics.phases[1].latency

    assert latency["failure_latency"].quantile(1) == pytest.approx(5000)
    assert latency["e2e"].quantile(1) == pytest.approx(1000)
    assert latency["ttft"].quantile(1) == pytest.approx(300)
    assert latency["tpot"].quantile(1) == pytest.approx(350)
    assert latency["itl"].count == 2
    assert latency["itl"].quantile(0) == pytest.approx(200)
    assert latency["itl"].quantile(1) == pytest.approx(400)
    assert latency["schedule_lag"].quantile(1) == pytest.approx(100)
    assert latency["pool_wait"].quantile(1) == pytest.approx(50)
    assert metrics.seconds[10].ttft.count == 1


@pytest.mark.parametrize(
    ("outcome", "failure", "status", "metric"),
    [
        (Outcome.SHED, FailureKind.STATUS, 503, "shed_latency"),
        (Outcome.ERROR, FailureKind.CONNECTION, None, "failure_latency"),
        (Outcome.ON_TIME, None, 200, "e2e"),
    ],
)
def test_a_request_that_ended_before_its_scheduled_time_is_timed_as_zero_not_refused(
    outcome: Outcome, failure: FailureKind | None, status: int | None, metric: str
) -> None:
    # an asyncio timer may fire a little early, and a local refusal takes well under a millisecond
    early = _attempt(4.998, 4.999, failure=failure, status=status, first_token_s=4.999)

    metrics = _feed(_record(0, 5.0, outcome, early)).result()

    assert metrics.phases[0].latency[metric].quantile(1) == 0.0
    assert metrics.phases[0].latency["schedule_lag"].quantile(1) == 0.0


def test_derived_rates_divide_by_the_phase_duration() -> None:
    on_time = [_record(1, t, Outcome.ON_TIME, _attempt(t, t + 0.5, chunks_s=(t + 0.2,))) for t in range(10, 20)] * 2
    shed = [
        _record(1, t, Outcome.SHED, _attempt(t, t + 0.1, failure=FailureKind.STATUS, status=429)) for t in range(10, 20)
    ]

    metrics = _feed(*on_time, *shed).result()
    burst = metrics.phases[1]

    assert burst.offered_rps == 3.0
    assert burst.goodput_rps == 2.0
    assert burst.tokens_per_s == 2.0
    assert burst.on_time_ratio == pytest.approx(2 / 3)


def test_a_baseline_request_a_fault_reached_stays_in_its_phase_but_not_in_the_reference() -> None:
    """Spill-over is counted in its phase and second as any request is; only the reference leaves it out."""
    aggregator = RunAggregator(WINDOWS, e2e_ms=2000, fast_fail_ms=200, faulted={1})
    aggregator.add(_record(0, 5.0, Outcome.ON_TIME, _attempt(5.0, 6.0, chunks_s=(5.5,))))
    aggregator.add(_record(0, 9.5, Outcome.LATE, _attempt(9.5, 12.5, chunks_s=(12.0,))))  # the toxic came on at 10 s
    aggregator.add(_record(1, 12.0, Outcome.LATE, _attempt(12.0, 15.0, chunks_s=(14.0,))))

    metrics = aggregator.result()
    warmup = metrics.phases[0]

    assert (warmup.offered, warmup.on_time, warmup.outcomes[Outcome.LATE], warmup.latency["e2e"].count) == (2, 1, 1, 2)
    assert metrics.seconds[9].outcomes[Outcome.LATE] == 1
    assert metrics.reference is not None
    assert (metrics.reference.offered, metrics.reference.on_time, metrics.reference.e2e.count) == (1, 1, 1)
    assert dict(metrics.reference.spill_over) == {SpillOver.FAULT_CAME_ON: 1}


def test_each_request_is_held_to_its_own_class_bound_for_the_reference() -> None:
    """Sent 1.5 s before the next phase and over after it began: late by then under a 1 s bound (it stays in the
    reference), still open under a 4 s one (spill-over); each class's own reference says the same."""
    books = [
        ClassBook(name="tight", e2e_ms=1000, fast_fail_ms=100),
        ClassBook(name="loose", e2e_ms=4000, fast_fail_ms=400),
    ]
    aggregator = RunAggregator(WINDOWS, e2e_ms=4000, fast_fail_ms=400, classes=books)
    tight = _record(0, 8.5, Outcome.LATE, _attempt(8.5, 10.5, chunks_s=(10.4,)))
    aggregator.add(tight)
    aggregator.add(replace(tight, id=tight.id + 1, klass=1, outcome=Outcome.ON_TIME))

    metrics = aggregator.result()
    by_class = {name: (m.reference.offered, m.reference.spill_over.total())
                for name, m in metrics.classes if m.reference is not None}  # fmt: skip

    assert metrics.reference is not None
    assert (metrics.reference.offered, metrics.reference.spill_over.total()) == (1, 1)
    assert by_class == {"tight": (1, 0), "loose": (0, 1)}


# -- live checks -----------------------------------------------------------------------------------


def test_window_ratio_counts_requests_finished_in_the_recent_seconds_only() -> None:
    aggregator = _feed(
        _record(0, 3.0, Outcome.ERROR, _attempt(3.0, 3.5, failure=FailureKind.CONNECTION, status=None)),
        _record(1, 15.0, Outcome.ON_TIME, _attempt(15.0, 15.2)),
        _record(1, 20.0, Outcome.ERROR, _attempt(20.0, 20.7, failure=FailureKind.STATUS, status=500)),
        _record(2, 24.0, Outcome.TIMEOUT, _attempt(24.0, 25.1, failure=FailureKind.TIMEOUT, status=None)),
    )

    # the window is whole seconds: at 25.5 s it reaches back to the start of second 15
    assert aggregator.window_ratio(_ns(25.5), 10, frozenset({Outcome.ERROR, Outcome.TIMEOUT})) == (2 / 3, 3)
    assert aggregator.window_ratio(_ns(25.5), 10, frozenset({Outcome.SHED})) == (0.0, 3)
    # so the error at 3.5 s is still in second 3 at 13.9 s, and gone once second 3 has left the window
    assert aggregator.window_ratio(_ns(13.9), 10, frozenset({Outcome.ERROR})) == (1.0, 1)
    assert aggregator.window_ratio(_ns(14.0), 10, frozenset({Outcome.ERROR})) == (0.0, 0)


def test_window_ratio_is_zero_of_zero_before_anything_finished() -> None:
    assert _aggregator().window_ratio(_ns(5), 10, frozenset({Outcome.ERROR})) == (0.0, 0)


def test_phase_health_counts_overdue_outstanding_requests_as_failures_and_leaves_younger_ones_out() -> None:
    aggregator = _aggregator()
    aggregator.dispatched(1, 1, _ns(10.0))  # 2.2 s old at 12.2 s: overdue
    aggregator.dispatched(2, 1, _ns(10.2))  # exactly 2 s old: not yet
    aggregator.dispatched(3, 1, _ns(11.9))
    aggregator.dispatched(4, 0, _ns(1.0))  # another phase's
    aggregator.add(_record(1, 10.5, Outcome.ON_TIME, _attempt(10.5, 11.0), request_id=5))

    assert aggregator.phase_health(1, _ns(12.2)) == (0.5, 2)

    aggregator.add(_record(1, 10.0, Outcome.LATE, _attempt(10.0, 12.1), request_id=1))

    assert aggregator.phase_health(1, _ns(12.2)) == (0.5, 2)  # now decided by its record, not counted twice
    assert aggregator.phase_health(1, _ns(13.0)) == (1 / 3, 3)  # request 2 is overdue by now


def test_phase_health_is_undecided_before_anything_is_known() -> None:
    aggregator = _aggregator()
    aggregator.dispatched(1, 1, _ns(10.0))

    assert aggregator.phase_health(1, _ns(11.0)) == (None, 0)


# -- results ---------------------------------------------------------------------------------------


def test_result_fills_the_seconds_nothing_happened_in() -> None:
    metrics = _feed(
        _record(0, 0.2, Outcome.ON_TIME, _attempt(0.2, 0.4)),
        _record(0, 3.1, Outcome.ON_TIME, _attempt(3.1, 3.3)),
    ).result()

    assert [s.t for s in metrics.seconds] == [0, 1, 2, 3]
    assert [s.offered for s in metrics.seconds] == [1, 0, 0, 1]
    assert metrics.seconds[1].on_time_ratio is None
    assert metrics.seconds[3].on_time_ratio == 1.0


def test_an_empty_run_has_its_phases_and_no_seconds() -> None:
    metrics = _aggregator().result()

    assert [p.window for p in metrics.phases] == list(WINDOWS)
    assert metrics.seconds == ()


def test_phases_can_be_picked_by_role() -> None:
    metrics = _aggregator().result()

    assert [p.window.name for p in metrics.by_role(PhaseRole.STRESS)] == ["burst"]


def test_merged_phases_pool_their_counts_over_their_combined_duration() -> None:
    metrics = _feed(
        _record(1, 10.0, Outcome.ON_TIME, _attempt(10.0, 10.5, chunks_s=(10.2,))),
        _record(1, 11.0, Outcome.SHED, _attempt(11.0, 11.1, failure=FailureKind.STATUS, status=503)),
        _record(2, 21.0, Outcome.ON_TIME, _attempt(21.0, 21.5, chunks_s=(21.1, 21.2))),
        _record(2, 22.0, Outcome.NOT_SENT),
    ).result()

    pooled = merge_phases(metrics.phases[1:])

    assert pooled is not None
    assert pooled.window.name == "burst+cooldown"
    assert pooled.window.duration_s == 20
    assert (pooled.offered, pooled.sent, pooled.attempts, pooled.fast_shed) == (4, 3, 3, 1)
    assert pooled.outcomes == {Outcome.ON_TIME: 2, Outcome.SHED: 1, Outcome.NOT_SENT: 1}
    assert (pooled.output_tokens, pooled.completions, pooled.on_time_completions) == (3, 2, 2)
    assert pooled.latency["e2e"].count == 2
    assert pooled.goodput_rps == 2 / 20
    assert metrics.phases[1].offered == 2  # the parts are left as they were


def test_merging_no_phases_gives_nothing() -> None:
    assert merge_phases([]) is None


def test_outcome_counts_lists_every_class_in_a_fixed_order_zeros_included() -> None:
    counts = outcome_counts({Outcome.SHED: 2, Outcome.ON_TIME: 5})

    assert list(counts) == [o.value for o in OUTCOMES]
    assert counts == {"on_time": 5, "late": 0, "shed": 2, "timeout": 0, "incomplete": 0, "error": 0,
                      "redirect": 0, "not_sent": 0}  # fmt: skip


def test_ttfa_and_the_reasoning_split_are_measured_for_answers_that_say_them() -> None:
    """A reasoning answer gives its time to first answer token and its split; one without a known split adds
    only its TTFA (first answer at its first token) and is not counted in the split."""
    reasoned = replace(
        _attempt(1.0, 3.0, chunks_s=(1.2, 1.4, 1.6, 2.0)), first_answer_ns=_ns(2.0), output_tokens=40,
        reasoning_tokens=30,
    )  # fmt: skip
    plain = replace(_attempt(1.0, 2.0, chunks_s=(1.1, 1.5)), first_answer_ns=_ns(1.1))
    metrics = _feed(_record(0, 1.0, Outcome.ON_TIME, reasoned), _record(0, 1.0, Outcome.ON_TIME, plain)).result()
    warmup = metrics.phases[0]

    assert warmup.latency["ttfa"].count == 2
    assert warmup.latency["ttfa"].quantile(1.0) == pytest.approx(1000, rel=0.01)
    assert warmup.latency["ttft"].quantile(1.0) == pytest.approx(200, rel=0.01)
    assert (warmup.reasoning_tokens, warmup.answer_tokens, warmup.split_answers) == (30, 10, 1)
