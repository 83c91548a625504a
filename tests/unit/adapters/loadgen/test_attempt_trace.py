"""Whose an attempt's timeout is: one that never left the client is not sent, and says why."""

from __future__ import annotations

from cliffwatch.adapters.loadgen.attempt_trace import AttemptTrace

MS = 1_000_000


def test_an_attempt_whose_request_left_is_the_targets_timeout() -> None:
    trace = AttemptTrace()
    trace.sent = True
    assert trace.unsent_reason("attempt timeout after 2s", 5 * MS) is None


def test_an_attempt_opening_a_connection_to_the_target_is_the_targets_timeout() -> None:
    """A connect the target does not accept in time reached the target: its timeout, not the client's."""
    trace = AttemptTrace()
    trace.connecting = True
    assert trace.unsent_reason("attempt timeout after 2s", 5 * MS) is None


def test_an_attempt_still_waiting_for_a_pooled_connection_is_not_sent_with_its_whole_wait() -> None:
    """Waits that ended (an earlier hop's) and the one still open when its time ran out both count."""
    trace = AttemptTrace()
    trace.pool_wait_ns = 100 * MS
    trace.queued_start = 1000 * MS
    reason = trace.unsent_reason("attempt timeout after 2s", 2900 * MS)
    assert reason == (
        "not sent: attempt timeout after 2s before the request left the client, "
        "2000 ms of it waiting for a pooled connection (client.pool_size)"
    )
    assert (trace.pool_wait_ns, trace.queued_start) == (2000 * MS, 0)


def test_an_attempt_with_a_connection_in_hand_that_was_never_written_is_the_clients() -> None:
    trace = AttemptTrace()
    reason = trace.unsent_reason("request deadline reached after 0.5s", 5 * MS)
    assert reason is not None
    assert reason.startswith("not sent: request deadline reached after 0.5s before the request left the client")
    assert "could not write it in time" in reason


def test_closing_a_trace_that_is_not_waiting_changes_nothing() -> None:
    trace = AttemptTrace()
    trace.pool_wait_ns = 7
    trace.close(10 * MS)
    assert (trace.pool_wait_ns, trace.queued_start) == (7, 0)
