"""Fixtures for socket-level tests of the simulated target: real loopback servers, and ways to read them."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.simulator.engine import SimulatedEngine
from cliffwatch.simulator.server import ENGINE, create_app

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (-?[0-9.]+(?:[eE][-+]?[0-9]+)?|[-+]?Inf|NaN)$")


@dataclass(kw_only=True)
class Streamed:
    """One streamed response as the client saw it, with arrival times relative to the send."""

    status: int
    events: list[Any] = field(default_factory=list)  # JSON payloads, and "[DONE]"
    first_token_s: float | None = None
    total_s: float = 0.0

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [e for e in self.events if isinstance(e, dict)]


@dataclass(kw_only=True)
class Target:
    client: TestClient[web.Request, web.Application]
    app: web.Application

    @property
    def engine(self) -> SimulatedEngine:
        return self.app[ENGINE]

    async def metrics(self) -> dict[str, float]:
        """Every sample of /metrics by its name with labels; fails on any line that is not a sample."""
        response = await self.client.get("/metrics")
        assert response.status == 200
        samples: dict[str, float] = {}
        for line in (await response.text()).splitlines():
            if line.startswith("#"):
                continue
            match = _SAMPLE.match(line)
            assert match is not None, line
            samples[match[1]] = float(match[2])
        return samples

    @staticmethod
    async def wait_until(predicate: Callable[[], bool], *, within_s: float = 5.0, what: str = "it") -> None:
        """Polls ``predicate`` every few milliseconds; fails the test if it is not true within ``within_s``."""
        deadline = time.perf_counter() + within_s
        while not predicate():
            if time.perf_counter() > deadline:
                pytest.fail(f"timed out after {within_s} s waiting for {what}")
            await asyncio.sleep(0.005)

    async def stream(self, path: str, body: dict[str, Any]) -> Streamed:
        """Sends a streaming request and reads its SSE events to the end."""
        started = time.perf_counter()
        async with self.client.post(path, json={**body, "stream": True}) as response:
            result = Streamed(status=response.status)
            if response.status != 200:
                return result
            assert response.headers["Content-Type"].startswith("text/event-stream")
            buffer = b""
            async for data in response.content.iter_any():
                buffer += data
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    text = block.decode()
                    assert text.startswith("data: "), text
                    payload = text.removeprefix("data: ")
                    event = payload if payload == "[DONE]" else json.loads(payload)
                    if result.first_token_s is None and _carries_token(event):
                        result.first_token_s = time.perf_counter() - started
                    result.events.append(event)
            assert buffer == b""
        result.total_s = time.perf_counter() - started
        return result


def _carries_token(event: Any) -> bool:
    if not isinstance(event, dict) or not event.get("choices"):
        return False
    choice = event["choices"][0]
    return bool(choice.get("delta", {}).get("content") or choice.get("text"))


StartTarget = Callable[[TargetModel], Awaitable[Target]]


@pytest.fixture
async def start_target() -> AsyncIterator[StartTarget]:
    """Starts simulated targets on 127.0.0.1 (random ports); all are shut down after the test."""
    clients: list[TestClient[web.Request, web.Application]] = []

    async def start(model: TargetModel) -> Target:
        app = create_app(model)
        # No connection limit: a load test must queue at the server, not in the client's pool.
        client = TestClient(TestServer(app, host="127.0.0.1"), connector=aiohttp.TCPConnector(limit=0))
        await client.start_server()
        clients.append(client)
        return Target(client=client, app=app)

    yield start
    for client in clients:
        await client.close()
