"""How much of a Poisson step's lateness was the luck of its draw: a reference queue fed the same arrivals.

A sweep step at a slow server holds a few dozen requests, and at a 99 % target a rate turns on whether one
long queue formed in its window. Poisson arrivals queue in clusters, so a short window mostly says whether its
draw held a burst; and a step starts from a drained server, so its window sees less queueing than the rate
makes in the long run (at 10 × the service time, a third of it). Counted as they fall, late requests pass rates
14 % above the truth in the median sweep (docs/sweep.md, "Arrival luck").

The sweep knows the arrivals it drew. It feeds them to a **reference queue**: one slot serving every request in
the sweep's measured busy time per request, starting empty as the server did, whose long-run late share μ is
exact (M/D/1, ``queueing.md1_wait_cdf``). Its late share x̄ in the window, against μ, is the draw's luck. The
control-variate estimate of the server's late share (Lavenberg & Welch 1981) is

    L = ȳ − β (x̄ − μ)

with ȳ the server's share not on time and β the slope of the server's lateness on the reference's, pooled
within steps over the whole sweep. L is unbiased whatever the server (μ is exact); its variance falls by the
square of their correlation, and the drained start is corrected with the luck. A server that is not one queue
(a batching one serves many at once) gains nothing from it and must not be moved by it, so the correction is
applied only when the sweep's own steps show one queue (``fit``): the busy time per request stays within
``BUSY_TOLERANCE`` of the reference's at every rate (a batching server's falls as requests overlap), and the
requests that arrived while another was in hand ended a whole service time after it, not beside it. Then, with
enough late requests, the slope is fitted and must show the server following the reference (a correlation of
at least ``MIN_CORRELATION``, a slope near 1); with too few, the slope is 1 and luck is only charged (a draw
that queued less than the long-run share pays the difference), never credited: conservative. Pure: counts in,
a correction out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from cliffwatch.domain.capacity.queueing import md1_wait_cdf

BUSY_TOLERANCE = 0.15  # every step's busy time per request within this share of the reference's service time
MIN_EVENTS = 10  # requests late at the server or in the reference, over the sweep, before a slope is fitted
MIN_CORRELATION = 0.7  # of the server's lateness with the reference's, within steps
SLOPE_RANGE = (0.5, 2.0)  # β: the server is late about when the reference is
# One slot serves a request that arrived while another was in hand after that one ends: it ends a whole service
# time later. A server that serves several at once ends many such requests sooner. Over the sweep, at least
# MIN_QUEUED of them must have been seen, and at most MAX_OVERLAPPED of them may end within OVERLAP_SERVICES.
MIN_QUEUED = 5
MAX_OVERLAPPED = 0.1
OVERLAP_SERVICES = 0.5
MAX_SERVICES = 50  # a budget of more service times than this: the reference is never late below ρ ≈ 0.9
# (and the M/D/1 sum loses precision beyond it: queueing.md1_wait_cdf)


class WindowRequest(NamedTuple):
    """One request of a step as the reference needs it: scheduled and ended (seconds from the step's start;
    None when it never ended), whether it is in the measured window, whether it was on time."""

    scheduled_s: float
    end_s: float | None
    measured: bool
    on_time: bool


@dataclass(frozen=True, kw_only=True)
class ReferenceReading:
    """One step's requests beside the reference queue's: the counts a correction is fitted and applied on."""

    service_s: float  # the reference slot's service time: the sweep's busy time per request, read on its first step
    busy_s: float  # this step's own busy time per request
    budget_s: float  # the longest wait that still ends within the e2e SLO: the SLO minus the service time
    queued: int  # requests (warm-up included) that arrived while an earlier one was still in hand
    overlapped: int  # of them, ended within OVERLAP_SERVICES service times of it: served beside it, not after
    requests: int  # the window's requests
    missed: int  # of them not on time at the server (late, shed, timed out, failed: every failure)
    reference_late: int  # of them waiting longer than the budget in the reference queue
    both: int  # of them both
    # μ: the reference's long-run share late at the step's rate (1 at or above its saturation: its queue grows
    # without end); None where no share can be trusted (a budget of more than MAX_SERVICES service times)
    expected_share: float | None

    def __post_init__(self) -> None:
        if not (self.service_s > 0 and self.busy_s >= 0 and self.budget_s > 0 and self.requests > 0):
            raise ValueError("a reference reading needs a service time, a budget and requests > 0, a busy time >= 0")
        if not 0 <= self.overlapped <= self.queued:
            raise ValueError(f"overlapped requests ({self.overlapped}) must be within 0..queued ({self.queued})")
        if not 0 <= self.both <= min(self.missed, self.reference_late) or max(self.missed, self.reference_late) > (
            self.requests
        ):
            raise ValueError(f"reference counts out of range: {self.to_dict()}")
        if self.expected_share is not None and not 0 <= self.expected_share <= 1:
            raise ValueError(f"the expected share must be within [0, 1], got {self.expected_share}")

    @property
    def luck(self) -> float | None:
        """The reference's late requests above (below: negative) what its long-run share makes of the window;
        None without a long-run share."""
        if self.expected_share is None:
            return None
        return self.reference_late - self.requests * self.expected_share

    def to_dict(self) -> dict[str, Any]:
        return {"service_s": self.service_s, "busy_s": self.busy_s, "budget_s": self.budget_s,
                "queued": self.queued, "overlapped": self.overlapped, "requests": self.requests,
                "missed": self.missed, "reference_late": self.reference_late, "both": self.both,
                "expected_share": self.expected_share}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReferenceReading:
        return cls(
            service_s=float(data["service_s"]), busy_s=float(data["busy_s"]), budget_s=float(data["budget_s"]),
            queued=int(data["queued"]), overlapped=int(data["overlapped"]),
            requests=int(data["requests"]), missed=int(data["missed"]),
            reference_late=int(data["reference_late"]), both=int(data["both"]),
            expected_share=None if data.get("expected_share") is None else float(data["expected_share"]),
        )  # fmt: skip


def busy_per_request(requests: Sequence[WindowRequest]) -> float | None:
    """The time the server had at least one of ``requests`` in hand, divided by how many ended: a single FIFO
    slot's mean service time at any load; less for a server that overlaps them. None when none ended."""
    spans = sorted((r.scheduled_s, r.end_s) for r in requests if r.end_s is not None)
    if not spans:
        return None
    busy, reach = 0.0, -math.inf
    for start, end in spans:
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return busy / len(spans)


def read_reference(
    requests: Sequence[WindowRequest], *, rate: float, e2e_slo_s: float, service_s: float | None = None
) -> ReferenceReading | None:
    """The step's reading beside a reference slot of ``service_s`` (None: this step's busy time per request,
    for the sweep's first step) fed its requests' scheduled times, in order, from empty.

    None when nothing was measured or ended, or the SLO is under one service time. At or above the reference's
    saturation its long-run share late is 1; over ``MAX_SERVICES`` service times of budget it is not known (the
    reading still carries the step's busy time, which ``fit`` checks).
    """
    ordered = sorted(requests, key=lambda r: r.scheduled_s)
    busy = busy_per_request(ordered)
    service = busy if service_s is None else service_s
    measured = sum(1 for r in ordered if r.measured)
    if busy is None or service is None or not service > 0 or measured == 0:
        return None
    budget = e2e_slo_s - service
    if not budget > 0:
        return None
    missed = reference_late = both = queued = overlapped = 0
    reach = -math.inf  # when the target last had a request in hand, of those scheduled so far
    for scheduled, end in ((r.scheduled_s, r.end_s) for r in ordered if r.end_s is not None):
        if scheduled < reach:
            queued += 1
            overlapped += end - reach < OVERLAP_SERVICES * service
        reach = max(reach, end)
    free = -math.inf
    for request in ordered:
        start = max(request.scheduled_s, free)
        free = start + service
        if request.measured:
            late = start - request.scheduled_s > budget
            missed += not request.on_time
            reference_late += late
            both += late and not request.on_time
    expected: float | None = None
    if rate * service >= 1:
        expected = 1.0
    elif budget <= MAX_SERVICES * service:
        expected = min(1.0, max(0.0, 1.0 - md1_wait_cdf(budget, rate=rate, service_s=service)))
    return ReferenceReading(service_s=service, busy_s=busy, budget_s=budget, queued=queued, overlapped=overlapped,
                            requests=measured, missed=missed,
                            reference_late=reference_late, both=both, expected_share=expected)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LuckCorrection:
    """The sweep's correction: the slope β when the reference fits its steps, else None and why not."""

    slope: float | None
    correlation: float | None
    events: int  # requests late at the server or in the reference, over the fitted steps
    steps: int  # steps with a reading
    # Too few late requests to fit a slope on one queue: slope 1, and a draw's luck is only ever charged (its
    # late requests short of the long-run share added), never credited: conservative, not fitted.
    one_sided: bool = False
    reason: str  # why it is applied, or why not

    @property
    def applied(self) -> bool:
        return self.slope is not None

    def corrected_missed(self, readings: Iterable[ReferenceReading | None]) -> float | None:
        """The missed requests of one rate's trials, corrected for their luck: Σ missed − β·Σ luck, within
        [0, requests]; None when not applied or a trial has no reading (it cannot be corrected)."""
        found = list(readings)
        if self.slope is None or not found or any(r is None for r in found):
            return None
        present = [r for r in found if r is not None]
        lucks = [r.luck for r in present]
        if any(luck is None for luck in lucks):
            return None
        total = sum(r.requests for r in present)
        missed = sum(r.missed for r in present)
        value = missed - self.slope * math.fsum(luck for luck in lucks if luck is not None)
        if self.one_sided:
            value = max(float(missed), value)
        return min(float(total), max(0.0, value))

    def to_dict(self) -> dict[str, Any]:
        return {"applied": self.applied, "slope": self.slope, "correlation": self.correlation,
                "events": self.events, "steps": self.steps, "one_sided": self.one_sided,
                "reason": self.reason}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LuckCorrection:
        slope, correlation = data.get("slope"), data.get("correlation")
        return cls(slope=None if slope is None else float(slope),
                   correlation=None if correlation is None else float(correlation),
                   events=int(data["events"]), steps=int(data["steps"]), reason=str(data["reason"]),
                   one_sided=bool(data.get("one_sided", False)))  # fmt: skip


def fit(readings: Iterable[ReferenceReading]) -> LuckCorrection:
    """Whether the reference fits the sweep's steps, and its slope β when it does (module docstring)."""
    found = list(readings)
    if not found:
        return LuckCorrection(slope=None, correlation=None, events=0, steps=0,
                              reason="no step could be set beside a reference queue")  # fmt: skip
    events = sum(r.missed + r.reference_late - r.both for r in found)
    # Within steps: each step's own means taken out, so a rate's level does not pass for agreement.
    sxx = math.fsum(r.reference_late - r.reference_late**2 / r.requests for r in found)
    syy = math.fsum(r.missed - r.missed**2 / r.requests for r in found)
    sxy = math.fsum(r.both - r.reference_late * r.missed / r.requests for r in found)
    correlation = sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None
    service = found[0].service_s

    def refused(reason: str) -> LuckCorrection:
        return LuckCorrection(slope=None, correlation=correlation, events=events, steps=len(found), reason=reason)

    off = [r for r in found if abs(r.busy_s / r.service_s - 1) > BUSY_TOLERANCE]
    if off:
        busy = sorted(r.busy_s for r in found)
        return refused(f"not one queue: the busy time per request ranged {busy[0] * 1000:.0f}–{busy[-1] * 1000:.0f}"
                       f" ms across steps against the reference's {service * 1000:.0f} ms")  # fmt: skip
    queued, overlapped = sum(r.queued for r in found), sum(r.overlapped for r in found)
    if queued < MIN_QUEUED:
        return refused(f"not yet seen queueing: one queue shows in the requests that arrive while another is in "
                       f"hand ({queued} < {MIN_QUEUED})")  # fmt: skip
    if overlapped > MAX_OVERLAPPED * queued:
        return refused(f"not one queue: {overlapped} of {queued} requests that arrived while another was in hand "
                       f"ended within {OVERLAP_SERVICES:g} service times of it (beside it, not after)")  # fmt: skip
    if events < MIN_EVENTS:
        # One queue, by its busy time and its queued requests, but too little lateness to fit a slope on: a lucky
        # draw (the reference late less often than its long-run share) is still charged, at slope 1; an unlucky one
        # is not credited.
        return LuckCorrection(slope=1.0, correlation=correlation, events=events, steps=len(found), one_sided=True,
                              reason=f"too few late requests to fit on ({events} < {MIN_EVENTS}): a lucky draw is "
                                     "charged its shortfall against the reference's long-run share, an unlucky "
                                     "one is not credited")  # fmt: skip
    if correlation is None or correlation < MIN_CORRELATION:
        shown = "none" if correlation is None else f"{correlation:.2f}"
        return refused(f"the server's lateness does not follow the reference's (correlation {shown})")
    slope = sxy / sxx
    if not SLOPE_RANGE[0] <= slope <= SLOPE_RANGE[1]:
        return refused(f"the server's lateness does not follow the reference's (slope {slope:.2f})")
    reason = (f"a {service * 1000:.0f}-ms single-slot reference fits the steps (correlation {correlation:.2f}, "
              f"slope {slope:.2f}, {events} late requests)")  # fmt: skip
    return LuckCorrection(slope=slope, correlation=correlation, events=events, steps=len(found), reason=reason)


class ReferenceSlot:
    """A sweep variant's reference slot: its service time is the busy time per request of the first step that
    had one, kept for every later step (so a server whose busy time moves with the rate shows it: ``fit``)."""

    def __init__(self) -> None:
        self.service_s: float | None = None

    def read(self, requests: Sequence[WindowRequest], *, rate: float, e2e_slo_s: float) -> ReferenceReading | None:
        if self.service_s is None:
            self.service_s = busy_per_request(requests)
        if self.service_s is None or not self.service_s > 0:
            self.service_s = None
            return None
        return read_reference(requests, rate=rate, e2e_slo_s=e2e_slo_s, service_s=self.service_s)
