"""Loopback servers with scripted behaviour for the load client's tests, and the small values they share.

Every server listens on 127.0.0.1 on a random port and records what it was sent (method, path, headers,
body) and over which connection, so tests can check request shapes and connection reuse.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDictProxy

from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest

FIXTURES = Path(__file__).parents[2] / "fixtures" / "sse"
CHAT_STREAM = (FIXTURES / "llamacpp-chat-stream.txt").read_bytes()
COMPLETIONS_STREAM = (FIXTURES / "llamacpp-completions-stream.txt").read_bytes()
TRUNCATED_STREAM = (FIXTURES / "llamacpp-chat-stream-truncated.txt").read_bytes()
CHAT_NONSTREAM = (FIXTURES / "llamacpp-chat-nonstream.json").read_bytes()
DONE = b"data: [DONE]\n\n"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Changes:
    """Wakes a test whenever shared state changed, so it can wait for a condition without polling."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def notify(self) -> None:
        self._changed.set()

    async def until(self, predicate: Callable[[], bool], *, within_s: float = 5.0, what: str = "it") -> None:
        try:
            async with asyncio.timeout(within_s):
                while not predicate():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            pytest.fail(f"timed out after {within_s} s waiting for {what}")


@dataclass(frozen=True, kw_only=True)
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: CIMultiDictProxy[str]
    body: bytes
    peer: tuple[str, int]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(kw_only=True)
class Served:
    """A running test server: its base URL and everything it was sent."""

    url: str
    requests: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends hanging handlers at teardown
    changes: Changes = field(default_factory=Changes)  # notified on every request received

    @property
    def connections(self) -> set[tuple[str, int]]:
        """The client ends of every connection a request arrived on."""
        return {seen.peer for seen in self.requests}

    async def hang(self) -> None:
        """What a handler awaits to never answer (until the test is over)."""
        await self.release.wait()

    async def until_received(self, count: int, *, within_s: float = 5.0) -> None:
        await self.changes.until(lambda: len(self.requests) >= count, within_s=within_s, what=f"{count} requests")


Serve = Callable[[Handler], Awaitable[Served]]


def closed_port_url() -> str:
    """A loopback URL nothing listens on (the port was just bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def sse(payload: dict[str, Any] | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


def chat_chunk(content: str | None = None, *, role: bool = False, finish: str | None = None, **extra: Any) -> bytes:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    return sse({"object": "chat.completion.chunk", "choices": [{"delta": delta, "finish_reason": finish}], **extra})


def events_of(raw: bytes) -> list[bytes]:
    """A captured body cut into one write per event, as a server flushing each chunk sends it."""
    return [part + b"\n\n" for part in raw.split(b"\n\n") if part]


async def start_sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    return response


async def send_events(request: web.Request, events: Iterable[bytes], *, gap_s: float = 0.0) -> web.StreamResponse:
    """Streams ``events`` as SSE, one write each, ``gap_s`` apart (the server's pace, not synchronisation)."""
    response = await start_sse(request)
    for index, event in enumerate(events):
        if index and gap_s:
            await asyncio.sleep(gap_s)
        await response.write(event)
    await response.write_eof()
    return response


# The transport ``scenario_for`` gives a scenario's client unless the test names one: a module's tests run over
# each transport by setting it (``over_each_transport``), so aiohttp and the lean client are held to one suite.
TRANSPORT = {"value": "aiohttp"}


def scenario_for(
    url: str,
    *,
    api: str = "openai-chat",
    request: dict[str, Any] | None = None,
    client: dict[str, Any] | None = None,
    slo: dict[str, Any] | None = None,
    phases: list[dict[str, Any]] | None = None,
) -> Scenario:
    """A tiny scenario document against ``url``, parsed as the CLI would parse it."""
    template: dict[str, Any] = {} if api == "http" else {"model": "tiny-llama", "prompt_tokens": 5, "max_tokens": 8}
    return parse_scenario(
        {
            "name": "loadgen-it",
            "seed": 3,
            "slo": slo or {"e2e_ms": 1000, "timeout_ms": 3000},
            "target": {"url": url, "api": api, "request": {**template, **(request or {})}},
            "client": {"transport": TRANSPORT["value"], **(client or {})},
            "phases": phases
            or [{"name": "only", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
        }
    )


def request_id(body: Any) -> int:
    """The id of the request that sent this chat body: its prompt opens with ``req-<id>``."""
    return int(body["messages"][0]["content"].split()[0].removeprefix("req-"))


def planned(rid: int = 0, *, prompt_tokens: int = 5, max_tokens: int = 8) -> PlannedRequest:
    return PlannedRequest(id=rid, phase=0, scheduled_ns=0, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
