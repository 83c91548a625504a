"""What aiohttp's trace hooks tell about one attempt on its way out: how long it waited for a pooled
connection, whether a connection to the target was being opened, and whether its request left the client.

The last decides whose an attempt's timeout is. An attempt whose time ran out before its request headers
were written never reached the target (the client's own pool was full, or its event loop stalled between
taking a connection and writing to it): that is the client's failure (``FailureKind.UNSENT``), never the
target's timeout. One that ran out while a connection was being opened did reach the target (a connect the
target does not accept in time is the target's), and one that ran out after its request left is the target's.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import aiohttp

from cliffwatch.domain.outcomes import NS_PER_MS


class AttemptTrace:
    """Per-attempt trace context (``trace_request_ctx``), over every hop the attempt made."""

    __slots__ = ("connecting", "pool_wait_ns", "queued_start", "sent")

    def __init__(self) -> None:
        self.queued_start = 0  # when it began waiting for a pooled connection; 0: not waiting
        self.pool_wait_ns = 0
        self.connecting = False  # a new connection to the target is being opened for it
        self.sent = False  # request headers written to a connection: the target may have seen it

    def close(self, now_ns: int) -> None:
        """Ends the attempt's wait for a pooled connection, if its time ran out while it was still waiting."""
        if self.queued_start:
            self.pool_wait_ns += max(0, now_ns - self.queued_start)
            self.queued_start = 0

    def unsent_reason(self, timeout_text: str, now_ns: int) -> str | None:
        """Why the attempt never left the client, when its time ran out (``timeout_text``) before it did;
        None when it left or was connecting to the target."""
        if self.sent or self.connecting:
            return None
        self.close(now_ns)
        waiting = self.pool_wait_ns
        if waiting:
            where = f"{waiting / NS_PER_MS:.0f} ms of it waiting for a pooled connection (client.pool_size)"
        else:
            where = "with a connection in hand: the client could not write it in time (a stalled event loop?)"
        return f"not sent: {timeout_text} before the request left the client, {where}"


async def _on_queued_start(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object) -> None:
    trace = ctx.trace_request_ctx
    if isinstance(trace, AttemptTrace):
        trace.queued_start = time.perf_counter_ns()


async def _on_queued_end(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object) -> None:
    trace = ctx.trace_request_ctx
    if isinstance(trace, AttemptTrace) and trace.queued_start:
        trace.pool_wait_ns += max(0, time.perf_counter_ns() - trace.queued_start)
        trace.queued_start = 0


async def _on_create_start(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object) -> None:
    trace = ctx.trace_request_ctx
    if isinstance(trace, AttemptTrace):
        trace.connecting = True


async def _on_create_end(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object) -> None:
    trace = ctx.trace_request_ctx
    if isinstance(trace, AttemptTrace):
        trace.connecting = False


async def _on_headers_sent(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object) -> None:
    trace = ctx.trace_request_ctx
    if isinstance(trace, AttemptTrace):
        trace.sent = True


def attempt_trace_config() -> aiohttp.TraceConfig:
    """The session's trace hooks, filling the ``AttemptTrace`` each request passes as ``trace_request_ctx``."""
    config = aiohttp.TraceConfig()
    config.on_connection_queued_start.append(_on_queued_start)
    config.on_connection_queued_end.append(_on_queued_end)
    config.on_connection_create_start.append(_on_create_start)
    config.on_connection_create_end.append(_on_create_end)
    config.on_request_headers_sent.append(_on_headers_sent)
    return config
