"""Times and durations as people read them on the pages (reports and the dashboard): the JSON keeps full
precision, a page shows ``2026-12-01 18:32:53 UTC`` and ``48.5 s``.

Every page states UTC rather than the reader's zone: a report is a file passed between people in different
zones, and the service's runs and schedules are compared across instances.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

DASH = "–"  # what every page shows for a value it does not have


def when(value: Any) -> str:
    """A stored time (a datetime, or its ISO 8601 text as results and the API's views hold it): UTC, to the
    second. Text that is not a time is shown as it is; nothing is a dash."""
    if isinstance(value, str):
        text: str = value
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return text
    if not isinstance(value, datetime):
        return DASH if value is None else str(value)
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: Any) -> str:
    """Seconds as a person says them: ``48.5 s`` under two minutes, ``12 min 5 s`` under two hours, then
    ``3 h 20 min``."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return DASH
    if seconds < 120:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 7200:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
