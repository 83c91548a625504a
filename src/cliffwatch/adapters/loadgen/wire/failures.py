"""How the lean transport fails, each failure the attempt's ``FailureKind`` names (``request_attempts``): the
connection could not be opened or was refused, timed out, closed early, or answered in something that is not
HTTP/1.1. None of them is raised past the attempt: every failure of the target is an outcome."""

from __future__ import annotations

from cliffwatch.domain.errors import CliffwatchError


class WireFailure(CliffwatchError):
    """Something the target (or the path to it) did that ends an attempt."""


class ConnectFailed(WireFailure):
    """No connection could be opened to any of the place's pinned addresses: nothing was sent."""


class ConnectTimedOut(WireFailure):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"connect timeout after {seconds:.3g}s")


class ConnectionClosed(WireFailure):
    """The server closed the connection before its answer was whole (``answered``: after some of it)."""

    def __init__(self, message: str, *, answered: bool) -> None:
        self.answered = answered
        super().__init__(message)


class ProtocolViolation(WireFailure):
    """The answer is not HTTP/1.1 as a client may read it."""


class ReadTimedOut(WireFailure):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"read timeout: no data for {seconds:.3g}s")
