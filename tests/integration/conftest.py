"""Fixtures of the integration tests: ``servers``, loopback HTTP servers that count what they receive."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer


class Counter:
    """A loopback server that answers 200 (or a 307 to ``redirect_to``) and keeps what it received."""

    def __init__(self) -> None:
        self.requests: list[web.Request] = []
        self.server: TestServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        assert self.server.port is not None
        return self.server.port


@pytest.fixture
async def servers() -> AsyncIterator[Callable[..., Any]]:
    started: list[TestServer] = []

    async def start(host: str = "127.0.0.1", port: int = 0, redirect_to: str | None = None) -> Counter:
        counter = Counter()

        async def handler(request: web.Request) -> web.StreamResponse:
            counter.requests.append(request)
            if redirect_to is not None:
                return web.Response(status=307, headers={"Location": redirect_to})
            return web.Response(text="fine")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        counter.server = TestServer(app, host=host, port=port)
        await counter.server.start_server()
        started.append(counter.server)
        return counter

    yield start
    for server in started:
        await server.close()
