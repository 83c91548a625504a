"""The scenario's client: its connection pool, timeouts, in-flight limit, retry policy, redirects and workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from cliffwatch.domain.outcomes import Slo
from cliffwatch.domain.scenario.retry import RetryPolicy, parse_retry
from cliffwatch.domain.validation import Reader, short_repr

MAX_REDIRECTS = 20  # hops a followed redirect chain may take (browsers stop at 20)
AUTO_WORKERS = 0  # client.workers: auto (resolved to the machine's cores by the composition root)
MAX_WORKERS = 256


class Transport(StrEnum):
    """What carries the load: aiohttp's client, or the lean HTTP/1.1 client on asyncio Protocols
    (``adapters/loadgen/wire``: a fraction of aiohttp's CPU a request, measured in docs/design.md)."""

    AIOHTTP = "aiohttp"
    LEAN = "lean"


@dataclass(frozen=True, kw_only=True)
class ClientSpec:
    pool_size: int = 100
    connect_timeout_ms: float = 2_000.0
    read_timeout_ms: float | None = None  # longest silence between reads; None: only the attempt timeout
    attempt_timeout_ms: float | None = None  # None: the SLO's timeout_ms
    max_in_flight: int = 5_000  # beyond this the generator stops sending and says so
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Off: a 3xx answer is the request's outcome (redirect). On: followed up to max_redirects hops, each hop's
    # host checked against the allowlist and credentials dropped when the origin changes.
    follow_redirects: bool = False
    max_redirects: int = 5
    # None: the generator runs in the run's own process. N: in N worker processes, each sending its share of
    # the plan (``domain.traffic.shards``); ``AUTO_WORKERS``: one a usable core (``worker_count``).
    workers: int | None = None
    transport: Transport = Transport.LEAN


def parse_client(reader: Reader, slo: Slo | None) -> ClientSpec | None:
    pool = reader.number("pool_size", 100, ge=1, le=100_000, integer=True)
    connect = reader.number("connect_timeout_ms", 2_000.0, gt=0, le=600_000)
    read = reader.number("read_timeout_ms", None, gt=0, le=3_600_000)
    attempt = reader.number("attempt_timeout_ms", None, gt=0, le=3_600_000)
    in_flight = reader.number("max_in_flight", 5_000, ge=1, le=1_000_000, integer=True)
    retry = parse_retry(reader.raw("retry", {"policy": "none"}), reader.child("retry"), reader.problems)
    follow = reader.boolean("follow_redirects", False)
    hops = reader.number("max_redirects", 5, ge=1, le=MAX_REDIRECTS, integer=True)
    workers = parse_workers(reader)
    transport = reader.string("transport", Transport.LEAN.value, choices=tuple(t.value for t in Transport))
    reader.done()
    if reader.has("max_redirects") and follow is False:
        reader.error("max_redirects", "only applies with follow_redirects: true")
        return None
    if slo is not None and attempt is not None and attempt > slo.timeout_ms:
        reader.error("attempt_timeout_ms", f"must be <= slo.timeout_ms ({slo.timeout_ms:g})")
        return None
    if (
        None in (pool, connect, in_flight, retry, follow, hops)
        or (reader.has("read_timeout_ms") and read is None)
        or (reader.has("attempt_timeout_ms") and attempt is None)
        or (reader.has("workers") and workers is None)
        or transport is None
    ):
        return None
    assert retry is not None
    return ClientSpec(
        pool_size=pool,
        connect_timeout_ms=connect,
        read_timeout_ms=read,
        attempt_timeout_ms=attempt,
        max_in_flight=in_flight,
        retry=retry,
        follow_redirects=bool(follow),
        max_redirects=hops,
        workers=workers,
        transport=Transport(transport),
    )


def parse_workers(reader: Reader) -> int | None:
    """``workers``: a count of processes, or ``auto``; None when absent (or wrong: a problem says why)."""
    value = reader.raw("workers", None)
    if value == "auto":
        return AUTO_WORKERS
    if isinstance(value, str):
        reader.error("workers", f"must be a whole number of processes or auto, got {short_repr(value)}")
        return None
    return reader.number("workers", None, ge=1, le=MAX_WORKERS, integer=True)  # type: ignore[no-any-return]
