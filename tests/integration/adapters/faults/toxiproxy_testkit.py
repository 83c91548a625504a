"""Servers and helpers for the Toxiproxy client's tests: misbehaving fakes, a recorder, and the oracle.

The fakes stand in only for what a real Toxiproxy cannot be made to do on demand (hang, fail with 500);
everything else runs against the real server from the session's ``toxiproxy`` fixture. The oracle is
toxiproxy-python — another client, written independently — so a test does not check our client with itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from toxiproxy import Toxiproxy

from cliffwatch.domain.scenario.faults import ToxicState


def oracle(host: str, port: int) -> Toxiproxy:
    """toxiproxy-python pointed at the server (its host and port are class attributes: set per use)."""
    server = Toxiproxy()
    server.update_api_consumer(host, port)
    return server


def oracle_toxics(server: Toxiproxy, proxy: str) -> dict[str, ToxicState]:
    """The proxy's toxics as toxiproxy-python reads them, in our value type for comparison."""
    found = server.get_proxy(proxy)
    assert found is not None, f"the oracle sees no proxy {proxy!r}"
    return {
        name: ToxicState(
            name=name,
            type=toxic.type,
            stream=toxic.stream,
            toxicity=float(toxic.toxicity),
            attributes=dict(toxic.attributes),
        )
        for name, toxic in found.toxics().items()
    }


def closed_port() -> int:
    """A loopback port nothing listens on (bound then released: connecting is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an orphan may wait a while to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def wait_until(predicate: Callable[[], bool], *, within_s: float) -> float:
    """Seconds until ``predicate()`` held; raises AssertionError after ``within_s``."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < within_s, f"not within {within_s}s"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


@dataclass(kw_only=True)
class Hanging:
    url: str
    connections: int = 0


@contextlib.asynccontextmanager
async def hanging_server() -> AsyncIterator[Hanging]:
    """A TCP server that accepts every connection, reads, and never answers."""
    hanging = Hanging(url="")
    release = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hanging.connections += 1
        with contextlib.suppress(ConnectionError):
            await release.wait()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    hanging.url = f"http://127.0.0.1:{port}"
    async with server:
        try:
            yield hanging
        finally:
            release.set()


@dataclass(kw_only=True)
class Scripted:
    url: str
    statuses: list[int]  # answered in turn; the last one repeats
    seen: list[str] = field(default_factory=list)  # "METHOD path" of every request


@contextlib.asynccontextmanager
async def scripted_server(*statuses: int) -> AsyncIterator[Scripted]:
    """An HTTP server answering with ``statuses`` in turn, as Toxiproxy would (JSON error or version)."""
    scripted = Scripted(url="", statuses=list(statuses))

    async def answer(request: web.Request) -> web.Response:
        scripted.seen.append(f"{request.method} {request.path}")
        status = scripted.statuses.pop(0) if len(scripted.statuses) > 1 else scripted.statuses[0]
        if status >= 400:
            return web.json_response({"error": f"scripted failure {status}", "status": status}, status=status)
        return web.json_response({"version": "2.12.0"}, status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    async with TestServer(app, host="127.0.0.1") as server:
        scripted.url = str(server.make_url("")).rstrip("/")
        yield scripted


@dataclass(kw_only=True)
class Recorder:
    url: str
    seen: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of every request passed on


@contextlib.asynccontextmanager
async def recording_proxy(upstream: str) -> AsyncIterator[Recorder]:
    """An HTTP server passing every request on to ``upstream`` unchanged and recording it."""
    recorder = Recorder(url="")

    async with aiohttp.ClientSession() as session:

        async def relay(request: web.Request) -> web.Response:
            recorder.seen.append((request.method, request.path))
            body = await request.read()
            async with session.request(request.method, upstream + request.raw_path, data=body or None) as answer:
                return web.Response(status=answer.status, body=await answer.read(), content_type=answer.content_type)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", relay)
        async with TestServer(app, host="127.0.0.1") as server:
            recorder.url = str(server.make_url("")).rstrip("/")
            yield recorder


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[str]:
    """A TCP echo server; yields its host:port (an upstream for a proxy that carries real traffic)."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(4096):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    async with server:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def round_trip_s(address: str, payload: bytes = b"ping") -> float:
    """Seconds to send ``payload`` through ``address`` and read it back."""
    host, _, port = address.rpartition(":")
    start = time.monotonic()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(payload)
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(len(payload)), 5.0) == payload
        return time.monotonic() - start
    finally:
        writer.close()


def stubborn_binary(directory: Path) -> Path:
    """An executable that ignores SIGTERM, prints its pid and never serves: a server that hangs."""
    path = directory / "stubborn-server"
    code = "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(os.getpid(), flush=True)\n"
    path.write_text(f"#!{sys.executable}\n{code}time.sleep(60)\n")
    path.chmod(0o755)
    return path
