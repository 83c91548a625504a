"""Ctrl-C (or SIGTERM) during a command's work: once, stop it cleanly; twice, abandon it."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stopping_on_signals(what: str, stop: Callable[[], None], note: Callable[[str], None]) -> Iterator[None]:
    """For the block (in the running loop's task): the first SIGINT or SIGTERM notes that the ``what`` is
    stopping and calls ``stop``, so it ends cleanly and is recorded; the next cancels the task."""
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    presses = 0

    def on_signal() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            note(f"interrupted: stopping the {what} (again to abandon it)")
            stop()
        elif main_task is not None:
            main_task.cancel()

    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal)
    try:
        yield
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
