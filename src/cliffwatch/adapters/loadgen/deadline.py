"""An attempt's time limit: ``asyncio.timeout``'s semantics, entered and left without a coroutine.

``async with asyncio.timeout(s)`` makes two coroutines (its ``__aenter__`` and ``__aexit__``) and walks a state
machine on every attempt, about 2 µs of a plain request's CPU on the load path. ``Deadline`` is the same rule
as a plain context manager: when the time is up it cancels the task, and on the way out a cancellation it
caused (and nothing else asked for) becomes ``TimeoutError``, as ``asyncio.Timeout`` decides it in 3.11–3.13.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class Deadline:
    """``with Deadline(seconds):`` inside a task; ``expired`` tells whether it fired."""

    __slots__ = ("_cancelling", "_handle", "_seconds", "_task", "expired")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.Handle | None = None
        self._cancelling = 0
        self.expired = False

    def __enter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline should be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        loop = task.get_loop()
        if self._seconds <= 0:
            self._handle = loop.call_soon(self._on_timeout)
        else:
            self._handle = loop.call_later(self._seconds, self._on_timeout)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        # uncancel only when it fired: the cancellation it made is taken back either way
        task = self._task
        if self.expired and task is not None and task.uncancel() <= self._cancelling and (
                exc_type is asyncio.CancelledError):  # fmt: skip
            raise TimeoutError from exc  # our cancellation, and no one else's: the time ran out

    def _on_timeout(self) -> None:
        assert self._task is not None
        self._task.cancel()
        self.expired = True
        self._handle = None
