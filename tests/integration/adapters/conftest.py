"""The ``serve`` fixture: loopback servers with scripted behaviour, shut down after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from loadgen_testkit import TRANSPORT, Handler, Seen, Serve, Served


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Starts loopback servers answering every path with ``handler``; all are shut down after the test."""
    servers: list[tuple[TestServer, Served]] = []

    async def start(respond: Handler) -> Served:
        served = Served(url="")

        @web.middleware
        async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
            assert request.transport is not None
            peer = request.transport.get_extra_info("peername")
            body = await request.read()
            served.requests.append(
                Seen(method=request.method, path=request.path, headers=request.headers, body=body, peer=peer[:2])
            )
            served.changes.notify()
            return await handler(request)

        app = web.Application(middlewares=[record])
        app.router.add_route("*", "/{tail:.*}", respond)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server(shutdown_timeout=1.0)
        served.url = str(server.make_url("")).rstrip("/")
        servers.append((server, served))
        return served

    yield start
    for server, served in servers:
        served.release.set()
        await server.close()


@pytest.fixture(params=["aiohttp", "lean"])
def over_each_transport(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test once a transport (``client.transport``), its scenarios made by ``scenario_for``."""
    TRANSPORT["value"] = request.param
    try:
        yield request.param
    finally:
        TRANSPORT["value"] = "aiohttp"
