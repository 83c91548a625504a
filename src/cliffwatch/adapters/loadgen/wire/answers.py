"""An attempt's answer as the lean transport hands it over, read into the attempt's state exactly as the aiohttp
path reads one (``answer_reader``): the same functions decide what a status, an error's body, a whole body and
the server-state headers mean.

What differs is only when: the head and each piece of the body arrive as calls from the connection's
``data_received``, a stream's pieces go straight into its SSE parser, and what follows an answer already known
(an error's body, the end of a stream after its ``[DONE]``) is read for at most ``DRAIN_TIMEOUT_S``, so the
connection can be reused, and no longer.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from cliffwatch.adapters.loadgen.answer_reader import (
    DRAIN_TIMEOUT_S,
    MAX_BODY,
    MAX_ERROR_BODY,
    error_body,
    error_status,
    state_of_found,
    whole_body,
)
from cliffwatch.adapters.loadgen.attempt_state import AttemptState
from cliffwatch.adapters.loadgen.openai_stream import OpenAIStream
from cliffwatch.adapters.loadgen.wire.connection import Header, WireConnection
from cliffwatch.domain.server.state_headers import watched


class Tally(Protocol):
    """Where the run's output tokens so far are counted (the executor, for the generator's throughput)."""

    tokens: float


class _Kind(Enum):
    BODY = 1
    STREAM = 2
    ERROR = 3
    REDIRECT = 4


class WireAnswer:
    """The ``Sink`` of one hop's answer; ``finish`` once the exchange is over (whole or cut short)."""

    __slots__ = ("_connection", "_counted", "_kind", "_openai", "_parts", "_reason", "_stream", "_tally", "location",
                 "state")  # fmt: skip

    def __init__(self, state: AttemptState, tally: Tally, connection: WireConnection, *, stream: bool,
                 openai: bool) -> None:  # fmt: skip
        self.state = state
        self.location: str | None = None  # a redirect's Location
        self._tally = tally
        self._connection = connection
        self._stream = stream
        self._openai = openai
        self._kind = _Kind.BODY
        self._parts = bytearray()
        self._reason = ""
        self._counted = 0

    @property
    def redirected(self) -> bool:
        return self._kind is _Kind.REDIRECT

    def head(self, status: int, reason: str, headers: list[Header], now: int) -> None:
        state = self.state
        state.first_byte = now
        state.status = status
        self._reason = reason
        # Every answer passes here: each header name is looked up once as the server wrote it, and only the
        # few this reads are decoded.
        date = location = retry_after = None
        found: list[tuple[str, str]] = []
        for name, value in headers:
            role = _ROLES.get(name)
            if role is None:
                role = _role(name)
            if role:
                text = value.decode("latin-1")
                lower, what = role
                if what is _Read.DATE:
                    date = date or text
                elif what is _Read.LOCATION:
                    location = location or text
                elif what is _Read.RETRY_AFTER:
                    retry_after = retry_after or text
                if watched(lower):
                    found.append((lower, text))
        state.state = state_of_found(found, date)
        if 300 <= status < 400:
            self._kind = _Kind.REDIRECT
            self.location = location
            self._connection.finish_within(DRAIN_TIMEOUT_S)  # a small body, read so the connection is reused
        elif not 200 <= status < 300:
            # The status is the answer; the body only adds a message, so a slow or broken body cannot change it.
            self._kind = _Kind.ERROR
            error_status(state, status, reason, retry_after)
            self._connection.finish_within(DRAIN_TIMEOUT_S)
        elif self._stream:
            self._kind = _Kind.STREAM
            state.stream = OpenAIStream(keep_text=state.reply is not None)

    def body(self, data: bytes, now: int) -> bool:
        kind = self._kind
        if kind is _Kind.STREAM:
            parser = self.state.stream
            assert parser is not None  # made with the head
            ended = parser.feed(data, now)
            if parser.token_chunks != self._counted:
                self._tally.tokens += parser.token_chunks - self._counted
                self._counted = parser.token_chunks
            if ended and self.state.end is None:
                self.state.end = now
                if parser.error is not None:
                    return False  # a stream that failed is not read on
                self._connection.finish_within(DRAIN_TIMEOUT_S)  # what follows [DONE]: normally the chunks' end
            return True
        parts = self._parts
        parts += data
        return len(parts) < (MAX_BODY if kind is _Kind.BODY else MAX_ERROR_BODY)

    def finish(self, now: int) -> None:
        """The exchange is over: a whole body's completion, or an error's message, taken into the state."""
        if self._kind is _Kind.BODY and self.state.status is not None:
            self._tally.tokens += whole_body(self.state, bytes(self._parts), now, openai=self._openai)
        elif self._kind is _Kind.ERROR and self.state.status is not None:
            error_body(self.state, self.state.status, self._reason, bytes(self._parts))


class _Read(Enum):
    OTHER = 0
    DATE = 1
    LOCATION = 2
    RETRY_AFTER = 3


_READ = {"date": _Read.DATE, "location": _Read.LOCATION, "retry-after": _Read.RETRY_AFTER}
MAX_NAMES = 512  # header names remembered as servers spell them; a server inventing names is read uncached
_ROLES: dict[bytes, tuple[str, _Read] | tuple[()]] = {}


def _role(name: bytes) -> tuple[str, _Read] | tuple[()]:
    """What a header name means to ``WireAnswer.head``: its lower-case text and what is read of it, or ``()``
    for a header nothing reads. Remembered (up to ``MAX_NAMES`` names), as each server repeats its few."""
    lower = name.decode("latin-1").lower()
    what = _READ.get(lower, _Read.OTHER)
    role: tuple[str, _Read] | tuple[()] = (lower, what) if what is not _Read.OTHER or watched(lower) else ()
    if len(_ROLES) < MAX_NAMES:
        _ROLES[name] = role
    return role
