"""Specification of Debian-exact DST classification, the L/W/#/H extensions (scheduler.
cron_extensions) and the DST notes of cron-preview, against calendars checked by hand.

Calendars used: 2024 is a leap year (29 February a Thursday); 31 May 2026 and 30 August 2026 are
Sundays, 31 January 2026 and 31 October 2026 Saturdays; February 2026 has no fifth weekday of
any kind (28 days, starting on a Sunday).
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime

import pytest

from scheduler.cron import format_fire_time, parse_cron
from scheduler.cron_extensions import hashed_value
from scheduler.cron_words import explain
from scheduler.errors import CronNeverFires, InvalidCronExpression


def at_ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def fires(expression: str, zone: str, after: str, count: int, key: str = "") -> list[str]:
    schedule = parse_cron(expression, zone, key)
    return [format_fire_time(ms, zone) for ms in schedule.fire_times_ms(at_ms(after), count)]


# The three cases of issue 16: a step without a leading '*' is fixed-time (Debian's entry.c).


def test_fixed_time_step_hour_skipped_at_midnight_fires_once_right_after_the_gap() -> None:
    # Havana, 8 March 2026: 00:00 CST -> 01:00 CDT. 00:00 does not exist.
    assert fires("0 0-10/2 * * SUN", "America/Havana", "2026-03-07T12:00:00-05:00", 3) == [
        "2026-03-08T01:00:00-04:00", "2026-03-08T02:00:00-04:00", "2026-03-08T04:00:00-04:00"]


def test_fixed_time_step_hour_repeated_fires_once() -> None:
    # Beirut, 31 October 2027 00:00 EEST -> 30 October 23:00 EET: 23:00 on the 30th repeats.
    assert fires("0 23-23/3 * * *", "Asia/Beirut", "2027-10-30T12:00:00+03:00", 2) == [
        "2027-10-30T23:00:00+03:00", "2027-10-31T23:00:00+02:00"]


def test_fixed_time_step_minute_in_repeated_hour_fires_once() -> None:
    # Havana, 7 November 2027: 01:00 CDT -> 00:00 CST, so 00:00-01:00 happens twice.
    assert fires("54-55/3 0-3 * * *", "America/Havana", "2027-11-06T12:00:00-04:00", 3) == [
        "2027-11-07T00:54:00-04:00", "2027-11-07T01:54:00-05:00", "2027-11-07T02:54:00-05:00"]


def test_leading_star_still_follows_the_wall_clock_in_the_repeated_hour() -> None:
    assert fires("*/30 0 * * *", "America/Havana", "2027-11-06T23:50:00-04:00", 4) == [
        "2027-11-07T00:00:00-04:00", "2027-11-07T00:30:00-04:00",
        "2027-11-07T00:00:00-05:00", "2027-11-07T00:30:00-05:00"]


# L, L-n, LW, nW in day-of-month.


def test_last_day_of_month_across_a_leap_february() -> None:
    assert fires("0 0 L * *", "UTC", "2024-01-15T00:00:00+00:00", 4) == [
        "2024-01-31T00:00:00+00:00", "2024-02-29T00:00:00+00:00",
        "2024-03-31T00:00:00+00:00", "2024-04-30T00:00:00+00:00"]
    assert fires("0 0 L 2 *", "UTC", "2025-01-01T00:00:00+00:00", 4) == [
        "2025-02-28T00:00:00+00:00", "2026-02-28T00:00:00+00:00",
        "2027-02-28T00:00:00+00:00", "2028-02-29T00:00:00+00:00"]


def test_days_before_the_last_day() -> None:
    assert fires("0 0 L-2 * *", "UTC", "2024-02-01T00:00:00+00:00", 2) == [
        "2024-02-27T00:00:00+00:00", "2024-03-29T00:00:00+00:00"]


def test_last_weekday_when_the_last_day_is_a_sunday_or_a_saturday() -> None:
    # May 2026 ends on a Sunday (Friday the 29th), June on a Tuesday, October on a Saturday.
    assert fires("0 9 LW * *", "UTC", "2026-05-01T00:00:00+00:00", 2) == [
        "2026-05-29T09:00:00+00:00", "2026-06-30T09:00:00+00:00"]
    assert fires("0 9 LW 10 *", "UTC", "2026-01-01T00:00:00+00:00", 1) == [
        "2026-10-30T09:00:00+00:00"]


def test_nearest_weekday_stays_in_its_month() -> None:
    # 1 February 2026 is a Sunday -> Monday 2nd; 1 August 2026 a Saturday -> Monday 3rd (not
    # Friday 31 July); 15 March 2026 a Sunday -> Monday 16th; 15 August 2026 a Saturday -> 14th.
    assert fires("0 0 1W 2,8 *", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-02-02T00:00:00+00:00", "2026-08-03T00:00:00+00:00"]
    assert fires("0 0 15W 3,8 *", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-03-16T00:00:00+00:00", "2026-08-14T00:00:00+00:00"]
    # 31 May 2026 is a Sunday and the last day: the Friday before.
    assert fires("0 0 31W 5 *", "UTC", "2026-01-01T00:00:00+00:00", 1) == [
        "2026-05-29T00:00:00+00:00"]


def test_nearest_weekday_to_a_day_the_month_lacks_skips_that_month() -> None:
    assert fires("0 0 31W * *", "UTC", "2026-04-01T00:00:00+00:00", 2) == [
        "2026-05-29T00:00:00+00:00", "2026-07-31T00:00:00+00:00"]


# dL and d#k in day-of-week.


def test_nth_weekday_fires_only_in_months_that_have_it() -> None:
    # Fifth Saturdays of 2026: January 31, May 30, August 29, October 31.
    assert fires("0 0 * * 6#5", "UTC", "2026-01-01T00:00:00+00:00", 4) == [
        "2026-01-31T00:00:00+00:00", "2026-05-30T00:00:00+00:00",
        "2026-08-29T00:00:00+00:00", "2026-10-31T00:00:00+00:00"]


def test_third_friday_and_names() -> None:
    assert fires("0 0 * * FRI#3", "UTC", "2026-01-01T00:00:00+00:00", 3) == [
        "2026-01-16T00:00:00+00:00", "2026-02-20T00:00:00+00:00", "2026-03-20T00:00:00+00:00"]


def test_fifth_monday_of_february_only_in_a_leap_year_starting_on_monday() -> None:
    # February 2016 starts on a Monday and has 29 days: its 29th is the fifth Monday.
    assert fires("0 0 * 2 1#5", "UTC", "2015-01-01T00:00:00+00:00", 2) == [
        "2016-02-29T00:00:00+00:00", "2044-02-29T00:00:00+00:00"]


def test_last_friday_and_last_sunday_written_seven() -> None:
    assert fires("0 0 * * 5L", "UTC", "2024-02-01T00:00:00+00:00", 2) == [
        "2024-02-23T00:00:00+00:00", "2024-03-29T00:00:00+00:00"]
    assert fires("0 0 * * 7L", "UTC", "2026-02-01T00:00:00+00:00", 1) == [
        "2026-02-22T00:00:00+00:00"]


@pytest.mark.parametrize(("expression", "field", "words"), [
    ("0 0 L * 5", "day_of_month", "Quartz refuses both day fields together"),
    ("0 0 15 * 5#3", "day_of_week", "Quartz refuses both day fields together"),
    ("0 0 L,15 * *", "day_of_month", "only on their own"),
    ("0 0 1-5W * *", "day_of_month", "only on their own"),
    ("0 0 * * 1#1,5#3", "day_of_week", "only on their own"),
    ("0 0 * * 5#6", "day_of_week", "at most 5 of a weekday"),
    ("0 0 * * 8L", "day_of_week", "use 0-7"),
    ("0 0 32W * *", "day_of_month", "from 1 to 31"),
    ("0 0 L-31 * *", "day_of_month", "L-0 to L-30"),
    ("0 0 L/2 * *", "day_of_month", "only on their own"),
])
def test_combinations_quartz_refuses_are_refused_saying_why(expression, field, words) -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron(expression)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_a_day_rule_no_month_has_never_fires() -> None:
    with pytest.raises(CronNeverFires) as caught:
        parse_cron("0 0 30W 2 *")
    assert caught.value.field == "day_of_month"


# H.


def test_hashed_fields_are_stable_for_a_key_and_differ_between_keys() -> None:
    first = parse_cron("H H * * *", "UTC", "job-a")
    assert parse_cron("H H * * *", "UTC", "job-a") == first
    assert parse_cron("H H * * *", "Europe/Paris", "job-a").minutes == first.minutes
    others = {parse_cron("H H * * *", "UTC", f"job-{n}").minutes for n in range(50)}
    assert len(others) > 20


def test_hash_depends_only_on_the_key_field_and_place() -> None:
    assert hashed_value("k", "minute", 0, 60) == hashed_value("k", "minute", 0, 60)
    schedule = parse_cron("H * * * *", "UTC", "k")
    assert schedule.minutes == (hashed_value("k", "minute", 0, 60),)


def test_hashed_minute_spreads_ten_thousand_jobs_evenly() -> None:
    ids = [str(uuid.UUID(int=n * 7919 + 12345, version=4)) for n in range(10_000)]
    per_minute = Counter(parse_cron("H * * * *", "UTC", job_id).minutes[0] for job_id in ids)
    assert sorted(per_minute) == list(range(60))
    assert all(120 <= count <= 220 for count in per_minute.values()), per_minute


def test_hashed_range_with_step() -> None:
    schedule = parse_cron("H(0-29)/10 * * * *", "UTC", "some-job")
    offset = hashed_value("some-job", "minute", 0, 10)
    assert schedule.minutes == (offset, offset + 10, offset + 20)
    schedule = parse_cron("H/15 * * * *", "UTC", "some-job")
    offset = hashed_value("some-job", "minute", 0, 15)
    assert schedule.minutes == (offset, offset + 15, offset + 30, offset + 45)


def test_hashed_day_of_month_stays_in_every_month() -> None:
    days = {parse_cron("0 0 H * *", "UTC", f"k{n}").days_of_month for n in range(300)}
    assert max(max(d) for d in days) <= 28


@pytest.mark.parametrize(("expression", "words"), [
    ("H(50-70) * * * *", "use H(a-b) with 0 <= a <= b <= 59"),
    ("H(0-9)/20 * * * *", "use a step from 1 to 10"),
])
def test_bad_hash_forms_name_the_field(expression, words) -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron(expression, "UTC", "k")
    assert caught.value.field == "minute"
    assert words in str(caught.value)


# DST notes of cron-preview, and words.


def note_of(expression: str, zone: str, after: str, count: int) -> list[str | None]:
    schedule = parse_cron(expression, zone)
    return [schedule.dst_note(ms) for ms in schedule.fire_times_ms(at_ms(after), count)]


def test_notes_after_the_gap_and_repeated_hour() -> None:
    assert note_of("30 2 * * *", "America/New_York", "2026-03-07T00:00:00-05:00", 2) == [
        None, "after the gap"]
    assert note_of("30 1 * * *", "America/New_York", "2026-10-31T00:00:00-04:00", 2) == [
        None, "repeated hour: once"]
    assert note_of("30 * * * *", "America/New_York", "2026-11-01T00:40:00-04:00", 3) == [
        "repeated hour: first pass", "repeated hour: second pass", None]


def test_explain_says_the_schedule_and_its_dst_class() -> None:
    words = explain(parse_cron("0 9 LW * *", "Europe/Paris"))
    assert "the last weekday (Monday to Friday) of the month" in words
    assert "minute 0, hour 9" in words
    assert "fixed-time for daylight saving" in words
    words = explain(parse_cron("*/15 * * * 5#3", "UTC"))
    assert "every 15th minute" in words and "the third Friday of the month" in words
    assert "wildcard for daylight saving" in words
