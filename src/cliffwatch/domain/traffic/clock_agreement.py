"""How a coordinator and a generator worker on another machine agree on when the run starts.

Every worker sends on its own monotonic clock. On the coordinator's machine that clock is the coordinator's
(one kernel, one ``CLOCK_MONOTONIC``: the worker says it runs under the same boot id), so the run's start needs
no translation. A worker on another machine (a Ray node) has a clock of its own: the coordinator measures the
offset the way NTP does, by round trips (it sends its time, the worker answers with its own, the coordinator
notes when the answer came back), keeps the round trip that was shortest, and sends that worker the start in
its own clock. The measurement is only as good as half that round trip; the offset is measured again after the
run, and a worker whose start could be off by more than the bound (``GeneratorLimits.clock_skew_ms``) makes the
run invalid, saying which and by how much: its requests left at times the schedule does not say.

The wall clocks are compared on the same round trips. They play no part in the schedule (a wall clock may be
stepped by NTP in the middle of a run); they are reported, because an operator reading two machines' logs side by
side wants to know how far apart their clocks were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cliffwatch.domain.outcomes import NS_PER_MS


@dataclass(frozen=True, kw_only=True)
class ClockSample:
    """One round trip: the coordinator's clock when it asked and when the answer came back, the worker's in
    between (monotonic), and both wall clocks (the coordinator's at mid-trip)."""

    sent_ns: int
    their_ns: int
    received_ns: int
    our_wall_ns: int
    their_wall_ns: int

    @property
    def round_trip_ns(self) -> int:
        return self.received_ns - self.sent_ns


@dataclass(frozen=True, kw_only=True)
class ClockAgreement:
    """A worker's clock against the coordinator's: its reading minus ours, and how well that is known."""

    offset_ns: int = 0  # monotonic: add it to a coordinator time to get the same instant on the worker's clock
    uncertainty_ns: int = 0  # half the shortest round trip: the offset is right to within this
    wall_offset_ns: int = 0  # the worker's wall clock minus the coordinator's (reported, never used)
    same_clock: bool = True  # one machine: one clock, nothing to measure

    def to_worker(self, coordinator_ns: int) -> int:
        return coordinator_ns + self.offset_ns


SAME_CLOCK = ClockAgreement()


def agreement(samples: Sequence[ClockSample]) -> ClockAgreement:
    """The agreement from round trips: the shortest one is the least disturbed by queueing on the way."""
    if not samples:
        raise ValueError("a clock agreement needs at least one round trip")
    best = min(samples, key=lambda s: s.round_trip_ns)
    midpoint = best.sent_ns + best.round_trip_ns // 2
    return ClockAgreement(
        offset_ns=best.their_ns - midpoint,
        uncertainty_ns=(best.round_trip_ns + 1) // 2,
        wall_offset_ns=best.their_wall_ns - best.our_wall_ns,
        same_clock=False,
    )


def skew_ms(start: ClockAgreement, end: ClockAgreement | None) -> float:
    """How far off, at most, the start a worker was sent could have been by the end of the run: the start's
    uncertainty, plus how far the offset moved (and how well the end's is known). 0 on the same clock; without a
    measurement at the end (the worker was gone), only the start's uncertainty is known."""
    if start.same_clock:
        return 0.0
    if end is None:
        return start.uncertainty_ns / NS_PER_MS
    moved = abs(end.offset_ns - start.offset_ns)
    return (start.uncertainty_ns + moved + end.uncertainty_ns) / NS_PER_MS


def skew_problem(label: str, skew: float, *, bound_ms: float) -> str | None:
    """Why a worker's share does not count as sent on schedule, or None when its clock was known well enough."""
    if skew <= bound_ms:
        return None
    return (
        f"{label}: its clock was known only to within {skew:.1f} ms of the coordinator's (bound {bound_ms:g} ms), "
        "so its requests may have left off schedule by that much"
    )
