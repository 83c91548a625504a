"""What the coordinator and its generator workers say to each other, and how it travels.

One stream socket per worker, both ways: a socket pair made before a local worker starts, or a TCP
connection a Ray actor opens back to its coordinator (its first bytes are the token the coordinator gave it,
checked before anything it sends is read as a message). Each message is a 4-byte big-endian length and a
pickle of a tuple whose first item names it. Only the two ends of one run's stream ever read it, so pickle's
trust model holds: no other process can write to a socket pair, and a TCP peer that does not hold the token is
closed unread.

Planned requests and records travel as plain tuples of their fields, enums as their values: pickling the
frozen dataclasses themselves costs about ten times as much (5 µs against 0.4 µs a request each way), and at
thousands of requests a second that is the coordinator's whole budget. For the same reason the tuples are
read off with one ``attrgetter`` and turned back into objects the way pickle restores them, without their
``__init__`` (the values were a valid object's on the other end): a record came back in 10 µs through
``RequestRecord(**fields)``, in 4-6 this way, and the coordinator does it for every request.

Coordinator to worker: ``("spec", WorkerSpec)`` (first, once), ``("ping", sent_ns)`` (its clock is
measured), then for each run ``("go", start_ns, scenario, next_prompts)`` (``start_ns`` on the worker's own
clock), ``("plan", rows)``, ``("end",)`` (no more plan) and ``("stop", reason, cancel_in_flight)``;
``("beat",)`` (the coordinator is alive) throughout. Worker to coordinator: ``("ready", pid, boot_id, node, niceness)``,
``("pong", sent_ns, its_monotonic_ns, its_wall_ns)``, ``("batch", dispatched, finished, live)``
(``dispatched``: ``(id, at_ns)`` of a request the worker was dealt, ``(row, at_ns)`` of a conversation's later
turn it made), ``("done", measures)``, ``("failed", why)``. Times in plans and records are relative to the
run's start, so they need no translation between clocks.
"""

from __future__ import annotations

import asyncio
import operator
import pickle
import struct
from dataclasses import fields
from typing import Any

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.outcomes import Attempt, Outcome, RequestRecord, TokenSource
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.traffic.plan import PlannedRequest

_LENGTH = struct.Struct(">I")
MAX_MESSAGE = 256 * 1024 * 1024  # a batch is far smaller; a larger length means a broken stream

_PLAN_FIELDS = tuple(f.name for f in fields(PlannedRequest))
_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))
_ATTEMPT_FIELDS = tuple(f.name for f in fields(Attempt))
_RECORD_ATTEMPTS = _RECORD_FIELDS.index("attempts")
_RECORD_OUTCOME = _RECORD_FIELDS.index("outcome")
_ATTEMPT_FAILURE = _ATTEMPT_FIELDS.index("failure")
_ATTEMPT_SOURCE = _ATTEMPT_FIELDS.index("token_source")

_plan_values = operator.attrgetter(*_PLAN_FIELDS)
_record_values = operator.attrgetter(*_RECORD_FIELDS)
_attempt_values = operator.attrgetter(*_ATTEMPT_FIELDS)
# ``PlannedRequest`` keeps its fields in slots, a record and an attempt in their ``__dict__``.
_PLAN_SLOTS = tuple(getattr(PlannedRequest, name).__set__ for name in _PLAN_FIELDS)
_OUTCOMES = {o.value: o for o in Outcome}
_FAILURES: dict[str | None, FailureKind | None] = {None: None, **{f.value: f for f in FailureKind}}
_SOURCES = {s.value: s for s in TokenSource}
_new = object.__new__


class WireBroken(CliffwatchError):
    """The stream between the coordinator and a worker ended or carried something that is not a message."""


def pack(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


async def receive(reader: asyncio.StreamReader) -> tuple[Any, ...]:
    """The next message; raises ``WireBroken`` at the end of the stream or on a malformed one."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        (length,) = _LENGTH.unpack(head)
        if length > MAX_MESSAGE:
            raise WireBroken(f"a message of {length:,} bytes: the stream is out of step")
        message = pickle.loads(await reader.readexactly(length))
    except asyncio.IncompleteReadError as exc:
        raise WireBroken("the other end closed the stream") from exc
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError) as exc:
        raise WireBroken(f"an unreadable message: {exc}") from exc
    if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
        raise WireBroken(f"not a message: {type(message).__name__}")
    return message


def plan_row(request: PlannedRequest) -> tuple[Any, ...]:
    values: tuple[Any, ...] = _plan_values(request)
    return values


def planned(row: tuple[Any, ...]) -> PlannedRequest:
    request: PlannedRequest = _new(PlannedRequest)
    try:
        for put, value in zip(_PLAN_SLOTS, row, strict=True):
            put(request, value)
    except (ValueError, TypeError) as exc:
        raise WireBroken(f"not a planned request: {exc}") from exc
    return request


def record_row(record: RequestRecord) -> tuple[Any, ...]:
    row = list(_record_values(record))
    row[_RECORD_ATTEMPTS] = tuple(map(_attempt_row, record.attempts))
    row[_RECORD_OUTCOME] = record.outcome.value
    return tuple(row)


def recorded(row: tuple[Any, ...]) -> RequestRecord:
    try:
        values = dict(zip(_RECORD_FIELDS, row, strict=True))
        values["attempts"] = tuple(map(_attempt, values["attempts"]))
        values["outcome"] = _OUTCOMES[values["outcome"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise WireBroken(f"not a request's record: {exc!r}") from exc
    record: RequestRecord = _new(RequestRecord)
    record.__dict__.update(values)
    return record


def _attempt_row(attempt: Attempt) -> tuple[Any, ...]:
    row = list(_attempt_values(attempt))
    failure = row[_ATTEMPT_FAILURE]
    row[_ATTEMPT_FAILURE] = None if failure is None else failure.value
    row[_ATTEMPT_SOURCE] = row[_ATTEMPT_SOURCE].value
    return tuple(row)


def _attempt(row: tuple[Any, ...]) -> Attempt:
    values = dict(zip(_ATTEMPT_FIELDS, row, strict=True))
    values["failure"] = _FAILURES[values["failure"]]
    values["token_source"] = _SOURCES[values["token_source"]]
    attempt: Attempt = _new(Attempt)
    attempt.__dict__.update(values)
    return attempt
