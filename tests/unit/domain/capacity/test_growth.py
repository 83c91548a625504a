"""The growth detector on synthetic queues: a queue that grows is caught, a stable one is not, however bursty.

The queues are single servers with a deterministic service time (M/D/1 and D/D/1), simulated exactly with
Lindley's recursion from a seeded random generator: a step of 4 s of warm-up and a 10-s window, as a sweep's
default step, with the 0.32-s service time of the single-slot server in issue 12.
"""

from __future__ import annotations

import math
import random

import pytest

from cliffwatch.domain.capacity.growth import (
    THRESHOLD,
    Growth,
    GrowthSignal,
    Trend,
    latency_trend,
    queue_trend,
)

SERVICE_S = 0.32
WARMUP_S, WINDOW_S = 4.0, 10.0


def waits(load: float, seed: int, *, poisson: bool, service_s: float = SERVICE_S,
          window_s: float = WINDOW_S) -> list[tuple[float, float]]:  # fmt: skip
    """(scheduled, wait) of every request of a single-server FIFO queue at ``load`` (λ/μ), from time 0."""
    rng = random.Random(seed)
    rate = load / service_s
    at = free = 0.0
    found = []
    while at < WARMUP_S + window_s:
        at += rng.expovariate(rate) if poisson else 1 / rate
        start = max(at, free)
        free = start + service_s
        found.append((at, start - at + 0.01))  # the time to the first token: the wait, and a little more
    return found


def alarms(load: float, *, poisson: bool, seeds: int = 200, service_s: float = SERVICE_S) -> tuple[int, int]:
    """How many of ``seeds`` steps the latency trend called growing, of those it could judge."""
    fired = judged = 0
    for seed in range(seeds):
        trend = latency_trend(waits(load, seed, poisson=poisson, service_s=service_s), start_s=WARMUP_S,
                              end_s=WARMUP_S + WINDOW_S)  # fmt: skip
        if trend is not None:
            judged += 1
            fired += trend.growing
    return fired, judged


@pytest.mark.parametrize("load", [0.5, 0.7, 0.9, 1.0])
def test_constant_arrivals_below_saturation_never_read_as_growth(load: float) -> None:
    fired, judged = alarms(load, poisson=False, seeds=20)
    assert (fired, judged) == (0, 20)


@pytest.mark.parametrize("load", [1.03, 1.05, 1.1, 1.3])
def test_constant_arrivals_above_saturation_always_read_as_growth_at_their_overload(load: float) -> None:
    fired, judged = alarms(load, poisson=False, seeds=20)
    assert (fired, judged) == (20, 20)
    trend = latency_trend(waits(load, 0, poisson=False), start_s=WARMUP_S, end_s=WARMUP_S + WINDOW_S)
    assert trend is not None
    assert trend.overload == pytest.approx(load - 1, rel=0.05)  # the slope is the overload ratio
    assert not trend.emptied


@pytest.mark.parametrize(("load", "service_s", "most"), [(0.5, SERVICE_S, 0), (0.7, SERVICE_S, 10),
                                                          (0.7, 0.1, 0), (0.8, 0.1, 10)])  # fmt: skip
def test_bursty_poisson_queues_below_saturation_seldom_read_as_growth(load: float, service_s: float,
                                                                       most: int) -> None:  # fmt: skip
    """At most 1 alarm in 20 steps (here: ``most`` in 200) where the queue is stable, however bursty."""
    fired, judged = alarms(load, poisson=True, service_s=service_s)
    assert judged >= 100
    assert fired <= most, (fired, judged)


def test_a_poisson_queue_well_past_saturation_is_caught_more_often_than_not() -> None:
    """Poisson overloads this large fail their SLO within a step anyway; the check must not miss them all."""
    fired, judged = alarms(1.3, poisson=True)
    assert fired > judged / 2


def test_one_slow_answer_in_a_flat_queue_is_not_growth() -> None:
    flat = [(4 + i * 0.1, 0.05) for i in range(100)]
    flat[-2] = (flat[-2][0], 30.0)  # a single answer that took half a minute
    trend = latency_trend(flat, start_s=4, end_s=14)
    assert trend is not None
    assert not trend.growing
    assert trend.slope == pytest.approx(0.0, abs=1e-9)  # the block medians ignore it


def test_too_few_requests_cannot_be_judged() -> None:
    few = [(4 + i, 0.1 * i) for i in range(14)]  # 14 requests: fewer than 5 blocks of 3
    assert latency_trend(few, start_s=4, end_s=18) is None
    assert latency_trend(few, start_s=4, end_s=4) is None
    assert latency_trend([], start_s=4, end_s=14) is None


def test_only_the_windows_requests_count() -> None:
    growing = waits(1.1, 0, poisson=False)
    before_window = [(t, w) for t, w in growing if t < WARMUP_S]
    assert latency_trend(before_window, start_s=WARMUP_S, end_s=WARMUP_S + WINDOW_S) is None


def server_queue(load: float, seed: int, *, capacity_rps: float = 10.0) -> list[tuple[float, float]]:
    """The queue length of a 10-req/s server, scraped once a second over the window (M/D/1 when stable)."""
    rng = random.Random(seed)
    rate = load * capacity_rps
    arrivals, at = [], 0.0
    while at < WARMUP_S + WINDOW_S:
        at += rng.expovariate(rate)
        arrivals.append(at)
    starts, free = [], 0.0
    for arrival in arrivals:
        free = max(arrival, free) + 1 / capacity_rps
        starts.append(free - 1 / capacity_rps)
    return [(t, float(sum(1 for a, s in zip(arrivals, starts, strict=True) if a <= t < s)))
            for t in (WARMUP_S + i for i in range(int(WINDOW_S)))]  # fmt: skip


def test_the_servers_queue_growing_is_caught_and_a_stable_one_is_not() -> None:
    growing = [queue_trend(server_queue(1.3, seed), rate=13.0) for seed in range(20)]
    assert all(t is not None and t.growing for t in growing)
    stable = [queue_trend(server_queue(0.6, seed), rate=6.0) for seed in range(200)]
    assert sum(1 for t in stable if t is not None and t.growing) <= 10


def test_a_queue_that_stays_empty_or_is_scraped_too_rarely_is_not_growth() -> None:
    empty = queue_trend([(float(t), 0.0) for t in range(10)], rate=5.0)
    assert empty is not None
    assert not empty.growing
    assert queue_trend([(0.0, 1.0), (1.0, 5.0), (2.0, 9.0)], rate=5.0) is None  # three scrapes
    assert queue_trend([(float(t), float(t)) for t in range(10)], rate=0.0) is None


def test_a_queue_growing_slower_than_the_threshold_is_not_growth() -> None:
    slow = queue_trend([(float(t), 2.0 * t) for t in range(10)], rate=100.0)  # 2 % of the arrivals queue up
    assert slow is not None
    assert slow.overload == pytest.approx(0.02)
    assert slow.overload < THRESHOLD
    assert not slow.growing


def test_either_side_growing_decides_and_the_servers_queue_is_quoted_first() -> None:
    latency = latency_trend(waits(1.1, 0, poisson=False), start_s=WARMUP_S, end_s=WARMUP_S + WINDOW_S)
    queue = queue_trend([(float(t), 3.0 * t) for t in range(10)], rate=20.0)
    stable = latency_trend(waits(0.5, 0, poisson=False), start_s=WARMUP_S, end_s=WARMUP_S + WINDOW_S)
    assert latency is not None
    assert queue is not None
    assert stable is not None
    assert Growth(latency=latency, queue=queue).evidence is queue
    assert Growth(latency=latency, queue=None).evidence is latency
    assert not Growth(latency=stable, queue=None).growing
    assert Growth(latency=None, queue=None).evidence is None


def test_a_trend_says_what_it_saw_and_reads_back_from_its_document() -> None:
    latency = latency_trend(waits(1.06, 0, poisson=False), start_s=WARMUP_S, end_s=WARMUP_S + WINDOW_S)
    assert latency is not None
    assert latency.describe() == f"the wait grew {latency.slope * 1000:.0f} ms a second, a 6.0 % overload"
    queue = Trend(signal=GrowthSignal.SERVER_QUEUE, slope=0.75, overload=0.25, t_stat=math.inf, rise=7.5,
                  emptied=False, points=10, growing=True)  # fmt: skip
    assert queue.describe(" at 3 req/s") == ("the server's queue grew by 0.75 requests a second at 3 req/s, "
                                             "a 25.0 % overload")  # fmt: skip
    growth = Growth(latency=latency, queue=queue)
    assert Growth.from_dict(growth.to_dict()) == growth
    assert growth.to_dict()["queue"]["t_stat"] is None  # an exact line: no error to divide by
