"""Times and durations on the pages: UTC to the second, durations in the units a person would use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cliffwatch.adapters.report.readable import duration, when


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2026-12-01T18:32:53.123456+00:00", "2026-12-01 18:32:53 UTC"),
        ("2026-12-01T19:32:53+01:00", "2026-12-01 18:32:53 UTC"),
        (datetime(2026, 12, 1, 18, 32, 53, 999_999, tzinfo=UTC), "2026-12-01 18:32:53 UTC"),
        (datetime(2026, 12, 1, 18, 32, 53), "2026-12-01 18:32:53 UTC"),  # stored naive: UTC by convention
        (datetime(2026, 12, 2, 1, 2, 3, tzinfo=timezone(timedelta(hours=7))), "2026-12-01 18:02:03 UTC"),
        (None, "–"),
        ("not a time", "not a time"),
    ],
)
def test_a_time_is_shown_in_utc_to_the_second(value: object, shown: str) -> None:
    assert when(value) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0.0 s"), (48.46, "48.5 s"), (119.9, "119.9 s"), (725, "12 min 5 s"), (7199.6, "2 h 0 min"),
     (12_000, "3 h 20 min"), (None, "–"), (True, "–")],
)  # fmt: skip
def test_a_duration_is_shown_in_a_persons_units(seconds: object, shown: str) -> None:
    assert duration(seconds) == shown
