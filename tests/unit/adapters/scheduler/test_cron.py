"""Cron maths: crontab expressions fire at the right instants in their time zone, across DST changes, as UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger
from hypothesis import given, settings
from hypothesis import strategies as st

from cliffwatch.adapters.scheduler.cron import ApschedulerCron
from cliffwatch.domain.errors import ScheduleInvalid

CRON = ApschedulerCron()
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: ZoneInfo, *args: int) -> datetime:
    """A wall time in ``zone`` as the UTC instant it is."""
    return datetime(*args, tzinfo=zone).astimezone(UTC)


def test_weekdays_at_nine_in_berlin_follow_the_wall_clock_across_the_spring_change() -> None:
    # Thursday 28 March 2024 to Wednesday 3 April; the clocks go forward on Sunday 31 March
    times = CRON.fire_times("0 9 * * 1-5", "Europe/Berlin", after=utc(2024, 3, 28), until=utc(2024, 4, 4))
    assert times == [
        utc(2024, 3, 28, 8),  # Thu 09:00 CET
        utc(2024, 3, 29, 8),  # Fri
        utc(2024, 4, 1, 7),  # Mon 09:00 CEST: an hour earlier in UTC
        utc(2024, 4, 2, 7),
        utc(2024, 4, 3, 7),
    ]


def test_weekdays_at_nine_in_new_york_follow_its_own_change_weeks_before_europe() -> None:
    # the US clocks go forward on Sunday 10 March 2024, Europe's three weeks later
    times = CRON.fire_times("0 9 * * 1-5", "America/New_York", after=utc(2024, 3, 7), until=utc(2024, 3, 13))
    assert times == [utc(2024, 3, 7, 14), utc(2024, 3, 8, 14), utc(2024, 3, 11, 13), utc(2024, 3, 12, 13)]
    assert all(t.astimezone(NEW_YORK).hour == 9 for t in times)


def test_utc_schedules_are_plain_arithmetic() -> None:
    times = CRON.fire_times("*/15 * * * *", "UTC", after=utc(2024, 1, 1, 23, 40), until=utc(2024, 1, 2, 0, 30))
    assert times == [utc(2024, 1, 1, 23, 45), utc(2024, 1, 2), utc(2024, 1, 2, 0, 15), utc(2024, 1, 2, 0, 30)]


def test_a_wall_time_the_clocks_skip_does_not_fire_that_day() -> None:
    times = CRON.fire_times("30 2 * * *", "Europe/Berlin", after=utc(2024, 3, 29), until=utc(2024, 4, 2))
    assert times == [
        local(BERLIN, 2024, 3, 29, 2, 30),
        local(BERLIN, 2024, 3, 30, 2, 30),
        local(BERLIN, 2024, 4, 1, 2, 30),
    ]


def test_a_wall_time_the_clocks_repeat_fires_once_at_its_first_pass() -> None:
    times = CRON.fire_times("30 2 * * *", "Europe/Berlin", after=utc(2024, 10, 26, 12), until=utc(2024, 10, 28))
    assert times == [utc(2024, 10, 27, 0, 30)]  # 02:30 CEST; not 01:30 UTC, 02:30 CET


def test_a_real_wall_time_at_the_instant_after_a_gap_still_fires() -> None:
    # 02:30 does not exist on 31 March; 03:30 does, and APScheduler puts the skipped 02:30 at that very instant
    times = CRON.fire_times("30 2,3 * * *", "Europe/Berlin", after=utc(2024, 3, 31), until=utc(2024, 3, 31, 12))
    assert times == [local(BERLIN, 2024, 3, 31, 3, 30)]
    assert times[0].astimezone(BERLIN).hour == 3


def test_a_frequent_schedule_pauses_for_the_repeated_hour_when_the_clocks_go_back() -> None:
    times = CRON.fire_times(
        "*/30 * * * *", "Europe/Berlin", after=utc(2024, 10, 26, 23, 45), until=utc(2024, 10, 27, 2)
    )
    assert times == [utc(2024, 10, 27, 0), utc(2024, 10, 27, 0, 30), utc(2024, 10, 27, 2)]  # 02:00, 02:30, 03:00


def test_apscheduler_alone_fires_skipped_and_repeated_wall_times_which_is_why_they_are_filtered() -> None:
    trigger = CronTrigger.from_crontab("30 2 * * *", timezone=BERLIN)
    spring = trigger.get_next_fire_time(None, datetime(2024, 3, 31, tzinfo=BERLIN))
    assert spring.astimezone(UTC) == utc(2024, 3, 31, 1, 30)  # "02:30+01:00", a time no Berlin clock showed
    first = trigger.get_next_fire_time(None, datetime(2024, 10, 27, tzinfo=BERLIN))
    second = trigger.get_next_fire_time(first, first)
    assert (first.astimezone(UTC), second.astimezone(UTC)) == (utc(2024, 10, 27, 0, 30), utc(2024, 10, 27, 1, 30))


@pytest.mark.parametrize(
    ("weekdays", "expected"),
    [
        ("0", ["Sun"]),
        ("7", ["Sun"]),
        ("1-5", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("mon-fri", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("5-7", ["Sun", "Fri", "Sat"]),
        ("fri-sun", ["Sun", "Fri", "Sat"]),
        ("*/2", ["Sun", "Tue", "Thu", "Sat"]),
        ("1/3", ["Sun", "Mon", "Thu"]),
        ("6,0", ["Sun", "Sat"]),
        ("SAT", ["Sat"]),
    ],
)
def test_day_of_week_counts_as_crontab_does_sunday_being_0_or_7(weekdays: str, expected: list[str]) -> None:
    # one week, Sunday 7 April 2024 to Saturday 13 April
    times = CRON.fire_times(f"0 12 * * {weekdays}", "UTC", after=utc(2024, 4, 7), until=utc(2024, 4, 14))
    assert [t.strftime("%a") for t in times] == expected


def test_day_of_month_and_day_of_week_both_restricted_fire_when_either_matches() -> None:
    times = CRON.fire_times("0 9 1 * 1", "UTC", after=utc(2024, 4, 20), until=utc(2024, 5, 14))
    assert times == [
        utc(2024, 4, 22, 9),
        utc(2024, 4, 29, 9),
        utc(2024, 5, 1, 9),
        utc(2024, 5, 6, 9),
        utc(2024, 5, 13, 9),
    ]


def test_a_day_field_starting_with_a_star_counts_as_unrestricted_so_both_must_match() -> None:
    # odd days that are Mondays, as Vixie cron reads "*/2" (it starts with "*")
    times = CRON.fire_times("0 9 */2 * 1", "UTC", after=utc(2024, 4, 1), until=utc(2024, 5, 1))
    assert times == [utc(2024, 4, 1, 9), utc(2024, 4, 15, 9), utc(2024, 4, 29, 9)]


def test_fire_times_exclude_after_and_include_until() -> None:
    times = CRON.fire_times("0 * * * *", "UTC", after=utc(2024, 1, 1, 1), until=utc(2024, 1, 1, 3))
    assert times == [utc(2024, 1, 1, 2), utc(2024, 1, 1, 3)]


def test_next_fire_times_start_strictly_after_an_instant_given_in_any_zone_and_come_back_in_utc() -> None:
    after = datetime(2024, 6, 3, 9, 0, 0, 1, tzinfo=BERLIN)  # just after Monday's fire
    times = CRON.next_fire_times("0 9 * * 1-5", "Europe/Berlin", after=after, count=3)
    assert times == [utc(2024, 6, 4, 7), utc(2024, 6, 5, 7), utc(2024, 6, 6, 7)]
    assert all(t.tzinfo is UTC for t in times)


def test_the_29th_of_february_fires_in_leap_years_only() -> None:
    assert CRON.next_fire_times("0 0 29 2 *", "UTC", after=utc(2024, 3, 1), count=2) == [
        utc(2028, 2, 29),
        utc(2032, 2, 29),
    ]


@pytest.mark.parametrize(
    ("cron", "timezone", "reason"),
    [
        ("0 9 * *", "UTC", "has 5 fields"),
        ("0 0 9 * * *", "UTC", "a seconds field is not supported"),
        ("61 * * * *", "UTC", "minute field '61'"),
        ("0 24 * * *", "UTC", "hour field '24'"),
        ("0 9 0 * *", "UTC", "day of month field '0'"),
        ("0 9 * 13 *", "UTC", "month field '13'"),
        ("0 9 * * 8", "UTC", "'8' is not a day"),
        ("0 9 * * funday", "UTC", "'funday' is not a day"),
        ("0 9 * * fri-mon", "UTC", "a range runs forwards"),
        ("0 9 * * */0", "UTC", "a step is a positive number"),
        ("0 9 * * ²", "UTC", "other than ASCII"),
        ("٣ 9 * * *", "UTC", "other than ASCII"),
        ("0 0 30 2 *", "UTC", "never fires"),
        ("0 9 * * *", "Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'"),
        ("0 9 * * *", "europe/berlin", "unknown time zone"),
        ("0 9 * * *", "", "unknown time zone"),
        ("0 9 * * *", "Europe", "unknown time zone"),
        ("0 9 * * *", "localtime", "differs from host to host"),
    ],
)
def test_an_unusable_expression_or_zone_is_refused_with_its_reason(cron: str, timezone: str, reason: str) -> None:
    found = CRON.validate(cron, timezone)
    assert found is not None
    assert reason in found


@pytest.mark.parametrize(
    ("cron", "timezone"),
    [("0 9 * * 1-5", "Europe/Berlin"), ("*/5 * * * *", "UTC"), ("0 0 last * *", "Asia/Tokyo")],
)
def test_a_usable_expression_validates(cron: str, timezone: str) -> None:
    assert CRON.validate(cron, timezone) is None


def test_computing_fire_times_of_an_unusable_schedule_raises_naming_the_field() -> None:
    with pytest.raises(ScheduleInvalid) as caught:
        CRON.next_fire_times("0 9 * * *", "Nowhere/City", after=utc(2024, 1, 1), count=1)
    assert [p.path for p in caught.value.problems] == ["timezone"]
    with pytest.raises(ScheduleInvalid) as caught:
        CRON.fire_times("0 9 * * * *", "UTC", after=utc(2024, 1, 1), until=utc(2024, 1, 2))
    assert [p.path for p in caught.value.problems] == ["cron"]


def test_a_naive_datetime_is_refused_rather_than_guessed() -> None:
    with pytest.raises(ValueError, match="aware"):
        CRON.next_fire_times("0 9 * * *", "UTC", after=datetime(2024, 1, 1), count=1)


_FIELD = st.one_of(st.text(alphabet="0123456789*,-/ LlWw#?abcdefmnorstuyz²٣", max_size=8), st.text(max_size=4))


@settings(max_examples=300, deadline=None)
@given(fields=st.lists(_FIELD, min_size=4, max_size=6), timezone=st.one_of(st.text(max_size=12), st.just("UTC")))
def test_validating_any_text_gives_a_reason_or_none_and_never_raises(fields: list[str], timezone: str) -> None:
    reason = CRON.validate(" ".join(fields), timezone)
    assert reason is None or (isinstance(reason, str) and reason)
