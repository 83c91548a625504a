"""The run's pool of lean connections: at most ``limit`` open at once across every place, idle ones reused per
place (scheme, host, port), waiters served first come, first served.

A new connection goes only to an address the run pinned for its place (``target_access.Destinations``): the
name is never looked up here, so a name that passed the allowlist cannot point elsewhere by the next
connection, and a place the run never admitted is refused before any socket opens (``PinRefused``). TLS
verifies the certificate against the system's roots and the place's host name; no proxy is ever used.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from typing import NamedTuple

from cliffwatch.adapters.loadgen.attempt_trace import AttemptTrace
from cliffwatch.adapters.loadgen.pinned_resolver import PinRefused
from cliffwatch.adapters.loadgen.wire.connection import WireConnection
from cliffwatch.adapters.loadgen.wire.failures import ConnectFailed, ConnectTimedOut, WireFailure
from cliffwatch.adapters.network.target_access import Destinations


class Origin(NamedTuple):  # a tuple: hashed in C, twice an exchange (the idle lookup and the release)
    scheme: str  # http or https
    host: str
    port: int


class WirePool:
    """``acquire`` a connection for an origin, ``release`` it after the exchange (reused when it can be)."""

    def __init__(self, destinations: Destinations, *, limit: int, connect_timeout_s: float,
                 read_timeout_s: float | None) -> None:  # fmt: skip
        if limit < 1:
            raise ValueError("a pool needs room for one connection at least")
        self.destinations = destinations
        self.limit = limit
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.opened = 0  # connections made over the pool's life (tests and benchmarks read it)
        self._open = 0  # open or opening now: what the limit counts
        self._idle: dict[Origin, list[WireConnection]] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    def idle(self, origin: Origin) -> WireConnection | None:
        """An idle open connection to ``origin`` taken from the pool, or None: ``acquire``'s quick path, without a
        coroutine, for the exchange that finds one (most of them, once a run is going)."""
        idle = self._idle.get(origin)
        while idle and not self._closed:
            connection = idle.pop()
            if not connection.closed:
                return connection
        return None

    async def acquire(self, origin: Origin, trace: AttemptTrace | None = None) -> WireConnection:
        """An idle connection to ``origin``, or a new one when the pool has room; else waits its turn. ``trace``
        hears how long it waited and whether a connection was being opened for it (whose a timeout is)."""
        while True:
            if self._closed:
                raise ConnectFailed("the run's connection pool is closed")
            idle = self._idle.get(origin)
            while idle:
                connection = idle.pop()
                if not connection.closed:
                    return connection
            if self._open < self.limit:
                if trace is None:
                    return await self._connect(origin)
                trace.connecting = True
                try:
                    return await self._connect(origin)
                finally:
                    trace.connecting = False
            self._close_idle_elsewhere(origin)  # its room frees when it has closed: wait for that, as for any
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            if trace is not None and not trace.queued_start:
                trace.queued_start = time.perf_counter_ns()
            try:
                await waiter
            except BaseException:
                if not waiter.cancelled() and waiter.done():
                    self._wake()  # woken, then cancelled: pass the turn on
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                if trace is not None:
                    trace.close(time.perf_counter_ns())  # the wait so far counted; another begins if it waits again

    def release(self, connection: WireConnection, origin: Origin) -> None:
        """Back to the pool after an exchange: kept idle when reusable, closed otherwise."""
        if connection.reusable and not connection.closed and not self._closed:
            self._idle.setdefault(origin, []).append(connection)
            self._wake()
        else:
            connection.close()  # its connection_lost frees its room and wakes a waiter

    async def close(self) -> None:
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        await asyncio.sleep(0)  # let the transports run their connection_lost

    async def _connect(self, origin: Origin) -> WireConnection:
        addresses = self.destinations.pinned(origin.host, origin.port)
        if addresses is None:
            raise PinRefused(origin.host, origin.port, "not admitted for this run (only addresses checked against "
                             "the allowlist)")  # fmt: skip
        self._open += 1
        try:
            return await self._open_first(origin, addresses)
        except BaseException:
            self._open -= 1
            self._wake()
            raise

    async def _open_first(self, origin: Origin, addresses: tuple[str, ...]) -> WireConnection:
        loop = asyncio.get_running_loop()
        tls = self._tls_context() if origin.scheme == "https" else None
        failures: list[WireFailure] = []
        for address in addresses:
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    _, connection = await loop.create_connection(
                        self._protocol, address, origin.port, ssl=tls,
                        server_hostname=origin.host if tls is not None else None,
                    )  # fmt: skip
            except TimeoutError:
                failures.append(ConnectTimedOut(self.connect_timeout_s))
                continue
            except (OSError, ssl.SSLError) as exc:
                failures.append(ConnectFailed(f"cannot connect to {origin.host}:{origin.port} ({address}): {exc}"))
                continue
            self.opened += 1
            return connection
        raise failures[-1] if len(failures) == 1 else ConnectFailed("; ".join(str(f) for f in failures))

    def _protocol(self) -> WireConnection:
        return WireConnection(read_timeout_s=self.read_timeout_s, lost=self._lost)

    def _lost(self, connection: WireConnection) -> None:
        """A connection closed (by either side): its room is free; an idle one leaves the idle list."""
        self._open -= 1
        for connections in self._idle.values():
            if connection in connections:
                connections.remove(connection)
                break
        self._wake()

    def _close_idle_elsewhere(self, origin: Origin) -> None:
        """At the limit with idle connections to other places (a redirect's): closes one so ``origin`` gets room."""
        for other, connections in self._idle.items():
            if other != origin and connections:
                connections.pop().close()
                return

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls
