"""One lean connection against real loopback servers: an answer handed to the sink as it arrives, keep-alive
reuse, bodies delimited by length, by chunks and by the server closing, and every way an answer can fail."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.adapters.loadgen.wire.connection import Header, WireConnection
from cliffwatch.adapters.loadgen.wire.failures import ConnectionClosed, ProtocolViolation, ReadTimedOut
from cliffwatch.adapters.loadgen.wire.pool import Origin, WirePool
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist


class Collected:
    """A sink that keeps everything, with the time each piece arrived."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.status = 0
        self.reason = ""
        self.headers: list[Header] = []
        self.pieces: list[tuple[bytes, int]] = []
        self.stop_after = stop_after

    def head(self, status: int, reason: str, headers: list[Header], now: int) -> None:
        self.status, self.reason, self.headers = status, reason, list(headers)

    def body(self, data: bytes, now: int) -> bool:
        self.pieces.append((data, now))
        return self.stop_after is None or len(self.pieces) < self.stop_after

    @property
    def text(self) -> bytes:
        return b"".join(data for data, _ in self.pieces)


def request(path: str, host: str = "127.0.0.1") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: test\r\n\r\n".encode()


async def destinations_for(url: str) -> Destinations:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    destinations = Destinations(allowlist)
    await destinations.admit(url)
    return destinations


@pytest.fixture
async def served() -> AsyncIterator[TestServer]:
    async def plain(request: web.Request) -> web.Response:
        return web.Response(text="hello", headers={"X-Queue-Time": "12"})

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index in range(3):
            await response.write(f"data: {index}\n\n".encode())
            await asyncio.sleep(0.05)
        await response.write_eof()
        return response

    async def slow(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"first")
        await asyncio.sleep(1.0)
        return response

    app = web.Application()
    app.router.add_get("/plain", plain)
    app.router.add_get("/stream", stream)
    app.router.add_get("/slow", slow)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def pool_for(base: str, *, limit: int = 4, read_timeout_s: float | None = None) -> WirePool:
    return WirePool(await destinations_for(base), limit=limit, connect_timeout_s=2.0, read_timeout_s=read_timeout_s)


def origin_of(server: TestServer) -> Origin:
    return Origin(scheme="http", host="127.0.0.1", port=int(server.port or 0))


async def exchange(pool: WirePool, origin: Origin, path: str, sink: Collected) -> WireConnection:
    connection = await pool.acquire(origin)
    await connection.send(request(path), sink)
    pool.release(connection, origin)
    return connection


async def test_an_answer_reaches_the_sink_and_its_connection_is_reused(served: TestServer) -> None:
    pool, origin = await pool_for(str(served.make_url("/"))), origin_of(served)
    first, second = Collected(), Collected()
    used = await exchange(pool, origin, "/plain", first)
    again = await exchange(pool, origin, "/plain", second)
    assert (first.status, first.reason, first.text) == (200, "OK", b"hello")
    assert (b"X-Queue-Time", b"12") in first.headers
    assert second.text == b"hello"
    assert again is used
    assert pool.opened == 1
    await pool.close()


async def test_a_stream_arrives_piece_by_piece_before_it_ends(served: TestServer) -> None:
    pool, origin = await pool_for(str(served.make_url("/"))), origin_of(served)
    sink = Collected()
    connection = await pool.acquire(origin)
    await connection.send(request("/stream"), sink)
    assert sink.text == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    times = [now for _, now in sink.pieces]
    assert len(times) == 3  # chunked: one piece a chunk, each as it came
    assert times[2] - times[0] > 80_000_000  # 2 × 50 ms apart, stamped on arrival
    assert connection.reusable
    pool.release(connection, origin)
    await pool.close()


async def test_a_sink_that_has_enough_ends_the_exchange_and_the_connection(served: TestServer) -> None:
    pool, origin = await pool_for(str(served.make_url("/"))), origin_of(served)
    sink = Collected(stop_after=1)
    connection = await pool.acquire(origin)
    await connection.send(request("/stream"), sink)
    assert sink.text == b"data: 0\n\n"
    assert not connection.reusable
    pool.release(connection, origin)
    assert (await exchange(pool, origin, "/plain", Collected())) is not connection
    await pool.close()


async def test_a_silent_server_times_the_read_out(served: TestServer) -> None:
    pool, origin = await pool_for(str(served.make_url("/")), read_timeout_s=0.2), origin_of(served)
    sink = Collected()
    connection = await pool.acquire(origin)
    with pytest.raises(ReadTimedOut, match=r"no data for 0\.2s"):
        await connection.send(request("/slow"), sink)
    assert sink.text == b"first"
    assert connection.closed or not connection.reusable
    await pool.close()


async def raw_server(answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> asyncio.Server:
    return await asyncio.start_server(answer, "127.0.0.1", 0)


def raw_origin(server: asyncio.Server) -> tuple[str, Origin]:
    port = server.sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}/", Origin(scheme="http", host="127.0.0.1", port=port)


async def test_a_body_without_a_length_ends_when_the_server_closes() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    server = await raw_server(answer)
    base, origin = raw_origin(server)
    pool, sink = await pool_for(base), Collected()
    connection = await pool.acquire(origin)
    await connection.send(request("/"), sink)
    assert (sink.status, sink.text) == (200, b"all of it")
    assert not connection.reusable
    await pool.close()
    server.close()


async def test_an_interim_answer_is_skipped_for_the_real_one_that_follows() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read()  # keeps the connection open: the answer's length ends it
        writer.close()
        await writer.wait_closed()
        finished.set()

    finished = asyncio.Event()
    server = await raw_server(answer)
    base, origin = raw_origin(server)
    pool, sink = await pool_for(base), Collected()
    connection = await pool.acquire(origin)
    await connection.send(request("/"), sink)
    assert (sink.status, sink.text) == (200, b"ok")
    assert sink.headers == [(b"Content-Length", b"2")]  # the interim answer's Link is not the answer's
    assert connection.reusable
    pool.release(connection, origin)
    await pool.close()
    await asyncio.wait_for(finished.wait(), 5)
    server.close()


@pytest.mark.parametrize(
    ("answer_bytes", "failure", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part", ConnectionClosed, "closed the connection while"),
        (b"", ConnectionClosed, "closed the connection before answering"),
        (b"SMTP ready\r\n\r\n", ProtocolViolation, "malformed HTTP answer"),
    ],
)
async def test_a_broken_answer_fails_the_exchange_with_what_happened(
    answer_bytes: bytes, failure: type[Exception], message: str
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer_bytes)
        await writer.drain()
        writer.close()

    server = await raw_server(answer)
    base, origin = raw_origin(server)
    pool = await pool_for(base)
    connection = await pool.acquire(origin)
    with pytest.raises(failure, match=message):
        await connection.send(request("/"), Collected())
    assert not connection.reusable
    await pool.close()
    server.close()
