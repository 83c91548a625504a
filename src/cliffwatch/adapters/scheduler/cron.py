"""Cron maths on APScheduler 3's ``CronTrigger``: a crontab expression in a time zone → fire times in UTC.

Pure: every time is passed in, every time returned is an aware UTC datetime. Three rules are applied on top of
``CronTrigger.from_crontab``, so an expression means here what it means to cron:

* **Day of week is numbered as in crontab.** 0 (and 7) is Sunday, so ``1-5`` is Monday to Friday. APScheduler 3
  counts 0 as Monday (its issue 286, fixed only in 4.x), so numbers are turned into day names before it sees them.
* **Day of month and day of week are or-ed when both are restricted.** ``0 9 1 * 1`` fires on the 1st *and* on
  every Monday, as in cron; APScheduler and-s them, so such an expression becomes two triggers, earliest first.
  A field starting with ``*`` counts as unrestricted (``*/2`` too), as in Vixie cron.
* **Daylight saving time: a wall time that does not exist is skipped; one that repeats fires once.** When the
  clocks go forward (Europe/Berlin, last Sunday of March, 02:00 → 03:00), ``30 2 * * *`` does not fire that day;
  APScheduler 3 would fire it at 01:30 UTC, the instant after the gap. When they go back (last Sunday of
  October, 03:00 → 02:00), ``30 2 * * *`` fires once, at the first 02:30 (00:30 UTC); APScheduler 3 fires both.
  So a schedule firing more often than hourly has an hour without fires on the night the clocks go back.

Time zones are IANA names (``Europe/Berlin``, ``UTC``); ``localtime`` is refused because it means a different
zone on each host, and every instance must compute the same fire times: they are the runs' idempotency keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

from cliffwatch.domain.errors import Problem, ScheduleInvalid

FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
_TRIGGER_ARGS = ("minute", "hour", "day", "month")  # CronTrigger's names for the first four
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab's numbering: 0 (and 7) is Sunday
_HOST_DEPENDENT_ZONES = frozenset({"localtime", "posixrules"})
# An expression that fires at all does so within eight years of any date (29 February), so "never fires" is
# decided by looking ahead from one fixed date; the look-ahead ends at APScheduler's year 9999.
_REFERENCE = datetime(2000, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)


class _Unusable(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class _Compiled:
    zone: ZoneInfo
    triggers: tuple[Any, ...]  # CronTriggers; the next fire time is the earliest any of them gives


class ApschedulerCron:
    """The ``CronCalendar`` port on APScheduler 3.x: five-field crontab expressions, IANA time zones."""

    def validate(self, cron: str, timezone: str) -> str | None:
        """Why the expression or the zone is unusable (wrong field count, a bad field, an unknown zone, an
        expression no date matches), or None."""
        try:
            compiled = _compile(cron, timezone)
        except _Unusable as exc:
            return exc.reason
        if _next_after(compiled, _REFERENCE) is None:
            return f"{cron!r} never fires: no date matches it"
        return None

    def fire_times(self, cron: str, timezone: str, *, after: datetime, until: datetime) -> list[datetime]:
        """Fire times in ``(after, until]``, in order, as UTC; raises ``ScheduleInvalid`` for an unusable
        expression or zone and ``ValueError`` for a naive datetime."""
        compiled = _compiled_or_raise(cron, timezone)
        end = _utc(until, "until")
        times: list[datetime] = []
        found = _next_after(compiled, _utc(after, "after"))
        while found is not None and found <= end:
            times.append(found)
            found = _next_after(compiled, found)
        return times

    def next_fire_times(self, cron: str, timezone: str, *, after: datetime, count: int) -> list[datetime]:
        """The first ``count`` fire times strictly after ``after``, as UTC (fewer when the expression stops
        matching, which only the year 9999 makes happen); raises as ``fire_times`` does."""
        compiled = _compiled_or_raise(cron, timezone)
        times: list[datetime] = []
        found = _next_after(compiled, _utc(after, "after"))
        while found is not None and len(times) < count:
            times.append(found)
            found = _next_after(compiled, found)
        return times


def _compiled_or_raise(cron: str, timezone: str) -> _Compiled:
    try:
        return _compile(cron, timezone)
    except _Unusable as exc:
        raise ScheduleInvalid([Problem(path=exc.path, message=exc.reason)]) from None


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got {moment!r}")
    return moment.astimezone(UTC)


@lru_cache(maxsize=512)
def _compile(cron: str, timezone: str) -> _Compiled:
    zone = _zone(timezone)
    if not cron.isascii():  # Python reads "٣" as 3 and chokes on "²"; crontab knows neither
        raise _Unusable("cron", f"{cron!r} holds characters other than ASCII digits, letters and * , - /")
    fields = cron.split()
    if len(fields) != 5:
        hint = " (a seconds field is not supported)" if len(fields) == 6 else ""
        raise _Unusable("cron", f"a cron expression has 5 fields ({', '.join(FIELD_NAMES)}), got {len(fields)}{hint}")
    minute, hour, day, month, weekday = fields
    for label, arg, value in zip(FIELD_NAMES, _TRIGGER_ARGS, fields, strict=False):
        try:
            CronTrigger(**{arg: value}, timezone=UTC)  # one field at a time, so the reason can name it
        except ValueError as exc:
            raise _Unusable("cron", f"{label} field {value!r}: {exc}") from None
    days = _weekday_names(weekday)
    if day.startswith("*") or weekday.startswith("*"):
        expressions = [f"{minute} {hour} {day} {month} {days}"]
    else:  # cron's rule: either day field matching is enough
        expressions = [f"{minute} {hour} {day} {month} *", f"{minute} {hour} * {month} {days}"]
    try:
        triggers = tuple(CronTrigger.from_crontab(e, timezone=zone) for e in expressions)
    except ValueError as exc:
        raise _Unusable("cron", f"{cron!r}: {exc}") from None
    return _Compiled(zone=zone, triggers=triggers)


def _zone(name: str) -> ZoneInfo:
    if name in _HOST_DEPENDENT_ZONES:
        raise _Unusable("timezone", f"time zone {name!r} differs from host to host; name one, such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _Unusable("timezone", f"unknown time zone {name!r}; use an IANA name such as Europe/Berlin") from None


def _weekday_names(field: str) -> str:
    """The day-of-week field as APScheduler reads it: crontab's numbers (Sunday 0 or 7) turned into day names."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.lower().split(","):
        span, slash, step_text = part.partition("/")
        if slash and not (step_text.isdigit() and int(step_text) > 0):
            raise _Unusable("cron", f"day of week field {field!r}: a step is a positive number, got {step_text!r}")
        step = int(step_text) if slash else 1
        if span == "*":
            first, last = 0, 6
        elif "-" in span:
            start, _, end = span.partition("-")
            first, last = _weekday(start, field), _weekday(end, field, end=True)
            if last < first:
                raise _Unusable("cron", f"day of week field {field!r}: a range runs forwards, as in 1-5 or mon-fri")
        else:
            first = _weekday(span, field)
            last = 7 if slash else first  # "1/2" is "1-7/2", as cronie reads it
        days.update(d % 7 for d in range(first, last + 1, step))
    return ",".join(_WEEKDAYS[d] for d in sorted(days))


def _weekday(token: str, field: str, *, end: bool = False) -> int:
    if token.isdigit() and int(token) <= 7:
        return int(token)
    if token in _WEEKDAYS:
        index = _WEEKDAYS.index(token)
        return 7 if end and index == 0 else index  # "fri-sun" ends on Sunday, the 7th
    raise _Unusable("cron", f"day of week field {field!r}: {token!r} is not a day (0-7 with Sunday 0 or 7, or sun-sat)")


def _next_after(compiled: _Compiled, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (UTC) whose wall time exists, and, of a wall time the clocks
    repeat, only its first pass."""
    start = (after + _TICK).astimezone(compiled.zone)
    while True:
        # ``previous_fire_time`` is not used: from a skipped wall time moved past the gap, APScheduler would
        # step over the real wall time at that same instant, which may match as well
        candidates = [t for t in (trigger.get_next_fire_time(None, start) for trigger in compiled.triggers) if t]
        if not candidates:
            return None
        # by instant: aware datetimes in one zone compare by wall time, which is wrong across a repeated hour
        local: datetime = min(candidates, key=lambda t: t.astimezone(UTC))
        instant = local.astimezone(UTC)
        real = instant.astimezone(compiled.zone)
        if real.replace(tzinfo=None) != local.replace(tzinfo=None):
            start = real  # a wall time the clocks skipped; the real wall time of that instant may match
        elif local.replace(fold=0).astimezone(UTC) != instant:
            start = (instant + _TICK).astimezone(compiled.zone)  # the second pass of a repeated wall time
        else:
            return instant
