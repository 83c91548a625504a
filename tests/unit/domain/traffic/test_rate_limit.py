"""Token buckets: what they let through at each moment, the window bound, refills, and keyed buckets' memory."""

from __future__ import annotations

import random

import pytest

from cliffwatch.domain.outcomes import NS_PER_S
from cliffwatch.domain.traffic.rate_limit import KeyedBuckets, RateLimit, TokenBucket, retry_after_s

MS = NS_PER_S // 1000


@pytest.mark.parametrize(
    ("rate", "burst", "times_ms", "allowed"),
    [
        # a full bucket lets its burst through at once, then one per 1/rate
        (5, 2, [0, 0, 0, 100, 200, 399, 400], [True, True, False, False, True, False, True]),
        # idle time refills, but never beyond the burst
        (10, 3, [0, 0, 0, 0, 10_000, 10_000, 10_000, 10_000], [True, True, True, False, True, True, True, False]),
        # a burst of one: strictly spaced
        (2, 1, [0, 250, 499, 500, 1000, 1001], [True, False, False, True, True, False]),
        # a clock read earlier passed in later does not take tokens back or refill twice
        (1, 1, [1000, 500, 1000, 2000], [True, False, False, True]),
    ],
)
def test_a_bucket_lets_through_what_its_rate_and_burst_allow_at_each_moment(
    rate: float, burst: float, times_ms: list[int], allowed: list[bool]
) -> None:
    """Each event is allowed exactly when a whole token is in the bucket at its time."""
    bucket = TokenBucket(RateLimit(rate=rate, burst=burst), times_ms[0] * MS)
    assert [bucket.try_take(t * MS) for t in times_ms] == allowed
    assert bucket.refused == allowed.count(False)


@pytest.mark.parametrize(("rate", "burst", "seconds"), [(5, 5, 2), (100, 10, 3), (1000, 1000, 1), (0.5, 1, 10)])
def test_no_window_sees_more_than_burst_plus_rate_times_its_length(rate: float, burst: float, seconds: float) -> None:
    """Hammered as fast as it can be asked (every 100 µs), a bucket lets through at most burst + rate × T in
    any T-second window, and at least rate × T - 1 (it is never stingier than its rate)."""
    limit = RateLimit(rate=rate, burst=burst)
    bucket = TokenBucket(limit, 0)
    step = 100_000
    allowed_at = [t for t in range(0, round(seconds * NS_PER_S), step) if bucket.try_take(t)]
    assert len(allowed_at) <= limit.most_in(seconds)
    assert len(allowed_at) >= rate * seconds - 1
    window = NS_PER_S
    for i, start in enumerate(allowed_at):
        inside = sum(1 for t in allowed_at[i:] if t < start + window)
        assert inside <= limit.most_in(1.0)


@pytest.mark.parametrize(
    ("rate", "burst", "takes", "at_ms", "wait"),
    [(5, 1, 1, 0, 0.2), (5, 1, 1, 100, 0.1), (4, 2, 0, 0, 0.0), (4, 2, 2, 0, 0.25), (0.1, 1, 1, 0, 10.0)],
)
def test_the_wait_says_when_the_next_token_arrives(
    rate: float, burst: float, takes: int, at_ms: int, wait: float
) -> None:
    """``wait_s`` is the time to the next whole token (0 with one there) and takes nothing."""
    bucket = TokenBucket(RateLimit(rate=rate, burst=burst), 0)
    for _ in range(takes):
        assert bucket.try_take(0)
    assert bucket.wait_s(at_ms * MS) == pytest.approx(wait)
    assert bucket.wait_s(at_ms * MS) == pytest.approx(wait)  # asking again changes nothing


@pytest.mark.parametrize(("rate", "burst_s", "burst"), [(1000, 1.0, 1000), (5, 0.1, 1.0), (5, 1.0, 5), (0.2, 2, 1.0)])
def test_a_burst_in_seconds_is_that_much_of_the_rate_and_never_under_one(
    rate: float, burst_s: float, burst: float
) -> None:
    assert RateLimit.over(rate, burst_s).burst == burst


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (float("inf"), 1), (1, 0.5), (1, float("nan"))])
def test_a_limit_needs_a_positive_finite_rate_and_a_burst_of_at_least_one(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="rate limit"):
        RateLimit(rate=rate, burst=burst)


@pytest.mark.parametrize(
    ("cap", "share_of_cap", "seconds", "most_refused"),
    [(5, 0.5, 3600, 0.01), (5, 0.8, 3600, 0.05), (50, 0.8, 600, 0.001), (1000, 0.9, 60, 0.0)],
)
def test_poisson_arrivals_below_the_cap_are_rarely_refused_with_a_second_of_burst(
    cap: float, share_of_cap: float, seconds: float, most_refused: float
) -> None:
    """The attempt cap's default burst (one second of the cap) barely touches Poisson traffic below the cap:
    random clustering is absorbed, so what the cap refuses is excess, not the arrivals' own noise."""
    rng = random.Random(7)
    bucket = TokenBucket(RateLimit.over(cap, 1.0), 0)
    at, count = 0.0, 0
    while at < seconds:
        at += rng.expovariate(cap * share_of_cap)
        count += 1
        bucket.try_take(round(at * NS_PER_S))
    assert bucket.refused / count <= most_refused


def test_keyed_buckets_limit_each_key_on_its_own() -> None:
    buckets = KeyedBuckets(RateLimit(rate=1, burst=2))
    assert [buckets.take("a", 0), buckets.take("a", 0)] == [None, None]
    assert buckets.take("a", 0) == pytest.approx(1.0)
    assert buckets.take("b", 0) is None  # another key has its own burst
    assert buckets.take("a", NS_PER_S) is None


def test_keyed_buckets_stay_bounded_forgetting_full_buckets_first() -> None:
    """Made-up keys cannot grow memory past the bound; a busy key's bucket outlives idle (full) ones, so its
    limit still holds while thousands of other keys come and go."""
    buckets = KeyedBuckets(RateLimit(rate=1, burst=1), max_keys=100)
    assert buckets.take("busy", 0) is None
    for i in range(5_000):
        at = 10 * NS_PER_S + i  # long after: every other key's bucket is full again
        buckets.take(f"made-up-{i}", at)
        assert len(buckets) <= 100
    assert buckets.take("busy", 10 * NS_PER_S + 5_000) is None  # refilled meanwhile: allowed
    assert buckets.take("busy", 10 * NS_PER_S + 5_001) is not None  # and its bucket was kept: limited


@pytest.mark.parametrize(("wait", "header"), [(0.0, 1), (0.01, 1), (1.0, 1), (1.2, 2), (59.5, 60)])
def test_retry_after_is_the_wait_rounded_up_to_whole_seconds_and_at_least_one(wait: float, header: int) -> None:
    assert retry_after_s(wait) == header
