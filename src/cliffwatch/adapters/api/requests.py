"""Small explicit validators for what clients send: JSON bodies, query strings and headers.

Each reader collects every problem with its path (``overrides.seed``, ``limit``) before anything is
refused, and refuses fields it does not know: a typo must not be silently ignored. Bodies that break the
rules are 422 (``body-invalid``); malformed JSON and bad query parameters are 400. The OpenAPI document
states the same rules; the schemathesis test holds the two together.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from aiohttp import web
from multidict import MultiMapping

from cliffwatch.adapters.api.context import SETTINGS
from cliffwatch.adapters.api.problems import ApiError, body_invalid, query_invalid
from cliffwatch.adapters.documents import SCENARIO_LIMITS, DocumentInvalid, load_json, load_off_loop
from cliffwatch.domain.errors import Problem
from cliffwatch.domain.scenario.scenario import MAX_SEED
from cliffwatch.domain.service.runs import Overrides
from cliffwatch.domain.validation import short_repr

E = TypeVar("E", bound=StrEnum)
_JSON_TYPES = re.compile(r"^application/([a-z0-9.+-]+\+)?json$")


async def read_json(request: web.Request, *, optional: bool = False) -> object:
    """The request's JSON body, parsed within the document limits (``adapters.documents``: the scenario
    limits, with the body size setting); ``{}`` for an optional body that was not sent.

    Raises ``ApiError``: 415 for another media type; 400 ``malformed-json`` for a missing, malformed or
    non-UTF-8 body, or one JSON cannot hold (NaN, unpaired surrogates); 400 ``body-too-complex`` for one over
    the limits (nesting, values, long numbers). A body over the size limit raises aiohttp's 413 while it is
    read (``client_max_size``).
    """
    raw = await request.read()
    if not raw:
        if optional:
            return {}
        raise ApiError(400, "body-missing", "Request body missing", "this request needs a JSON body")
    if not _JSON_TYPES.match(request.content_type):
        raise ApiError(
            415,
            "unsupported-media-type",
            "Unsupported media type",
            f"the body must be application/json, got {request.content_type or 'no Content-Type'}",
        )
    limits = replace(SCENARIO_LIMITS, max_bytes=request.app[SETTINGS].api_max_body_bytes)
    try:
        return await load_off_loop(load_json, raw, limits)
    except DocumentInvalid as exc:
        if exc.over_limit:
            raise ApiError(400, "body-too-complex", "Request body too complex", f"the body: {exc}") from exc
        raise ApiError(400, "malformed-json", "Malformed JSON", f"the body: {exc}") from exc


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


class Body:
    """A JSON object's fields, read one by one; ``close`` refuses the rest and raises with every problem."""

    def __init__(self, data: object, path: str = "", problems: list[Problem] | None = None) -> None:
        self.path = path
        self.problems: list[Problem] = [] if problems is None else problems
        self.data: Mapping[str, Any] = {}
        self.seen: set[str] = set()
        if isinstance(data, Mapping):
            self.data = data
        else:
            self.problems.append(Problem(path=path, message=f"must be an object, got {_kind(data)}"))

    def _at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, required: bool) -> object:
        self.seen.add(key)
        if key not in self.data:
            if required:
                self.problems.append(Problem(path=self._at(key), message="is required"))
            return None
        return self.data[key]

    def _wrong(self, key: str, expected: str, value: object) -> None:
        self.problems.append(Problem(path=self._at(key), message=f"must be {expected}, got {_kind(value)}"))

    def string(self, key: str, *, required: bool = False, max_length: int = 200) -> str | None:
        value = self._get(key, required)
        if key not in self.data:
            return None
        if not isinstance(value, str):
            self._wrong(key, "a string", value)
            return None
        if not 1 <= len(value) <= max_length:
            self.problems.append(Problem(path=self._at(key), message=f"must be 1 to {max_length} characters"))
            return None
        return value

    def choice(self, key: str, enum: type[E], *, required: bool = False) -> E | None:
        value = self._get(key, required)
        if key not in self.data:
            return None
        options = [e.value for e in enum]
        if value not in options:
            message = f"must be one of {', '.join(options)}, got {short_repr(value)}"
            self.problems.append(Problem(path=self._at(key), message=message))
            return None
        return enum(value)

    def integer(self, key: str, *, minimum: int, maximum: int) -> int | None:
        value = self._get(key, False)
        if key not in self.data:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self._wrong(key, "an integer", value)
            return None
        if not minimum <= value <= maximum:
            self.problems.append(Problem(path=self._at(key), message=f"must be in [{minimum}, {maximum}]"))
            return None
        return value

    def number(self, key: str, *, minimum: float, maximum: float) -> float | None:
        value = self._get(key, False)
        if key not in self.data:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self._wrong(key, "a number", value)
            return None
        if not minimum <= value <= maximum:
            self.problems.append(Problem(path=self._at(key), message=f"must be in [{minimum:g}, {maximum:g}]"))
            return None
        return float(value)

    def boolean(self, key: str) -> bool | None:
        value = self._get(key, False)
        if key not in self.data:
            return None
        if not isinstance(value, bool):
            self._wrong(key, "a boolean", value)
            return None
        return value

    def document(self, key: str) -> Mapping[str, Any] | None:
        """Any JSON object, left whole for a domain parser to judge (a scenario document)."""
        value = self._get(key, False)
        if key not in self.data:
            return None
        if not isinstance(value, Mapping):
            self._wrong(key, "an object", value)
            return None
        return value

    def child(self, key: str) -> Body | None:
        """The nested object at ``key`` as a reader sharing this one's problems; None when absent."""
        value = self._get(key, False)
        if key not in self.data:
            return None
        return Body(value, self._at(key), self.problems)

    def done(self) -> None:
        """Records every field nobody read as unknown (nested readers call it too)."""
        for key in self.data:
            if key not in self.seen:
                self.problems.append(Problem(path=self._at(str(key)), message="unknown field"))

    def close(self) -> None:
        """``done``, then raises ``body-invalid`` (422) listing every problem, if there is any."""
        self.done()
        if self.problems:
            raise body_invalid(self.problems)


def read_overrides(body: Body | None) -> Overrides | None:
    """A run's or a schedule's ``overrides`` object (None when absent); the domain judges the URL itself."""
    if body is None:
        return None
    target_url = body.string("target_url", max_length=2_000)
    seed = body.integer("seed", minimum=0, maximum=MAX_SEED)
    threshold = body.number("threshold", minimum=0, maximum=100)
    body.done()
    return Overrides(target_url=target_url, seed=seed, threshold=threshold)


IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,200}")  # visible ASCII: it is stored and compared as it is


def idempotency_key(request: web.Request, token_id: str) -> str | None:
    """The request's ``Idempotency-Key``, scoped to the calling token (two tokens' keys never meet); None without
    one; a 400 problem for one that is not 1 to 200 visible ASCII characters."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(key):
        raise ApiError(400, "header-invalid", "Invalid header", "Idempotency-Key must be 1 to 200 visible ASCII")
    return f"{token_id}:{key}"


class Query:
    """Query parameters, read like a body: each at most once, unknown ones refused (400)."""

    def __init__(self, query: MultiMapping[str]) -> None:
        self.query = query
        self.problems: list[Problem] = []
        self.seen: set[str] = set()

    def _one(self, key: str) -> str | None:
        self.seen.add(key)
        values = self.query.getall(key, [])
        if len(values) > 1:
            self.problems.append(Problem(path=key, message="must be given at most once"))
            return None
        return values[0] if values else None

    def string(self, key: str, *, max_length: int = 200, pattern: re.Pattern[str] | None = None) -> str | None:
        value = self._one(key)
        if value is None:
            return None
        if not value or len(value) > max_length:
            self.problems.append(Problem(path=key, message=f"must be 1 to {max_length} characters"))
            return None
        if pattern is not None and not pattern.fullmatch(value):
            self.problems.append(Problem(path=key, message=f"must match {pattern.pattern}"))
            return None
        return value

    def integer(self, key: str, *, minimum: int, maximum: int, default: int | None = None) -> int | None:
        value = self._one(key)
        if value is None:
            return default
        if not re.fullmatch(r"-?[0-9]{1,19}", value) or not minimum <= int(value) <= maximum:
            self.problems.append(Problem(path=key, message=f"must be an integer in [{minimum}, {maximum}]"))
            return None
        return int(value)

    def choice(self, key: str, enum: type[E]) -> E | None:
        value = self._one(key)
        if value is None:
            return None
        options = [e.value for e in enum]
        if value not in options:
            self.problems.append(Problem(path=key, message=f"must be one of {', '.join(options)}"))
            return None
        return enum(value)

    def timestamp(self, key: str) -> datetime | None:
        value = self._one(key)
        if value is None:
            return None
        parsed = parse_timestamp(value)
        if parsed is None:
            message = "must be an RFC 3339 date-time with an offset, e.g. 2026-11-30T09:00:00Z"
            self.problems.append(Problem(path=key, message=message))
        return parsed

    def close(self) -> None:
        """Refuses unknown parameters, then raises ``query-invalid`` (400) listing every problem."""
        for key in self.query:
            if key not in self.seen:
                self.problems.append(Problem(path=key, message="unknown query parameter"))
                self.seen.add(key)  # a repeated unknown parameter is reported once
        if self.problems:
            raise query_invalid(self.problems)


def parse_timestamp(text: str) -> datetime | None:
    """An aware datetime (in UTC) from an RFC 3339 date-time, or None when ``text`` is not one."""
    # RFC 3339 allows lower-case "t" and "z"; fromisoformat wants them upper-case.
    if len(text) > 64 or not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9:.]+([Zz]|[+-][0-9]{2}:[0-9]{2})", text):
        return None
    try:
        parsed = datetime.fromisoformat(text.upper())
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo is not None else None
