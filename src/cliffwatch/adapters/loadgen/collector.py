"""Garbage collection set for a load generator while one runs, and every collection's pause measured.

CPython's cycle collector stops the event loop while it walks the objects of the generations it collects.
A ``cliffwatch`` process holds about 115,000 long-lived objects after its imports (SQLAlchemy, aiohttp,
structlog, rich), and a load generator allocates a few short-lived objects per request: with the default
thresholds a run at 2,000 req/s made 9 full collections of 220 ms on average (420 ms at most) and 102
middle ones of about 5 ms in 10 s, and those pauses were its event-loop stalls (``bench/whole_run.py``).

While a generator runs, :func:`generator_collector`:

- **freezes** everything alive when it starts (``gc.freeze()``: the objects move to a permanent generation
  that no collection walks), so a full collection walks only what the run itself allocated. Nothing is
  collected first: a full collection then would delay the run's first requests; what is frozen is
  unfrozen (``gc.unfreeze()``) when the last running generator ends, and collected as usual after it
  (unless the heap was already frozen before the first one started: then whoever froze it unfreezes it);
- sets the thresholds to :data:`GENERATOR_THRESHOLDS`, and puts the previous ones back after;
- records every collection's pause through ``gc.callbacks`` (:class:`CollectorWatch`), so the run's
  generator report says how often the collector stopped the loop and for how long.

Both are process-wide: the service may run several generators at once, so the set-up is counted, and
each watch records the collections of the whole process while its run lasts (they stopped its loop too).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cliffwatch.domain.outcomes import NS_PER_MS
from cliffwatch.domain.traffic.generator_health import CollectorReport

# Young collections every 10,000 net allocations instead of 700: each walks only the young objects, so a
# larger first threshold means fewer pauses of a few ms; the middle and oldest keep CPython's ratios.
GENERATOR_THRESHOLDS = (10_000, 10, 10)

_active = 0
_saved_thresholds: tuple[int, int, int] | None = None
_frozen_before = False  # someone froze the heap before the first generator did: theirs to unfreeze


class CollectorWatch:
    """Counts the collections and their pauses, from its start until it is closed."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.total_ns = 0
        self.max_ns = 0
        self.frozen = 0  # objects the freeze at its start moved out of every collection's way
        self._started_ns = 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter_ns()
        if phase == "start":
            self._started_ns = now
            return
        generation = int(info.get("generation", 2))
        self.collections[min(2, max(0, generation))] += 1
        pause = now - self._started_ns
        self.total_ns += pause
        self.max_ns = max(self.max_ns, pause)

    def report(self) -> CollectorReport:
        return CollectorReport(
            collections=tuple(self.collections),
            total_ms=self.total_ns / NS_PER_MS,
            max_pause_ms=self.max_ns / NS_PER_MS,
            frozen=self.frozen,
        )


@contextmanager
def generator_collector() -> Iterator[CollectorWatch]:
    """The collector set for a running generator (see the module's docstring) and a watch of its pauses."""
    global _active, _saved_thresholds, _frozen_before
    watch = CollectorWatch()
    if _active == 0:
        _saved_thresholds = gc.get_threshold()
        _frozen_before = gc.get_freeze_count() > 0
        gc.set_threshold(*GENERATOR_THRESHOLDS)
    _active += 1
    gc.freeze()
    watch.frozen = gc.get_freeze_count()
    gc.callbacks.append(watch._callback)
    try:
        yield watch
    finally:
        gc.callbacks.remove(watch._callback)
        _active -= 1
        if _active == 0:
            if not _frozen_before:
                gc.unfreeze()
            if _saved_thresholds is not None:
                gc.set_threshold(*_saved_thresholds)
