"""Token buckets: how many things may happen now, at a sustained rate with a bounded burst.

One mechanism for every limit cliffwatch keeps on itself: the attempts a run may send (the generator's
attempt cap), the requests one API token may make, and the dashboard's login attempts. Pure: the caller
passes the time in (integer nanoseconds on a monotonic clock), so every rule is tested with tables.

A bucket holds at most ``burst`` tokens and gains ``rate`` tokens per second; each event takes one. Over any
window of T seconds a bucket therefore lets at most ``burst + rate × T`` events through, however they are
timed, and a bucket left alone refills to ``burst``: a full bucket is the same as a new one, which is what
lets ``KeyedBuckets`` forget full buckets without changing any answer.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from cliffwatch.domain.outcomes import NS_PER_S


@dataclass(frozen=True, kw_only=True)
class RateLimit:
    """``rate`` events per second, sustained, and up to ``burst`` at once (a bucket's size, at least 1)."""

    rate: float
    burst: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"a rate limit needs a finite rate > 0, got {self.rate}")
        if not (math.isfinite(self.burst) and self.burst >= 1):
            raise ValueError(f"a rate limit needs a burst >= 1, got {self.burst}")

    @classmethod
    def over(cls, rate: float, burst_s: float) -> RateLimit:
        """``rate`` per second with a burst of ``burst_s`` seconds' worth of it (at least one event)."""
        return cls(rate=rate, burst=max(1.0, rate * burst_s))

    def most_in(self, seconds: float) -> float:
        """The most events a bucket with this limit lets through in any window of ``seconds``."""
        return self.burst + self.rate * seconds

    def describe(self) -> str:
        return f"{self.rate:g}/s, burst {self.burst:g}"


class TokenBucket:
    """One bucket, full when made at ``now_ns``."""

    __slots__ = ("_at_ns", "_tokens", "limit", "refused")

    def __init__(self, limit: RateLimit, now_ns: int) -> None:
        self.limit = limit
        self._tokens = limit.burst
        self._at_ns = now_ns
        self.refused = 0  # events turned away so far

    def _refill(self, now_ns: int) -> None:
        # A clock read earlier by another task may be passed in after a later one: time never runs back here.
        if now_ns > self._at_ns:
            gained = (now_ns - self._at_ns) * self.limit.rate / NS_PER_S
            self._tokens = min(self.limit.burst, self._tokens + gained)
            self._at_ns = now_ns

    def try_take(self, now_ns: int) -> bool:
        """Takes a token and says True when one is there; says False (and counts a refusal) when not."""
        self._refill(now_ns)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self.refused += 1
        return False

    def wait_s(self, now_ns: int) -> float:
        """Seconds until a token will be there (0 when one is there now); takes nothing."""
        self._refill(now_ns)
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.limit.rate

    def is_full(self, now_ns: int) -> bool:
        self._refill(now_ns)
        return self._tokens >= self.limit.burst


EVICTION_LOOK = 64  # least recently used buckets looked at for full ones when a new key needs room


class KeyedBuckets:
    """A bucket per key (an API token, a client address), at most ``max_keys`` of them kept.

    When a new key would exceed the bound, full buckets among the least recently used are forgotten first
    (forgetting one changes nothing: it would have been made full again); if none of those is full, the least
    recently used one goes, which at worst gives its key a fresh burst. Memory stays bounded, and the work a new
    key costs too, whatever keys callers make up.
    """

    def __init__(self, limit: RateLimit, *, max_keys: int = 10_000) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self.limit = limit
        self.max_keys = max_keys
        self._buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: Hashable, now_ns: int) -> float | None:
        """None when ``key`` may go ahead (a token taken); otherwise the seconds until it may."""
        bucket = self._buckets.get(key)
        if bucket is None:
            self._make_room(now_ns)
            bucket = self._buckets[key] = TokenBucket(self.limit, now_ns)
        else:
            self._buckets.move_to_end(key)
        if bucket.try_take(now_ns):
            return None
        return bucket.wait_s(now_ns)

    def waiting(self, key: Hashable, now_ns: int) -> float | None:
        """The seconds until ``key`` may go ahead when its bucket is empty, else None; takes nothing and makes
        no bucket."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        wait = bucket.wait_s(now_ns)
        return wait if wait > 0 else None

    def _make_room(self, now_ns: int) -> None:
        if len(self._buckets) < self.max_keys:
            return
        # Full buckets among the least recently used go first; the look is bounded, so a flood of new keys
        # (made-up tokens) costs a few steps each, not a walk over every bucket kept.
        oldest = list(itertools.islice(self._buckets.items(), EVICTION_LOOK))
        for key in [k for k, bucket in oldest if bucket.is_full(now_ns)]:
            del self._buckets[key]
        while len(self._buckets) >= self.max_keys:
            self._buckets.popitem(last=False)


def retry_after_s(wait_s: float) -> int:
    """A Retry-After value in whole seconds for a wait of ``wait_s``: rounded up, at least 1."""
    return max(1, math.ceil(wait_s))
