"""The preparation's watchdog: it ends the watched thread's work past a deadline or a memory bound, wherever the
work is, and says which bound it was."""

from __future__ import annotations

import threading
import time

import pytest

from cliffwatch.adapters.workload.bounds import BoundExceeded, Watchdog
from cliffwatch.domain.workload.prepared import PreparationLimits


def spin() -> None:
    while True:  # no call, no check: only the watchdog can end it
        pass


def test_work_past_the_preparation_timeout_is_ended_naming_the_setting() -> None:
    started = time.monotonic()
    with Watchdog(PreparationLimits(timeout_s=0.2)) as watchdog, pytest.raises(BoundExceeded) as caught:
        watchdog.run(spin)
    assert 0.2 <= time.monotonic() - started < 2
    assert caught.value.message == "preparing took longer than 0.2 s (CLIFFWATCH_PREPARE_TIMEOUT_S)"


def test_a_section_past_its_own_deadline_ends_only_the_section() -> None:
    def work() -> str:
        with pytest.raises(BoundExceeded, match="render took too long"), watchdog.within(0.05, "render took too long"):
            spin()
        return "the rest of the preparation went on"

    with Watchdog(PreparationLimits(timeout_s=10)) as watchdog:
        assert watchdog.run(work) == "the rest of the preparation went on"


def test_growth_past_the_memory_bound_is_ended_naming_the_setting() -> None:
    readings = iter([100 << 20, *[100 << 20] * 3, *[(100 << 20) + (300 << 20)] * 1000])
    limits = PreparationLimits(timeout_s=10, max_memory_bytes=256 << 20)
    with Watchdog(limits, memory=lambda: next(readings)) as watchdog, pytest.raises(BoundExceeded) as caught:
        watchdog.run(spin)
    assert "more than 256 MiB (CLIFFWATCH_PREPARE_MAX_MEMORY_MB)" in caught.value.message


def test_end_from_another_thread_stops_the_work_with_its_reason() -> None:
    with Watchdog(PreparationLimits(timeout_s=10)) as watchdog:
        threading.Timer(0.05, watchdog.end, args=("the run was stopped",)).start()
        with pytest.raises(BoundExceeded, match="the run was stopped"):
            watchdog.run(spin)


def test_work_within_the_bounds_returns_and_nothing_fires_afterwards() -> None:
    with Watchdog(PreparationLimits(timeout_s=0.05)) as watchdog:
        assert watchdog.run(lambda: 42) == 42
    time.sleep(0.15)  # past the deadline: the watchdog has stopped and raised nothing into this thread
