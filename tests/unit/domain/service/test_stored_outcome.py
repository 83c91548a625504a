"""A request's stored row reads its record the way the record reads itself (``outcome_fields`` inlines the
record's properties for the service's hot path: these hold it to them)."""

from __future__ import annotations

import pytest

from cliffwatch.domain.outcomes import (
    CAP_REASON,
    NS_PER_MS,
    Attempt,
    FailureKind,
    Outcome,
    RequestRecord,
    TokenSource,
)
from cliffwatch.domain.service.runs import StoredOutcome, outcome_fields

MS = NS_PER_MS


def record(attempts: tuple[Attempt, ...], outcome: Outcome, **changes: object) -> RequestRecord:
    values: dict[str, object] = {"id": 7, "phase": 1, "scheduled_ns": 1_000 * MS, "prompt_tokens": 64,
                                 "max_tokens": 16, "attempts": attempts, "outcome": outcome}  # fmt: skip
    values.update(changes)
    return RequestRecord(**values)  # type: ignore[arg-type]


STREAMED = Attempt(number=1, sent_ns=1_002 * MS, end_ns=1_300 * MS, status=200, first_byte_ns=1_020 * MS,
                   first_token_ns=1_030 * MS, first_answer_ns=1_040 * MS, output_tokens=11,
                   token_source=TokenSource.USAGE)  # fmt: skip
SHED = Attempt(number=1, sent_ns=1_001 * MS, end_ns=1_005 * MS, status=429, failure=FailureKind.STATUS,
               first_token_ns=1_004 * MS, output_tokens=2)  # fmt: skip
RECORDS = {
    "a streamed success": record((STREAMED,), Outcome.ON_TIME),
    "shed, then a success": record((SHED, Attempt(**{**STREAMED.__dict__, "number": 2})), Outcome.LATE),
    "a failure with a token": record((SHED,), Outcome.SHED),
    "never sent": record((), Outcome.NOT_SENT, not_sent_reason="deadline passed before the first attempt"),
    "a retry the cap refused": record((SHED,), Outcome.SHED, capped=True),
    "a conversation's turn": record((STREAMED,), Outcome.ON_TIME, conversation=3, turn=2, turns=4, klass=1),
}


@pytest.mark.parametrize("name", RECORDS)
def test_a_row_holds_what_the_record_says_of_itself(name: str) -> None:
    rec = RECORDS[name]
    stored = StoredOutcome.of("run-1", rec)

    assert (stored.e2e_ms, stored.ttft_ms, stored.tpot_ms, stored.schedule_lag_ms) == (
        rec.e2e_ms, rec.ttft_ms, rec.tpot_ms, rec.schedule_lag_ms)  # fmt: skip
    assert stored.output_tokens == sum(a.output_tokens for a in rec.attempts)
    assert stored.attempts == len(rec.attempts)
    assert stored.outcome == rec.outcome.value
    assert outcome_fields("run-1", rec) == stored.to_dict()


def test_a_failed_attempt_has_no_time_to_first_token_even_with_one_recorded() -> None:
    stored = StoredOutcome.of("run-1", RECORDS["a failure with a token"])

    assert (stored.ttft_ms, stored.tpot_ms, stored.e2e_ms) == (None, None, 5.0)


def test_a_refused_retry_is_logged_as_the_attempt_not_sent() -> None:
    stored = StoredOutcome.of("run-1", RECORDS["a retry the cap refused"])

    assert stored.attempt_log[-1] == {"number": 2, "not_sent": CAP_REASON}
    assert StoredOutcome.of("run-1", RECORDS["never sent"]).error == "deadline passed before the first attempt"
