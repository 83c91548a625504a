"""Outcome classes of a logical request, judged from its final attempt and measured from its scheduled time."""

from __future__ import annotations

import pytest

from cliffwatch.domain.outcomes import (
    FAILED,
    NOT_ON_TIME,
    NS_PER_MS,
    OUTCOME_TEXT,
    OUTCOMES,
    SUCCEEDED,
    Attempt,
    Outcome,
    RequestRecord,
    Slo,
    classify,
    missed_bounds,
    time_per_output_token_ms,
)
from cliffwatch.domain.scenario.retry import FailureKind

SCHEDULED_MS = 1000
SLO = Slo(e2e_ms=2000, timeout_ms=5000, ttft_ms=500, tpot_ms=50)


def _ns(ms: float) -> int:
    return round(ms * NS_PER_MS)


def _attempt(
    sent_ms: float = SCHEDULED_MS,
    end_ms: float = SCHEDULED_MS + 1000,
    *,
    number: int = 1,
    failure: FailureKind | None = None,
    status: int | None = None,
    first_token_ms: float | None = None,
    tokens: int = 0,
) -> Attempt:
    return Attempt(
        number=number,
        sent_ns=_ns(sent_ms),
        end_ns=_ns(end_ms),
        failure=failure,
        status=status,
        first_token_ns=None if first_token_ms is None else _ns(first_token_ms),
        output_tokens=tokens,
    )


def _ok(
    end_after_ms: float, *, first_token_after_ms: float | None = 100, tokens: int = 0, sent_after_ms: float = 0
) -> Attempt:
    return _attempt(
        SCHEDULED_MS + sent_after_ms,
        SCHEDULED_MS + end_after_ms,
        status=200,
        first_token_ms=None if first_token_after_ms is None else SCHEDULED_MS + first_token_after_ms,
        tokens=tokens,
    )


def _failed(failure: FailureKind, status: int | None = None, *, number: int = 1) -> Attempt:
    return _attempt(number=number, failure=failure, status=status)


@pytest.mark.parametrize(
    ("attempts", "outcome"),
    [
        ((), Outcome.NOT_SENT),
        # e2e, from the scheduled time, bound included
        ((_ok(1500),), Outcome.ON_TIME),
        ((_ok(2000),), Outcome.ON_TIME),
        ((_ok(2001),), Outcome.LATE),
        # sent late by the generator: the wait counts, though the attempt itself took 600 ms
        ((_ok(2100, first_token_after_ms=1600, sent_after_ms=1500),), Outcome.LATE),
        # ttft, from the scheduled time
        ((_ok(1000, first_token_after_ms=500),), Outcome.ON_TIME),
        ((_ok(1000, first_token_after_ms=501),), Outcome.LATE),
        # no first token recorded (a plain HTTP answer): the whole response is the first token
        ((_ok(400, first_token_after_ms=None),), Outcome.ON_TIME),
        ((_ok(600, first_token_after_ms=None),), Outcome.LATE),
        # tpot: (end − first token) / (tokens − 1)
        ((_ok(600, first_token_after_ms=100, tokens=11),), Outcome.ON_TIME),  # 50 ms per token
        ((_ok(700, first_token_after_ms=100, tokens=11),), Outcome.LATE),  # 60 ms per token
        ((_ok(1900, first_token_after_ms=100, tokens=1),), Outcome.ON_TIME),  # one token: no tpot to judge
        # failures
        ((_failed(FailureKind.STATUS, 429),), Outcome.SHED),
        ((_failed(FailureKind.STATUS, 503),), Outcome.SHED),
        ((_failed(FailureKind.STATUS, 500),), Outcome.ERROR),
        ((_failed(FailureKind.STATUS, 502),), Outcome.ERROR),
        ((_failed(FailureKind.STATUS, 404),), Outcome.ERROR),
        ((_failed(FailureKind.STATUS, None),), Outcome.ERROR),
        ((_failed(FailureKind.TIMEOUT),), Outcome.TIMEOUT),
        ((_failed(FailureKind.CONNECTION),), Outcome.ERROR),
        ((_failed(FailureKind.TRUNCATED),), Outcome.ERROR),
        # a 3xx not followed is a class of its own; a hop the allowlist refused is an error
        ((_failed(FailureKind.REDIRECT, 307),), Outcome.REDIRECT),
        ((_failed(FailureKind.REDIRECT, 301),), Outcome.REDIRECT),
        ((_failed(FailureKind.REFUSED, 302),), Outcome.ERROR),
        # only the final attempt decides
        ((_failed(FailureKind.STATUS, 429), _ok(1500)), Outcome.ON_TIME),
        ((_ok(1500), _failed(FailureKind.TIMEOUT, number=2)), Outcome.TIMEOUT),
        ((_failed(FailureKind.TIMEOUT), _failed(FailureKind.STATUS, 503, number=2)), Outcome.SHED),
        ((_failed(FailureKind.STATUS, 503), _failed(FailureKind.CONNECTION, number=2)), Outcome.ERROR),
    ],
)
def test_classify_judges_the_final_attempt_against_the_slo_from_the_scheduled_time(
    attempts: tuple[Attempt, ...], outcome: Outcome
) -> None:
    assert classify(attempts, scheduled_ns=_ns(SCHEDULED_MS), slo=SLO) is outcome


def test_without_ttft_or_tpot_bounds_only_e2e_is_judged() -> None:
    slo = Slo(e2e_ms=2000, timeout_ms=5000)
    slow_start = _ok(1900, first_token_after_ms=1800, tokens=3)

    assert classify((slow_start,), scheduled_ns=_ns(SCHEDULED_MS), slo=slo) is Outcome.ON_TIME


@pytest.mark.parametrize(
    ("attempt", "missed"),
    [
        (_ok(1500, first_token_after_ms=100, tokens=29), ()),  # 50 ms per token
        (_ok(2001, first_token_after_ms=100), ("e2e",)),
        (_ok(1000, first_token_after_ms=501), ("ttft",)),
        (_ok(700, first_token_after_ms=100, tokens=11), ("tpot",)),
        (_ok(2600, first_token_after_ms=600, tokens=11), ("e2e", "ttft", "tpot")),
        (_ok(600, first_token_after_ms=None), ("ttft",)),  # the whole answer is the first token
    ],
)
def test_missed_bounds_names_every_slo_bound_a_late_answer_broke(attempt: Attempt, missed: tuple[str, ...]) -> None:
    assert missed_bounds(attempt, scheduled_ns=_ns(SCHEDULED_MS), slo=SLO) == missed
    expected = Outcome.LATE if missed else Outcome.ON_TIME
    assert classify((attempt,), scheduled_ns=_ns(SCHEDULED_MS), slo=SLO) is expected


@pytest.mark.parametrize(
    ("first_token_ms", "end_ms", "tokens", "tpot_ms"),
    [
        (None, 1000, 10, None),
        (100, 1000, 0, None),
        (100, 1000, 1, None),
        (100, 1000, 2, 900),
        (100, 1100, 11, 100),
        (100, 100, 5, 0),
    ],
)
def test_time_per_output_token_is_the_mean_gap_after_the_first(
    first_token_ms: float | None, end_ms: float, tokens: int, tpot_ms: float | None
) -> None:
    attempt = _attempt(0, end_ms, first_token_ms=first_token_ms, tokens=tokens)

    assert time_per_output_token_ms(attempt) == tpot_ms


def _record(attempts: tuple[Attempt, ...]) -> RequestRecord:
    return RequestRecord(
        id=1,
        phase=0,
        scheduled_ns=_ns(SCHEDULED_MS),
        prompt_tokens=100,
        max_tokens=20,
        attempts=attempts,
        outcome=classify(attempts, scheduled_ns=_ns(SCHEDULED_MS), slo=SLO),
    )


def test_a_record_measures_its_latencies_from_the_scheduled_time_of_the_final_attempt() -> None:
    retry = _attempt(SCHEDULED_MS + 300, SCHEDULED_MS + 1300, number=2, first_token_ms=SCHEDULED_MS + 400, tokens=11)
    record = _record((_failed(FailureKind.STATUS, 503), retry))

    assert record.final is retry
    assert record.finished_ns == _ns(SCHEDULED_MS + 1300)
    assert record.e2e_ms == 1300
    assert record.ttft_ms == 400
    assert record.tpot_ms == 90
    assert record.schedule_lag_ms == 0  # the first attempt left on time


def test_schedule_lag_is_how_late_the_first_attempt_left() -> None:
    record = _record((_ok(900, sent_after_ms=250),))

    assert record.schedule_lag_ms == 250


def test_a_failed_final_attempt_has_an_e2e_but_no_ttft_or_tpot() -> None:
    failed = _attempt(
        SCHEDULED_MS, SCHEDULED_MS + 700, failure=FailureKind.TRUNCATED, first_token_ms=SCHEDULED_MS + 100, tokens=5
    )
    record = _record((failed,))

    assert record.e2e_ms == 700
    assert record.ttft_ms is None
    assert record.tpot_ms is None


def test_a_request_never_sent_has_no_latencies() -> None:
    record = _record(())

    assert record.outcome is Outcome.NOT_SENT
    assert (
        record.final,
        record.finished_ns,
        record.e2e_ms,
        record.ttft_ms,
        record.tpot_ms,
        record.schedule_lag_ms,
    ) == (
        None,
        None,
        None,
        None,
        None,
        None,
    )


def test_an_attempt_succeeded_exactly_when_it_has_no_failure() -> None:
    assert _ok(100).succeeded
    assert not _failed(FailureKind.STATUS, 500).succeeded


def test_every_outcome_class_has_its_words_and_the_groups_partition_them() -> None:
    """Each class has a label, a short label and sentence forms; succeeded, failed and not sent cover
    every class once, and not-on-time is every class but on time."""
    assert set(OUTCOME_TEXT) == set(Outcome)
    for text in OUTCOME_TEXT.values():
        assert text.label
        assert text.short
        assert "{count}" in text.counted
        assert "{share}" in text.shared
    assert sorted([*SUCCEEDED, *FAILED, Outcome.NOT_SENT]) == sorted(OUTCOMES)
    assert Outcome.REDIRECT in FAILED
    assert tuple(o for o in OUTCOMES if o is not Outcome.ON_TIME) == NOT_ON_TIME


def test_an_incomplete_final_attempt_is_incomplete_never_on_time_however_fast() -> None:
    hollow = _attempt(SCHEDULED_MS, SCHEDULED_MS + 5, failure=FailureKind.INCOMPLETE, status=200)

    assert classify((hollow,), scheduled_ns=_ns(SCHEDULED_MS), slo=SLO) is Outcome.INCOMPLETE
    assert Outcome.INCOMPLETE in NOT_ON_TIME
    assert Outcome.INCOMPLETE in FAILED


def _reasoned(answer_after_ms: float | None) -> Attempt:
    """Reasoning from 100 ms on (the first token), the answer's first content token at ``answer_after_ms``."""
    return Attempt(
        number=1,
        sent_ns=_ns(SCHEDULED_MS),
        end_ns=_ns(SCHEDULED_MS + 1500),
        status=200,
        first_token_ns=_ns(SCHEDULED_MS + 100),
        first_answer_ns=None if answer_after_ms is None else _ns(SCHEDULED_MS + answer_after_ms),
        output_tokens=40,
        reasoning_tokens=30,
    )


@pytest.mark.parametrize(
    ("answer_after_ms", "missed"),
    [(900, ()), (1001, ("ttfa",)), (None, ("ttfa",))],  # no answer token at all: its user saw no answer
)
def test_ttfa_judges_the_first_answer_token_and_ttft_the_first_token_of_any_kind(
    answer_after_ms: float | None, missed: tuple[str, ...]
) -> None:
    slo = Slo(e2e_ms=2000, timeout_ms=5000, ttft_ms=500, ttfa_ms=1000)
    attempt = _reasoned(answer_after_ms)

    assert missed_bounds(attempt, scheduled_ns=_ns(SCHEDULED_MS), slo=slo) == missed
    record = _record((attempt,))
    assert record.ttft_ms == 100
    assert record.ttfa_ms == answer_after_ms
