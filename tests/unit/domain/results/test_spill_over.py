"""The spill-over rule: which baseline requests the score's reference keeps, and what it counts of them."""

from __future__ import annotations

import pytest

from cliffwatch.domain.outcomes import NS_PER_S, Attempt, Outcome, RequestRecord
from cliffwatch.domain.results.spill_over import (
    ConditionChange,
    ReferenceBook,
    SpillOver,
    condition_changes,
    spill_over,
)
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import PhaseRole
from cliffwatch.domain.traffic.plan import PhaseWindow

E2E_NS = 4 * NS_PER_S  # slow-backend's e2e bound


def _ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


def _windows(*roles: PhaseRole, seconds: float = 10) -> tuple[PhaseWindow, ...]:
    """Consecutive phases of ``seconds`` each from the run's start."""
    step = _ns(seconds)
    return tuple(PhaseWindow(index=i, name=f"{role.value}-{i}", role=role, start_ns=i * step, end_ns=(i + 1) * step)
                 for i, role in enumerate(roles))  # fmt: skip


BASELINE_THEN_FAULT = _windows(PhaseRole.BASELINE, PhaseRole.STRESS, PhaseRole.RECOVERY)


@pytest.mark.parametrize(
    ("scheduled_s", "end_s", "expected"),
    [
        (5.0, 7.0, None),  # over well before the next phase
        (8.0, 9.999, None),  # over just before it
        (8.0, 10.0, None),  # over at the instant it begins: nothing changed under it
        (8.5, 10.001, SpillOver.FAULT_CAME_ON),  # still streaming when the stress and its toxic came on
        (9.9, 15.0, SpillOver.FAULT_CAME_ON),  # sent in the baseline's last moment
        (7.0, 12.0, SpillOver.FAULT_CAME_ON),  # its deadline (11 s) still ahead when the fault came on
        (6.0, 12.0, None),  # its deadline (10 s) was up when the fault came on: late before it, it stays
        (3.0, 25.0, None),  # already late when the fault came on, still running when it went off
        (9.5, 9.5, None),  # never sent: its life is its scheduled instant
    ],
)
def test_a_baseline_request_reached_by_a_fault_the_next_phase_brings_is_spill_over(
    scheduled_s: float, end_s: float, expected: SpillOver | None
) -> None:
    """A baseline request still in flight when the next phase began with its fault, its outcome still open, is
    spill-over; one over before that moment, or already past its deadline then, stays in the reference."""
    spans = condition_changes(BASELINE_THEN_FAULT, 0, faulted={1})
    assert spill_over(_ns(scheduled_s), _ns(end_s), _ns(scheduled_s) + E2E_NS, spans) is expected


@pytest.mark.parametrize(
    ("scheduled_s", "end_s", "expected"),
    [(9.0, 10.5, SpillOver.NEXT_PHASE), (8.0, 9.9, None), (9.0, 10.0, None)],
)
def test_a_baseline_request_still_running_when_the_next_phase_began_is_spill_over(
    scheduled_s: float, end_s: float, expected: SpillOver | None
) -> None:
    """Without a fault, the next phase's start is the change: a burst there queues ahead of what is still running."""
    spans = condition_changes(BASELINE_THEN_FAULT, 0, faulted=())
    assert spill_over(_ns(scheduled_s), _ns(end_s), _ns(scheduled_s) + E2E_NS, spans) is expected


@pytest.mark.parametrize(
    ("scheduled_s", "end_s", "expected"),
    [
        (1.0, 3.0, None),  # over before the fault came on
        (3.5, 4.5, SpillOver.FAULT_CAME_ON),  # in flight when it came on
        (5.0, 5.5, SpillOver.UNDER_FAULT),  # sent while it was on
        (5.5, 5.5, SpillOver.UNDER_FAULT),  # planned while it was on, never sent
        (6.5, 8.0, None),  # sent after it went off
    ],
)
def test_a_fault_window_inside_the_baseline_phase_counts_too(
    scheduled_s: float, end_s: float, expected: SpillOver | None
) -> None:
    """A fault on from 4 s to 6 s of a baseline reaches what was in flight when it came on and what was sent
    under it."""
    spans = (ConditionChange(start_ns=_ns(4), end_ns=_ns(6), fault=True),)
    assert spill_over(_ns(scheduled_s), _ns(end_s), _ns(scheduled_s) + E2E_NS, spans) is expected


def test_the_spans_that_can_reach_a_baseline_are_later_faults_and_the_next_phase_never_an_earlier_fault() -> None:
    """A fault that went off before the baseline began cannot reach it; its own faults and later ones can, and
    the next phase's start is always one; a baseline that ends the run has no next phase."""
    windows = _windows(PhaseRole.STRESS, PhaseRole.BASELINE, PhaseRole.STRESS, PhaseRole.BASELINE)
    assert condition_changes(windows, 1, faulted={0, 2}) == (
        ConditionChange(start_ns=_ns(20), end_ns=_ns(30), fault=True),
        ConditionChange(start_ns=_ns(20), end_ns=None, fault=False),
    )
    assert condition_changes(windows, 3, faulted={0, 2, 3}) == (
        ConditionChange(start_ns=_ns(30), end_ns=_ns(40), fault=True),
    )


def _record(
    phase: int, scheduled_s: float, end_s: float | None, outcome: Outcome, *, retried: bool = False
) -> RequestRecord:
    attempts: tuple[Attempt, ...] = ()
    if end_s is not None:
        final = Attempt(number=2 if retried else 1, sent_ns=_ns(scheduled_s + 0.2 if retried else scheduled_s),
                        end_ns=_ns(end_s), status=200)  # fmt: skip
        first = Attempt(number=1, sent_ns=_ns(scheduled_s), end_ns=_ns(scheduled_s + 0.1), status=503,
                        failure=FailureKind.STATUS)  # fmt: skip
        attempts = (first, final) if retried else (final,)
    return RequestRecord(id=0, phase=phase, scheduled_ns=_ns(scheduled_s), prompt_tokens=8, max_tokens=8,
                         attempts=attempts, outcome=outcome)  # fmt: skip


def test_the_book_keeps_the_baseline_requests_no_change_reached_and_counts_the_rest_apart() -> None:
    """Kept requests give the reference's counts and e2e; spill-over (judged by the final attempt's end, a retry's
    included) is only counted by why; other phases' requests are none of its business."""
    book = ReferenceBook(BASELINE_THEN_FAULT, faulted={1})
    book.add(_record(0, 2.0, 4.0, Outcome.ON_TIME), E2E_NS)
    book.add(_record(0, 3.0, 8.5, Outcome.LATE), E2E_NS)  # late on its own, before anything changed
    book.add(_record(0, 4.0, None, Outcome.NOT_SENT), E2E_NS)
    book.add(_record(0, 8.5, 10.5, Outcome.ON_TIME, retried=True), E2E_NS)  # its retry ran into the fault
    book.add(_record(0, 9.0, 14.0, Outcome.LATE), E2E_NS)
    book.add(_record(1, 12.0, 13.0, Outcome.LATE), E2E_NS)
    stats = book.stats
    assert (stats.offered, stats.on_time) == (3, 1)
    assert stats.e2e.count == 2  # the successes kept: the not-sent one has no latency
    assert stats.e2e.max == pytest.approx(5_500, rel=0.01)
    assert dict(stats.spill_over) == {SpillOver.FAULT_CAME_ON: 2}


def test_the_deadline_is_the_bound_the_request_was_judged_by() -> None:
    """A class with a 1 s e2e bound was already late at the change 2 s after its send; one with 4 s was not."""
    book = ReferenceBook(BASELINE_THEN_FAULT, faulted={1})
    book.add(_record(0, 8.0, 11.0, Outcome.LATE), NS_PER_S)
    book.add(_record(0, 8.0, 11.0, Outcome.LATE), E2E_NS)
    assert (book.stats.offered, dict(book.stats.spill_over)) == (1, {SpillOver.FAULT_CAME_ON: 1})
