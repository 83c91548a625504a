"""structlog set-up, done once by the command line: JSON lines off a terminal, readable lines on one.

Every line, structlog's and the standard library's (aiohttp, asyncio), passes ``LogRedactor`` last, just
before it is rendered: credentials in URLs, the values of sensitive query parameters, the values of sensitive
headers (as keys of the event, or as ``Name: value`` in its text) and every secret a run resolved
(``remember_secrets``) become the mask.
Exceptions are rendered as plain tracebacks first, so the redactor sees their text (and so no traceback
prints the local variables of a frame, as Rich's would).
"""

from __future__ import annotations

import logging
import sys
from collections import deque
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, TextIO

import structlog

from cliffwatch.domain.ports import Progress
from cliffwatch.domain.security.masking import MASK, header_pattern, mask_headers_in_text
from cliffwatch.domain.security.redaction import DEFAULT_RULES, RedactionRules

# aiosqlite logs each statement with its parameters at debug level: stored credentials, token hashes.
QUIET_LIBRARIES = ("aiosqlite",)
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


MIN_REMEMBERED = 4  # shorter values would mask ordinary words; no credential is that short
MAX_REMEMBERED = 256  # the latest secrets resolved (a long-lived service resolves them run after run)


class _KnownSecrets:
    """The secrets runs of this process resolved, to mask wherever they turn up. Process-wide, as logging is."""

    def __init__(self) -> None:
        self._values: deque[str] = deque(maxlen=MAX_REMEMBERED)
        self._longest_first: tuple[str, ...] = ()  # a secret that contains another is masked whole

    def add(self, values: Iterable[str]) -> None:
        for value in values:
            for part in (value, value.partition(" ")[2]):  # "Bearer sk-…" is also logged as "sk-…"
                if len(part) >= MIN_REMEMBERED and part not in self._values:
                    self._values.append(part)
        self._longest_first = tuple(sorted(self._values, key=len, reverse=True))

    def clear(self) -> None:
        self._values.clear()
        self._longest_first = ()

    def mask(self, text: str) -> str:
        for value in self._longest_first:
            if value in text:
                text = text.replace(value, MASK)
        return text


_KNOWN = _KnownSecrets()


def remember_secrets(values: Iterable[str]) -> None:
    """Masks ``values`` in every log line from now on (a run calls it with the secrets it resolved)."""
    _KNOWN.add(values)


def forget_secrets() -> None:
    """Forgets every value ``remember_secrets`` was told of (tests: each starts from a process that knows none)."""
    _KNOWN.clear()


class LogRedactor:
    """A structlog processor masking credentials in every value of an event."""

    def __init__(self, rules: RedactionRules = DEFAULT_RULES) -> None:
        self.rules = rules
        self.pattern = header_pattern(rules.sensitive_headers)

    def __call__(self, logger: object, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in event.items():
            event[key] = self._value(key, value)
        return event

    def text(self, text: str) -> str:
        return mask_headers_in_text(self.rules.mask_text(_KNOWN.mask(text)), self.pattern)

    def _value(self, key: object, value: Any) -> Any:
        if isinstance(key, str) and self.rules.is_sensitive(key) and value is not None:
            return MASK
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):  # a key named like a sensitive header is masked at any depth
            return {k: self._value(k, v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._value(None, v) for v in value]
        return value


def configure_logging(
    *, level: str, fmt: str, stream: TextIO | None = None, rules: RedactionRules = DEFAULT_RULES
) -> None:
    """Routes structlog and the standard library's loggers (aiohttp, asyncio) through one pipeline, which
    masks credentials (``LogRedactor``) in every line."""
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
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                LogRedactor(rules),
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    for name in QUIET_LIBRARIES:  # even at debug: their debug lines hold every statement's parameters
        logging.getLogger(name).setLevel(max(LEVELS[level], logging.INFO))


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
