"""How the stores keep values, shared by the SQL store (``adapters/store``) and its in-memory twin
(``memory_store``): what a database gives back is what both give back.

JSON values as a JSON column returns them (lists for tuples, non-finite numbers as null), times as aware UTC
datetimes (naive ones are refused), NUL characters in free text as U+FFFD; ``list_runs``'s opaque keyset
cursor, the page limit's floor, the reason an expired lease gives, and the control key of the emergency stop.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.service.runs import Overrides, Run, StoredOutcome

EMERGENCY_STOP = "emergency_stop"  # the control key


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC; raises ``ValueError`` for a naive datetime, whose instant nobody knows."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value.isoformat()}: the stores keep aware times only")
    return value.astimezone(UTC)


def opt_utc(value: datetime | None) -> datetime | None:
    return None if value is None else as_utc(value)


def opt_text(text: str | None) -> str | None:
    return None if text is None else without_nul(text)


# One encoder for every value: ``json.dumps`` with options builds a new one per call, a third of the cost of
# encoding a request's attempt log (the service stores one per request, docs/performance.md).
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), default=str)


def json_text(value: Any) -> str:
    """``value`` as the JSON text a store keeps. Non-finite numbers, which PostgreSQL's JSON refuses, become
    null; other values JSON lacks (dates a YAML document may hold) become strings, as the content hash has them."""
    try:
        return _ENCODER.encode(value)
    except ValueError:  # only walk the value when it holds a NaN or an infinity
        return _ENCODER.encode(_finite(value))


def without_nul(text: str) -> str:
    """``text`` as a store keeps it: PostgreSQL refuses NUL characters in text, so they become U+FFFD."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def plain_json(value: Any) -> Any:
    """``value`` as a JSON column gives it back."""
    return json.loads(json_text(value))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def encode_cursor(created_at: datetime, run_id: str) -> str:
    """The opaque cursor of ``list_runs``: the (created_at, id) of the last run of a page."""
    raw = json.dumps([as_utc(created_at).isoformat(), run_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor holds; raises ``ValueError`` when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode())
        created, run_id = json.loads(raw)
        if not isinstance(created, str) or not isinstance(run_id, str):
            raise ValueError("not a pair of strings")
        return as_utc(datetime.fromisoformat(created)), run_id
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"invalid cursor {cursor!r}") from exc


def check_limit(limit: int) -> None:
    if limit < 1:  # an empty page would end a keyset walk that has not ended
        raise ValueError(f"a page holds at least one item, got limit {limit}")


def delivery_owner(run_id: str | None, gameday_id: str | None) -> str:
    """Whose webhook deliveries are meant, "run" or "gameday"; a ``ValueError`` unless exactly one is named."""
    if (run_id is None) == (gameday_id is None):
        raise ValueError("a webhook delivery belongs to one run or one game day: name exactly one")
    return "run" if run_id is not None else "gameday"


def stored_run(run: Run) -> Run:
    """``run`` as a store gives it back: times in UTC, JSON values plain, no time series in the result."""
    return replace(
        run,
        created_at=as_utc(run.created_at),
        fire_time=opt_utc(run.fire_time),
        lease_until=opt_utc(run.lease_until),
        started_at=opt_utc(run.started_at),
        finished_at=opt_utc(run.finished_at),
        abort_requested=opt_text(run.abort_requested),
        reason=opt_text(run.reason),
        overrides=Overrides.from_dict(plain_json(run.overrides.to_dict())),
        verdicts=tuple(run.verdicts),
        result=result_document(run.result),
        provisional_result=result_document(run.provisional_result),
    )


def result_document(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return plain_json({k: v for k, v in result.items() if k != "timeseries"})  # type: ignore[no-any-return]


def stop_reason(reason: str) -> str:
    """Why a run was ended by the emergency stop (stop-all's sweep, a claim or the release that found it)."""
    return f"emergency stop: {reason}"


def lease_reason(owner: str | None, lease_until: datetime | None) -> str:
    until = "?" if lease_until is None else as_utc(lease_until).isoformat(timespec="seconds")
    return f"the instance {owner} stopped renewing its lease (last until {until})"


def stored_outcome(run_id: str, record: RequestRecord) -> StoredOutcome:
    outcome = StoredOutcome.of(run_id, record)
    return replace(outcome, error=opt_text(outcome.error), attempt_log=tuple(plain_json(list(outcome.attempt_log))))
