"""One keep-alive HTTP/1.1 connection of the lean transport: a request written whole, its answer parsed as it
arrives (llhttp, through ``httptools``) and handed to the attempt's ``Sink`` in the same callback.

No coroutine wakes per chunk: the status, the headers and each piece of the body reach the sink from
``data_received`` itself, stamped with the monotonic clock, and the one future an attempt awaits resolves when
the answer is whole (or failed). That is where the lean transport saves its CPU: an SSE stream of 256 chunks
costs 256 parser callbacks, not 256 task switches.

A connection carries one exchange at a time. It may be reused when the answer ended cleanly and both sides
keep it alive; anything else (a failure, an answer the sink stopped reading, bytes arriving unasked) closes it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

import httptools

from cliffwatch.adapters.loadgen.wire.failures import ConnectionClosed, ProtocolViolation, ReadTimedOut

Header = tuple[bytes, bytes]


class Sink(Protocol):
    """Where a connection hands an answer as it arrives (``now``: ``time.perf_counter_ns``)."""

    def head(self, status: int, reason: str, headers: list[Header], now: int) -> None: ...

    def body(self, data: bytes, now: int) -> bool:
        """Takes a piece of the body; False when the sink needs no more (the connection is then closed)."""
        ...


class WireConnection(asyncio.Protocol):
    """An ``asyncio.Protocol``: opened by ``WirePool``, which gets it back through ``release``."""

    def __init__(self, *, read_timeout_s: float | None, lost: Callable[[WireConnection], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False  # set when an answer ended cleanly on a connection both sides keep alive
        self.answered = False  # any byte of the current exchange's answer arrived
        self._lost = lost
        self._read_timeout_s = read_timeout_s
        self._parser = httptools.HttpResponseParser(self)
        self._sink: Sink | None = None
        self._done: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: asyncio.TimerHandle | None = None  # ``finish_within``'s
        self._status = 0
        self._reason = ""
        self._headers: list[Header] = []
        self._delimited = False  # the answer says where its body ends (Content-Length or chunked)
        self._wanted = True
        self._bodiless = False  # the answer to a HEAD: its length describes a body that never comes

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport: create_connection's

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        self._cancel_timer()
        if self._done is not None and not self._done.done():
            if self._status and not self._delimited and self._wanted:
                self._complete()  # a body without a length ends when the server closes the connection
            else:
                what = "while answering" if self.answered else "before answering"
                self._fail(ConnectionClosed(f"the server closed the connection {what}", answered=self.answered))
        self._lost(self)

    def data_received(self, data: bytes) -> None:
        if self._done is None or self._done.done():  # nothing asked: a server talking out of turn
            self.close()
            return
        self.answered = True
        if self._timer is not None:
            self._arm_timer()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolViolation("the server switched protocols, which no load request asks for"))
        except httptools.HttpParserError as exc:
            self._fail(ProtocolViolation(f"malformed HTTP answer: {exc}"))

    def eof_received(self) -> bool:
        return False  # close our side too: a half-closed connection is never reused

    # httptools callbacks

    def on_status(self, reason: bytes) -> None:
        self._reason = reason.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        lower = name.lower()
        if lower == b"content-length" or (lower == b"transfer-encoding" and b"chunked" in value.lower()):
            self._delimited = True

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        if 100 <= self._status < 200:  # an interim answer (103 Early Hints): the real one follows on this connection
            self._status, self._headers, self._delimited = 0, [], False
            return
        if self._sink is not None:
            self._sink.head(self._status, self._reason, self._headers, time.perf_counter_ns())
        if self._status in (204, 304):
            self._delimited = True  # no body, whatever the headers say
        if self._bodiless and self._wanted:
            # llhttp cannot be told the request was a HEAD, so it would wait for the body the length announces:
            # the answer ends here, and the connection with it (its parser would misread what comes next)
            self._wanted = False
            self._complete()
            self.close()

    def on_body(self, body: bytes) -> None:
        if self._wanted and self._sink is not None and not self._sink.body(body, time.perf_counter_ns()):
            self._wanted = False
            self._complete()  # the sink has what it needs: the rest is not read, and the connection not reused
            self.close()

    def on_message_complete(self) -> None:
        if not self._status:
            return  # the end of an interim answer
        if self._wanted:
            self.reusable = self._parser.should_keep_alive()
            self._complete()

    # the exchange

    def send(self, request: bytes, sink: Sink, *, bodiless: bool = False) -> asyncio.Future[None]:
        """Writes ``request`` and returns the future of its answer; the sink hears it as it arrives. ``bodiless``:
        the request was a HEAD, whose answer has no body whatever its headers say."""
        if self.transport is None or self.closed:
            raise ConnectionClosed("the connection closed before the request was written", answered=False)
        loop = asyncio.get_running_loop()
        self._sink, self._done = sink, loop.create_future()
        self._status, self._reason, self._headers = 0, "", []
        self._delimited, self._wanted, self.answered, self.reusable = False, True, False, False
        self._bodiless = bodiless
        self.transport.write(request)
        if self._read_timeout_s is not None:
            self._arm_timer()
        return self._done

    def finish_within(self, seconds: float) -> None:
        """Ends the exchange after ``seconds`` unless its answer ended by then: for what follows an answer already
        known (an error's body, the end of a stream after its [DONE]), which a server could keep open. Ended so,
        the connection is closed, not reused."""
        if self._done is not None and not self._done.done() and self._deadline is None:
            self._deadline = asyncio.get_running_loop().call_later(seconds, self._end_early)

    def _end_early(self) -> None:
        self._deadline = None
        self._wanted = False
        self._complete()
        self.close()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.close()

    def abort(self) -> None:
        """Drops the connection at once (an attempt that ran out of time mid-answer)."""
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def _complete(self) -> None:
        self._cancel_timer()
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        done, self._sink = self._done, None
        if done is not None and not done.done():
            done.set_result(None)

    def _fail(self, exc: Exception) -> None:
        self._cancel_timer()
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._sink = None
        self._wanted = False
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        self.abort()

    def _arm_timer(self) -> None:
        self._cancel_timer()
        assert self._read_timeout_s is not None
        self._timer = asyncio.get_running_loop().call_later(self._read_timeout_s, self._read_timed_out)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _read_timed_out(self) -> None:
        self._timer = None
        self._fail(ReadTimedOut(self._read_timeout_s or 0.0))
