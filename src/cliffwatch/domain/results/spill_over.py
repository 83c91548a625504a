"""Which baseline requests the score's reference keeps: the spill-over rule, and what the kept requests did.

A baseline request still running when conditions change (a fault comes on, the next phase begins) describes
the change, not the normal: it is *spill-over*. It stays in every count and table of its phase; only the
reference that preservation and recovery compare with (``reference``) leaves it out. The rule reads the
request's own times and the phases' planned windows, nothing else, so each record is judged as it is
counted and nothing per request is kept. docs/scoring.md has the rule in words.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_MS, Outcome, RequestRecord
from cliffwatch.domain.scenario.scenario import PhaseRole
from cliffwatch.domain.traffic.plan import PhaseWindow


class SpillOver(StrEnum):
    """Why a baseline request was left out of the reference."""

    FAULT_CAME_ON = "fault_came_on"
    UNDER_FAULT = "under_fault"
    NEXT_PHASE = "next_phase"


SPILL_OVER_TEXT: Mapping[SpillOver, str] = {
    SpillOver.FAULT_CAME_ON: "still in flight when a fault came on",
    SpillOver.UNDER_FAULT: "sent while a fault was on",
    SpillOver.NEXT_PHASE: "still in flight when the next phase began",
}


@dataclass(frozen=True, kw_only=True)
class ConditionChange:
    """A span in which conditions differ from a baseline's: a fault's, from on to off, or everything from the
    start of the phase after the baseline (``end_ns`` None)."""

    start_ns: int
    end_ns: int | None
    fault: bool


def condition_changes(
    windows: Sequence[PhaseWindow], baseline: int, faulted: Collection[int]
) -> tuple[ConditionChange, ...]:
    """What can reach a request of phase ``baseline``: the window of every phase in ``faulted`` (their faults are
    on from its start to its end) that does not end before the baseline begins, then the next phase's start.
    Faults come first, so a request both reach is said to have met the fault."""
    own = windows[baseline]
    found = [ConditionChange(start_ns=w.start_ns, end_ns=w.end_ns, fault=True)
             for w in windows if w.index in faulted and w.end_ns > own.start_ns]  # fmt: skip
    if any(w.start_ns >= own.end_ns for w in windows):
        found.append(ConditionChange(start_ns=own.end_ns, end_ns=None, fault=False))
    return tuple(found)


def spill_over(scheduled_ns: int, end_ns: int, deadline_ns: int, spans: Sequence[ConditionChange]) -> SpillOver | None:
    """Why a request scheduled at ``scheduled_ns`` that ended at ``end_ns`` (its final attempt's end, retries
    included; its scheduled time when nothing was sent) is spill-over, or None when it stays in the reference.

    A change reaches a request that was sent inside its span or still in flight when it began. One reached only
    after ``deadline_ns`` (scheduled + ``slo.e2e_ms``) was already late when it came: the change did not decide
    its outcome, so it stays. Leaving it out would leave out only slow requests, and a baseline that was
    failing slowly would look healthier than it was."""
    for span in spans:
        if span.end_ns is not None and scheduled_ns >= span.end_ns:
            continue
        inside = scheduled_ns >= span.start_ns
        if not inside and end_ns <= span.start_ns:
            continue
        if max(span.start_ns, scheduled_ns) >= deadline_ns:
            continue
        if not span.fault:
            return SpillOver.NEXT_PHASE
        return SpillOver.UNDER_FAULT if inside else SpillOver.FAULT_CAME_ON
    return None


@dataclass(kw_only=True)
class ReferenceStats:
    """The baseline requests no change reached, which the reference is built from, and the spill-over left out."""

    offered: int = 0
    on_time: int = 0
    e2e: Histogram = field(default_factory=Histogram)  # the kept successes' end-to-end latency, ms
    spill_over: Counter[SpillOver] = field(default_factory=Counter)


class ReferenceBook:
    """Counts each baseline record into the reference or as spill-over, as the aggregator adds it."""

    def __init__(self, windows: Sequence[PhaseWindow], *, faulted: Collection[int] = ()) -> None:
        # None for a phase that is not a baseline: its records never enter the reference.
        self._spans = [
            condition_changes(windows, w.index, faulted) if w.role is PhaseRole.BASELINE else None for w in windows
        ]
        self.stats = ReferenceStats()

    def add(self, record: RequestRecord, e2e_ns: int) -> None:
        """Counts ``record`` if it is a baseline request; ``e2e_ns``: the e2e bound its outcome was judged by."""
        spans = self._spans[record.phase]
        if spans is None:
            return
        scheduled_ns, final = record.scheduled_ns, record.final
        end_ns = scheduled_ns if final is None else final.end_ns
        stats = self.stats
        why = spill_over(scheduled_ns, end_ns, scheduled_ns + e2e_ns, spans)
        if why is not None:
            stats.spill_over[why] += 1
            return
        stats.offered += 1
        stats.on_time += record.outcome is Outcome.ON_TIME
        if final is not None and final.failure is None:  # as the phase's own e2e histogram counts successes
            stats.e2e.add(max(0.0, (end_ns - scheduled_ns) / NS_PER_MS))
