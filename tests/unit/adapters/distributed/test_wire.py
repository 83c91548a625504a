"""The coordinator-worker stream: messages framed and read back whole, requests and records as compact rows."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from cliffwatch.adapters.distributed.wire import (
    WireBroken,
    pack,
    plan_row,
    planned,
    receive,
    record_row,
    recorded,
)
from cliffwatch.domain.outcomes import Attempt, Outcome, RequestRecord, TokenSource
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.traffic.plan import PlannedRequest


def stream_of(data: bytes, *, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


async def test_messages_come_back_whole_and_in_order_then_the_end_is_named() -> None:
    reader = stream_of(pack(("go", 123)) + pack(("plan", [(1, 2)])) + pack(("end",)))
    assert await receive(reader) == ("go", 123)
    assert await receive(reader) == ("plan", [(1, 2)])
    assert await receive(reader) == ("end",)
    with pytest.raises(WireBroken, match="closed"):
        await receive(reader)


async def test_a_message_cut_short_is_a_broken_stream() -> None:
    with pytest.raises(WireBroken, match="closed"):
        await receive(stream_of(pack(("go", 1))[:-2]))


@pytest.mark.parametrize(
    "data",
    [b"\xff\xff\xff\xff" + b"x", len(b"junk").to_bytes(4, "big") + b"junk",
     len(pickle.dumps([1])).to_bytes(4, "big") + pickle.dumps([1])],
)  # fmt: skip
async def test_what_is_not_a_message_is_a_broken_stream(data: bytes) -> None:
    with pytest.raises(WireBroken):
        await receive(stream_of(data))


def test_a_planned_request_survives_its_row() -> None:
    request = PlannedRequest(id=7, phase=1, scheduled_ns=5_000, prompt_tokens=64, max_tokens=16, entry=3, klass=1,
                             prefix=2, conversation=7, turn=1, turns=3)  # fmt: skip
    assert planned(plan_row(request)) == request
    assert all(not hasattr(v, "__dict__") for v in plan_row(request))  # plain values only


def test_a_record_with_every_kind_of_attempt_survives_its_row() -> None:
    record = RequestRecord(
        id=9, phase=0, scheduled_ns=10, prompt_tokens=5, max_tokens=8, outcome=Outcome.LATE, capped=True, klass=2,
        attempts=(
            Attempt(number=1, sent_ns=11, end_ns=50, failure=FailureKind.STATUS, status=503, error="busy",
                    retry_after_s=1.5, state=(("x-ratelimit-remaining", 0.0),)),
            Attempt(number=2, sent_ns=60, end_ns=90, status=200, first_byte_ns=70, first_token_ns=71,
                    first_answer_ns=72, chunk_times_ns=(71, 80, 89), output_tokens=3, token_source=TokenSource.USAGE,
                    reasoning_tokens=1, server_prompt_tokens=6),
        ),
    )  # fmt: skip
    back = recorded(record_row(record))
    assert back == record
    assert back.attempts[0].failure is FailureKind.STATUS
    assert back.outcome is Outcome.LATE
    assert b"FailureKind" not in pickle.dumps(record_row(record))  # enums travel as their values


def test_a_record_never_sent_survives_its_row() -> None:
    record = RequestRecord(id=1, phase=0, scheduled_ns=0, prompt_tokens=1, max_tokens=1, attempts=(),
                           outcome=Outcome.NOT_SENT, not_sent_reason="generator worker 1 of 2 died")  # fmt: skip
    assert recorded(record_row(record)) == record


@pytest.mark.parametrize(
    "row",
    [(1, 2, 3), (9, 0, 10, 5, 8, (), "no-such-outcome", None, False, 0, -1, 0, 0, False),
     (9, 0, 10, 5, 8, ((1, 2),), "on_time", None, False, 0, -1, 0, 0, False)],
)  # fmt: skip
def test_a_record_row_out_of_step_is_a_broken_stream_not_a_crash(row: tuple[object, ...]) -> None:
    with pytest.raises(WireBroken, match="record"):
        recorded(row)


def test_a_planned_row_out_of_step_is_a_broken_stream_not_a_crash() -> None:
    with pytest.raises(WireBroken, match="planned"):
        planned((1, 2, 3))
