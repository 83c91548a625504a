"""structlog set-up, done once by the command line: JSON lines off a terminal, readable lines on one."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from cliffwatch.domain.ports import Progress

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(*, level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Routes structlog and the standard library's loggers (aiohttp, asyncio) through one pipeline."""
    out = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])


class LogProgress:
    """A ``ProgressObserver`` for runs without a terminal (the service): notes and every tenth tick, logged."""

    def __init__(self, every: int = 10) -> None:
        self.every = every
        self._ticks = 0
        self._log = structlog.get_logger("cliffwatch.run")

    def note(self, message: str) -> None:
        self._log.info(message)

    def progress(self, progress: Progress) -> None:
        self._ticks += 1
        if self._ticks % self.every == 0:
            self._log.info(
                "progress",
                phase=progress.phase,
                elapsed_s=round(progress.elapsed_s, 1),
                offered_per_s=round(progress.offered_per_s, 1),
                on_time=None if progress.on_time_ratio is None else round(progress.on_time_ratio, 3),
                tokens_per_s=round(progress.tokens_per_s),
                in_flight=progress.in_flight,
            )
