"""The bounds a run's preparation works within, enforced from outside the code they bound.

A preparation reads files and renders chat templates that whoever may submit a scenario wrote: a template with
a loop of ten million steps, or a trace of a million rows, must not hold a worker thread (or, through the GIL,
the service) for long, nor grow the process without limit. Checks sprinkled through the parsers would miss
the loop nobody thought of, so a :class:`Watchdog` thread watches the preparing thread instead: past its
deadline (the whole preparation's, or a tighter one a template render holds), or once the process has grown by
more than the memory bound, it raises an exception in that thread (CPython's ``PyThreadState_SetAsyncExc``).
The exception lands at the thread's next bytecode: a single C call (a JSON decode of one bounded file) runs to
its end first, which the byte and row bounds keep short.

What fired is turned into :class:`BoundExceeded` where the watched code ends, naming the bound and its setting;
the preparation names the file it was reading.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.workload.prepared import PreparationLimits

POLL_S = 0.01  # how often the watchdog looks: a template's doubling string is caught within a step or two
_STATM = Path("/proc/self/statm")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class BoundExceeded(CliffwatchError):
    """A preparation bound was hit: ``message`` names the bound and the setting that sets it."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class _Expired(BaseException):
    """Delivered into the watched thread; turned into ``BoundExceeded`` where the watch ends."""


@dataclass(frozen=True, kw_only=True)
class _Deadline:
    at: float
    message: str


def resident_bytes() -> int | None:
    """This process's resident memory, or None where the system does not say (not Linux)."""
    try:
        return int(_STATM.read_text().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class Watchdog:
    """Watches the thread that enters it: raises ``BoundExceeded`` there past ``limits.timeout_s`` or past
    ``limits.max_memory_bytes`` of growth, and past a :meth:`within` section's own deadline."""

    def __init__(self, limits: PreparationLimits, *, clock: Callable[[], float] = time.monotonic,
                 memory: Callable[[], int | None] = resident_bytes) -> None:  # fmt: skip
        self.limits = limits
        self._clock = clock
        self._memory = memory
        self._lock = threading.Lock()
        self._deadlines: list[_Deadline] = []
        self._armed = False
        self._fired: str | None = None
        self._stop = threading.Event()
        self._thread_id = 0
        self._baseline: int | None = None
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> Watchdog:
        self._thread_id = threading.get_ident()
        self._baseline = self._memory()
        seconds = self.limits.timeout_s
        timeout = _Deadline(at=self._clock() + seconds, message=f"preparing took longer than {seconds:g} s "
                            "(CLIFFWATCH_PREPARE_TIMEOUT_S)")  # fmt: skip
        with self._lock:
            self._deadlines.insert(0, timeout)  # after an ``end`` that came first, which still holds
        self._armed = True
        self._watcher = threading.Thread(target=self._watch, name="cliffwatch-prepare-watchdog", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._disarm()
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def end(self, reason: str) -> None:
        """Ends the watched work at its next step, from any thread: ``BoundExceeded(reason)`` is raised there."""
        with self._lock:
            self._deadlines.insert(0, _Deadline(at=float("-inf"), message=reason))

    def run(self, work: Callable[[], object]) -> object:
        """``work()``, any bound it hits raised as ``BoundExceeded`` (use as the outermost call of the thread)."""
        try:
            try:
                return work()
            finally:
                self._disarm()
        except _Expired:
            raise BoundExceeded(self._fired or "a preparation bound was hit") from None

    @contextmanager
    def within(self, seconds: float, message: str) -> Iterator[None]:
        """A section with a deadline of its own (one chat template render): past it, ``BoundExceeded(message)``
        is raised from the section, which the caller may name more precisely."""
        deadline = _Deadline(at=self._clock() + seconds, message=message)
        with self._lock:
            self._deadlines.append(deadline)
        try:
            try:
                yield
            finally:
                with self._lock:
                    self._deadlines.remove(deadline)
        except _Expired:
            if self._fired == message:
                self._fired = None
                with self._lock:
                    self._armed = True  # the section's bound ended it; the preparation's own still hold
                raise BoundExceeded(message) from None
            raise

    def _disarm(self) -> None:
        with self._lock:
            self._armed = False

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            reason = self._over()
            if reason is None:
                continue
            with self._lock:
                if not self._armed:
                    continue
                self._armed = False  # one exception at a time; a section that handles its own re-arms
                self._fired = reason
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), ctypes.py_object(_Expired))

    def _over(self) -> str | None:
        now = self._clock()
        with self._lock:
            expired = [d for d in self._deadlines if now > d.at]
        if expired:
            return expired[-1].message  # the innermost section's, which names the most
        if self._baseline is not None:
            current = self._memory()
            if current is not None and current - self._baseline > self.limits.max_memory_bytes:
                mib = self.limits.max_memory_bytes >> 20
                return f"preparing grew the process by more than {mib:,} MiB (CLIFFWATCH_PREPARE_MAX_MEMORY_MB)"
        return None
