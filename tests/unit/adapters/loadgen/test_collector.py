"""The collector set for a running generator: thresholds and freeze while it runs, put back after; pauses seen."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from cliffwatch.adapters.loadgen.collector import GENERATOR_THRESHOLDS, generator_collector


@pytest.fixture(autouse=True)
def unfrozen_heap() -> Iterator[None]:
    gc.unfreeze()  # each test starts from a heap nobody froze
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_while_a_generator_runs_the_heap_is_frozen_and_its_thresholds_set_then_both_are_put_back() -> None:
    gc.set_threshold(700, 10, 10)
    with generator_collector() as watch:
        assert gc.get_threshold() == GENERATOR_THRESHOLDS
        assert gc.get_freeze_count() > 0
        assert watch.frozen >= gc.get_freeze_count() > 0  # frozen objects may still be freed by their refcount
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_the_set_up_stays_until_the_last_of_two_overlapping_generators_ends() -> None:
    first = generator_collector()
    first.__enter__()
    with generator_collector():
        pass
    assert gc.get_threshold() == GENERATOR_THRESHOLDS
    assert gc.get_freeze_count() > 0
    first.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_before_the_generator_started_is_left_frozen_for_whoever_froze_it() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with generator_collector():
        pass
    assert gc.get_freeze_count() >= frozen


def test_the_watch_counts_each_collection_by_generation_and_times_its_pause_only_while_open() -> None:
    with generator_collector() as watch:
        gc.collect(0)
        gc.collect(2)
    gc.collect(2)

    report = watch.report()
    assert report.collections[0] >= 1
    assert report.collections[2] == 1
    assert 0 < report.max_pause_ms <= report.total_ms
    assert report.to_dict()["collections"] == list(report.collections)
