"""The executor's lean exchange (``client.transport: lean``): one hop written whole on a pooled keep-alive
connection, its answer read into the attempt's state as it arrives (``answers``), redirects decided as the
aiohttp path decides them (``AnswerReader._follow``), and every way the exchange can fail an attempt's failure.

A request's head is made once per method, URL and header set, and only its length and body change from one
request to the next. As aiohttp does, a URL's user and password become a Basic ``Authorization`` header (unless
the scenario sets one) and never reach the Host header; nothing asks for a compressed answer, since none would
be decompressed. The run's pins, its connection limit and its timeouts are the pool's (``pool``).
"""

from __future__ import annotations

import base64
import time
from urllib.parse import unquote, urlsplit

from cliffwatch.adapters.loadgen.answer_reader import AnswerReader
from cliffwatch.adapters.loadgen.attempt_state import AttemptState
from cliffwatch.adapters.loadgen.attempt_trace import AttemptTrace
from cliffwatch.adapters.loadgen.pinned_resolver import PinRefused
from cliffwatch.adapters.loadgen.redirects import Hop
from cliffwatch.adapters.loadgen.wire.answers import WireAnswer
from cliffwatch.adapters.loadgen.wire.failures import (
    ConnectFailed,
    ConnectionClosed,
    ConnectTimedOut,
    ProtocolViolation,
    ReadTimedOut,
    WireFailure,
)
from cliffwatch.adapters.loadgen.wire.pool import Origin, WirePool
from cliffwatch.domain.scenario.retry import FailureKind

_DEFAULT_PORTS = {"http": 80, "https": 443}
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
MAX_HEADS = 64  # distinct request heads kept (each class's, each redirect's place): a target's redirects add more


class WireReader(AnswerReader):
    """``AnswerReader`` with the lean transport's exchange; ``_wire`` is the run's pool, opened by the executor."""

    _wire: WirePool | None = None
    _heads: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[Origin, bytes]]

    async def _wire_exchange(self, hop: Hop, hops: int, state: AttemptState, timing: AttemptTrace,
                             headers: dict[str, str]) -> Hop | None:  # fmt: skip
        """Sends one hop and reads its answer into ``state``; the next hop for a redirect followed, else None. A
        failure of the target is the state's failure; only the attempt's own deadline (``TimeoutError``) leaves."""
        pool = self._wire
        if pool is None:
            raise RuntimeError("the lean transport is used outside its executor's 'async with'")
        try:
            origin, head = self._head(hop)
        except ValueError as exc:  # a header with a line break, a URL that is not one: nothing is sent
            state.fail(FailureKind.REFUSED, f"the request cannot be written: {exc}")
            return None
        body = hop.body or b""
        request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body if body or hop.method in _BODY_METHODS else (
            head + b"\r\n")  # fmt: skip
        try:
            connection = pool.idle(origin) or await pool.acquire(origin, timing)
        except PinRefused as exc:
            state.fail(FailureKind.REFUSED, str(exc))
            return None
        except ConnectTimedOut as exc:
            state.fail(FailureKind.TIMEOUT, str(exc))
            return None
        except ConnectFailed as exc:
            state.fail(FailureKind.CONNECTION, str(exc))
            return None
        answer = WireAnswer(state, self, connection, stream=self.stream, openai=self.openai)
        try:
            done = connection.send(request, answer, bodiless=hop.method == "HEAD")
            timing.sent = True
            await done
        except WireFailure as exc:
            _failed(state, exc)
            return None
        finally:
            if not connection.reusable:
                connection.abort()  # cut short (the attempt's deadline, a failure): never reused mid-answer
            pool.release(connection, origin)
        answer.finish(time.perf_counter_ns())
        if answer.redirected and state.status is not None:
            return await self._follow(state.status, answer.location, hop, hops, state, headers)
        return None

    def _head(self, hop: Hop) -> tuple[Origin, bytes]:
        """The hop's origin and its request head up to (not including) its length and the blank line."""
        heads = self._heads
        # by the headers' content, not their dict's id: a redirect's headers are a dict of their own, freed after
        # the hop, and a later one at the same address must not be written with an earlier hop's headers
        key = (hop.method, hop.url, tuple(hop.headers.items()))
        found = heads.get(key)
        if found is not None:
            return found
        made = _head(hop)
        if len(heads) >= MAX_HEADS:
            heads.pop(next(iter(heads)))
        heads[key] = made
        return made


def _head(hop: Hop) -> tuple[Origin, bytes]:
    parts = urlsplit(hop.url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http(s) URL with a host: {hop.url!r}")
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    authority = host if port == _DEFAULT_PORTS[parts.scheme] else f"{host}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"{hop.method} {target} HTTP/1.1", f"Host: {authority}"]
    names = {name.lower() for name in hop.headers}
    for name, value in hop.headers.items():
        if any(c in name or c in value for c in "\r\n"):
            raise ValueError(f"the header {name!r} holds a line break")
        lines.append(f"{name}: {value}")
    if parts.username is not None and "authorization" not in names:
        user = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        lines.append("Authorization: Basic " + base64.b64encode(user.encode()).decode("ascii"))
    if "accept" not in names:
        lines.append("Accept: */*")
    text = "\r\n".join(lines) + "\r\n"
    return Origin(scheme=parts.scheme, host=parts.hostname, port=port), text.encode("utf-8")


def _failed(state: AttemptState, exc: WireFailure) -> None:
    """The failure kind of what ended the exchange, as the aiohttp path names the same events."""
    if isinstance(exc, ReadTimedOut):
        state.fail(FailureKind.TIMEOUT, str(exc))
    elif isinstance(exc, ConnectionClosed) and exc.answered:
        state.fail(FailureKind.TRUNCATED, f"response body cut off: {exc}")
    elif isinstance(exc, ProtocolViolation | ConnectionClosed):
        state.fail(FailureKind.CONNECTION, str(exc))
    else:
        state.fail(FailureKind.CONNECTION, f"{type(exc).__name__}: {exc}")
