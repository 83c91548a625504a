"""Running the simulated target as a server: bind, report the real URL, serve until cancelled.

This is the only place that opens a listening socket; the CLI's ``cliffwatch target`` command and the
demo call :func:`serve`, tests may too (on 127.0.0.1, port 0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from cliffwatch.domain.errors import BuiltinTargetFailed
from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.simulator.server import create_app

# In-flight handlers end as soon as the engine closes on shutdown; this only bounds slow writers.
SHUTDOWN_TIMEOUT_S = 2.0


def base_url(address: tuple[object, ...]) -> str:
    """``http://host:port`` for a socket address as ``getsockname`` returns it (IPv4 or IPv6)."""
    host, port = str(address[0]), int(str(address[1]))
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


async def serve(
    model: TargetModel,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serves ``model`` on ``host:port`` until cancelled, then shuts down and releases the socket.

    ``on_ready`` gets the base URL actually bound (port 0 picks a free port) once requests are accepted.
    Raises ``BuiltinTargetFailed`` if the address cannot be bound.
    """
    app = create_app(model)
    # handler_cancellation: a client that disconnects cancels its handler, which cancels its sequence.
    # access_log=None: one log line per request would cost more than simulating the request.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise BuiltinTargetFailed(f"cannot listen on {host}:{port}: {exc}") from exc
        if on_ready is not None:
            on_ready(base_url(tuple(runner.addresses[0])))
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
