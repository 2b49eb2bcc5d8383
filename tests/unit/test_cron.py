"""Specification of scheduler.cron: syntax, errors, fire times and daylight-saving behaviour.

Expected fire times are written as local ISO 8601 times with their UTC offset, which names one
instant without ambiguity and reads the way an operator would check it. The transitions used
(2026 unless stated) are:

* America/New_York: 02:00 EST -> 03:00 EDT on 8 March; 02:00 EDT -> 01:00 EST on 1 November.
* Europe/Berlin: 02:00 CET -> 03:00 CEST on 29 March; 03:00 CEST -> 02:00 CET on 25 October.
* Australia/Sydney: 03:00 AEDT -> 02:00 AEST on 5 April; 02:00 AEST -> 03:00 AEDT on 4 October.
* Australia/Lord_Howe (30-minute shift): 02:00 -> 01:30 on 5 April; 02:00 -> 02:30 on 4 October.
* America/Havana (shifts at midnight): 00:00 -> 01:00 on 8 March; 01:00 -> 00:00 on 1 November.
* Pacific/Apia skipped the whole of 30 December 2011, jumping from -10:00 to +14:00.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from scheduler.cron import (
    MACROS,
    CronSchedule,
    format_fire_time,
    parse_cron,
    validate_timezone,
)
from scheduler.errors import (
    CronNeverFires,
    InvalidCronExpression,
    InvalidSchedule,
    UnknownTimeZone,
)

MINUTE_S = 60


def at_ms(text: str) -> int:
    """UTC epoch milliseconds of an ISO 8601 time that carries its offset."""
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def local_fires(expression: str, zone: str, after: str, count: int) -> list[str]:
    """The next ``count`` fire times after ``after``, formatted in the schedule's zone."""
    schedule = parse_cron(expression, zone)
    return [format_fire_time(ms, zone) for ms in schedule.fire_times_ms(at_ms(after), count)]


# Parsing and the public interface.


def test_parse_cron_keeps_expression_with_whitespace_normalised() -> None:
    schedule = parse_cron("  */5\t*  * *   * ", "Europe/Berlin")

    assert schedule.expression == "*/5 * * * *"
    assert schedule.timezone == "Europe/Berlin"


def test_parse_cron_defaults_to_utc() -> None:
    assert parse_cron("0 0 * * *").timezone == "UTC"


def test_parse_cron_returns_the_cached_schedule_for_the_same_arguments() -> None:
    assert parse_cron("17 3 * * *", "Asia/Tokyo") is parse_cron("17 3 * * *", "Asia/Tokyo")


def test_schedules_parsed_from_differently_spaced_text_are_equal() -> None:
    assert parse_cron("0  12 * * *") == parse_cron("0 12 * * *")


def test_schedule_is_immutable() -> None:
    schedule = parse_cron("0 12 * * *")

    with pytest.raises(AttributeError):
        schedule.expression = "0 13 * * *"  # type: ignore[misc]


def test_five_field_expression_fires_at_second_zero() -> None:
    schedule = parse_cron("*/15 * * * *")

    assert schedule.seconds == (0,)
    assert schedule.minutes == (0, 15, 30, 45)


def test_next_fire_is_strictly_after_a_time_that_is_itself_a_fire_time() -> None:
    schedule = parse_cron("0 * * * *")

    assert schedule.next_fire_ms(at_ms("2026-05-01T10:00:00+00:00")) == at_ms(
        "2026-05-01T11:00:00+00:00"
    )


def test_next_fire_from_one_millisecond_before_a_fire_time_is_that_fire_time() -> None:
    schedule = parse_cron("0 * * * *")

    assert schedule.next_fire_ms(at_ms("2026-05-01T10:59:59.999+00:00")) == at_ms(
        "2026-05-01T11:00:00+00:00"
    )


def test_next_fire_ignores_the_milliseconds_of_after_ms_beyond_its_second() -> None:
    schedule = parse_cron("* * * * * *")

    assert schedule.next_fire_ms(at_ms("2026-05-01T10:00:00.500+00:00")) == at_ms(
        "2026-05-01T10:00:01+00:00"
    )


def test_next_fire_works_before_the_unix_epoch() -> None:
    schedule = parse_cron("0 0 * * *")

    assert schedule.next_fire_ms(-1) == 0
    assert schedule.next_fire_ms(at_ms("1969-07-20T20:17:00+00:00")) == at_ms(
        "1969-07-21T00:00:00+00:00"
    )


def test_next_fire_rejects_a_float_time() -> None:
    with pytest.raises(TypeError):
        parse_cron("0 * * * *").next_fire_ms(1.5e12)  # type: ignore[arg-type]


def test_fire_times_are_strictly_increasing_and_chain_next_fire() -> None:
    schedule = parse_cron("*/10 9-17 * * mon-fri", "Europe/Berlin")
    after_ms = at_ms("2026-03-27T16:45:00+01:00")

    fire_times = schedule.fire_times_ms(after_ms, 20)

    assert fire_times == sorted(set(fire_times))
    assert fire_times[0] == schedule.next_fire_ms(after_ms)
    assert all(
        later == schedule.next_fire_ms(earlier)
        for earlier, later in zip(fire_times, fire_times[1:], strict=False)
    )


def test_fire_times_of_zero_count_is_empty() -> None:
    assert parse_cron("* * * * *").fire_times_ms(0, 0) == []


def test_fire_times_rejects_a_negative_count() -> None:
    with pytest.raises(ValueError, match="count must be 0 or more"):
        parse_cron("* * * * *").fire_times_ms(0, -1)


def test_fire_times_are_whole_seconds_in_milliseconds() -> None:
    fire_times = parse_cron("*/7 * * * * *").fire_times_ms(at_ms("2026-01-01T00:00:00.250Z"), 5)

    assert all(fire_ms % 1000 == 0 for fire_ms in fire_times)


# Field syntax.


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        pytest.param(
            "5,10 * * * *",
            "2026-01-01T00:06:00+00:00",
            ["2026-01-01T00:10:00+00:00", "2026-01-01T01:05:00+00:00"],
            id="list",
        ),
        pytest.param(
            "10-12 * * * *",
            "2026-01-01T00:10:00+00:00",
            ["2026-01-01T00:11:00+00:00", "2026-01-01T00:12:00+00:00", "2026-01-01T01:10:00+00:00"],
            id="range",
        ),
        pytest.param(
            "10-40/15 * * * *",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-01T00:10:00+00:00", "2026-01-01T00:25:00+00:00", "2026-01-01T00:40:00+00:00"],
            id="range-with-step",
        ),
        pytest.param(
            "50/5 * * * *",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-01T00:50:00+00:00", "2026-01-01T00:55:00+00:00", "2026-01-01T01:50:00+00:00"],
            id="start-with-step-runs-to-field-end",
        ),
        pytest.param(
            "0 0 1 JAN,jul *",
            "2026-01-01T00:00:00+00:00",
            ["2026-07-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00"],
            id="month-names-any-case",
        ),
        pytest.param(
            "0 0 * * Sat-sun",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-03T00:00:00+00:00", "2026-01-04T00:00:00+00:00", "2026-01-10T00:00:00+00:00"],
            id="weekday-range-ending-on-sunday-name-covers-the-weekend",
        ),
        pytest.param(
            "0 0 * * 6-0",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-03T00:00:00+00:00", "2026-01-04T00:00:00+00:00", "2026-01-10T00:00:00+00:00"],
            id="weekday-range-ending-on-sunday-zero-covers-the-weekend",
        ),
        pytest.param(
            "0 0 * * 7",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"],
            id="day-of-week-7-is-sunday",
        ),
        pytest.param(
            "0 0 * * 5-7",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00", "2026-01-04T00:00:00+00:00"],
            id="day-of-week-range-to-7-ends-on-sunday",
        ),
        pytest.param(
            "0 0 ? * mon",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-05T00:00:00+00:00", "2026-01-12T00:00:00+00:00"],
            id="question-mark-in-day-of-month-means-any",
        ),
        pytest.param(
            "0 0 1 * ?",
            "2026-01-01T00:00:00+00:00",
            ["2026-02-01T00:00:00+00:00", "2026-03-01T00:00:00+00:00"],
            id="question-mark-in-day-of-week-means-any",
        ),
    ],
)
def test_field_syntax(expression: str, after: str, expected: list[str]) -> None:
    assert local_fires(expression, "UTC", after, len(expected)) == expected


def test_day_of_week_star_step_counts_from_sunday_without_repeating_it() -> None:
    assert parse_cron("0 0 * * */2").days_of_week == frozenset({0, 2, 4, 6})


def test_day_of_week_start_with_step_stops_at_saturday() -> None:
    assert parse_cron("0 0 * * 1/2").days_of_week == frozenset({1, 3, 5})


def test_repeated_values_in_a_list_fire_once() -> None:
    assert local_fires("5,5,0-5/5 * * * *", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-01-01T00:05:00+00:00",
        "2026-01-01T01:00:00+00:00",
    ]


# The six-field form: seconds first.


def test_six_field_form_reads_seconds_first() -> None:
    assert local_fires("30 15 10 * * *", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-01-01T10:15:30+00:00",
        "2026-01-02T10:15:30+00:00",
    ]


def test_six_field_seconds_step_fires_within_each_minute() -> None:
    assert local_fires("*/20 * * * * *", "UTC", "2026-01-01T00:00:50+00:00", 4) == [
        "2026-01-01T00:01:00+00:00",
        "2026-01-01T00:01:20+00:00",
        "2026-01-01T00:01:40+00:00",
        "2026-01-01T00:02:00+00:00",
    ]


def test_six_field_seconds_roll_over_into_next_day() -> None:
    assert local_fires("58-59 59 23 * * *", "UTC", "2026-12-31T23:59:58+00:00", 2) == [
        "2026-12-31T23:59:59+00:00",
        "2027-01-01T23:59:58+00:00",
    ]


def test_five_field_form_equals_six_field_form_with_second_zero() -> None:
    five = parse_cron("*/5 3 * * 1-5", "Europe/Berlin")
    six = parse_cron("0 */5 3 * * 1-5", "Europe/Berlin")
    after_ms = at_ms("2026-03-25T00:00:00+01:00")

    assert five.fire_times_ms(after_ms, 30) == six.fire_times_ms(after_ms, 30)


# Macros.


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_macro_fires_like_its_five_field_equivalent(macro: str, equivalent: str) -> None:
    after_ms = at_ms("2026-10-20T13:14:15-04:00")
    macro_schedule = parse_cron(macro, "America/New_York")
    plain_schedule = parse_cron(equivalent, "America/New_York")

    assert macro_schedule.expression == macro
    assert macro_schedule.fixed_time == plain_schedule.fixed_time
    assert macro_schedule.fire_times_ms(after_ms, 6) == plain_schedule.fire_times_ms(after_ms, 6)


def test_every_documented_macro_is_tested() -> None:
    assert set(MACROS) == {
        "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
    }  # fmt: skip


def test_macro_names_are_case_insensitive() -> None:
    assert local_fires("@Daily", "UTC", "2026-01-01T12:00:00+00:00", 1) == [
        "2026-01-02T00:00:00+00:00"
    ]


# Fixed-time versus wildcard classification.


@pytest.mark.parametrize(
    "expression",
    [
        "30 2 * * *",
        "0 1,2 * * *",
        "0 1-3 * * *",
        "0,30 2 * * *",
        "15 2 1 * *",
        "* 30 2 * * *",
        "*/10 30 2 * * *",
        "@daily",
        "@weekly",
        "@monthly",
        "@yearly",
        # Debian's entry.c: a step without a leading '*' is still a fixed-time field.
        "0 1-5/2 * * *",
        "5/15 2 * * *",
        "0 0-10/2 * * SUN",
        "54-55/3 0-3 * * *",
        "H H * * *",
    ],
)
def test_minute_and_hour_without_star_or_step_make_a_fixed_time_job(expression: str) -> None:
    assert parse_cron(expression).fixed_time is True


@pytest.mark.parametrize(
    "expression",
    [
        "0 * * * *",
        "*/15 * * * *",
        "0 */2 * * *",
        "* 2 * * *",
        "H * * * *",
        "0 0 * * * *",
        "@hourly",
    ],
)
def test_leading_star_in_minute_or_hour_makes_a_wildcard_job(expression: str) -> None:
    assert parse_cron(expression).fixed_time is False


# Day-of-month and day-of-week.


def test_day_of_month_alone_restricts_days() -> None:
    assert local_fires("0 0 13 * *", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-01-13T00:00:00+00:00",
        "2026-02-13T00:00:00+00:00",
    ]


def test_day_of_week_alone_restricts_days() -> None:
    assert local_fires("0 0 * * fri", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-01-02T00:00:00+00:00",
        "2026-01-09T00:00:00+00:00",
    ]


def test_both_day_fields_restricted_fire_when_either_matches() -> None:
    # 13 January 2026 is a Tuesday: the 13th and every Friday both fire.
    assert local_fires("0 0 13 * 5", "UTC", "2026-01-01T00:00:00+00:00", 4) == [
        "2026-01-02T00:00:00+00:00",
        "2026-01-09T00:00:00+00:00",
        "2026-01-13T00:00:00+00:00",
        "2026-01-16T00:00:00+00:00",
    ]


def test_full_range_day_of_month_still_counts_as_restricted() -> None:
    schedule = parse_cron("0 0 1-31 * 1")

    assert schedule.days_either is True
    assert len(schedule.fire_times_ms(at_ms("2026-01-01T00:00:00+00:00"), 31)) == 31


def test_day_of_month_step_from_star_is_unrestricted_so_both_fields_must_match() -> None:
    # Vixie cron: a day field starting with '*' is unrestricted, so the weekday is ANDed.
    schedule = parse_cron("0 0 */2 * mon")
    fires = [
        datetime.fromtimestamp(ms / 1000, UTC)
        for ms in schedule.fire_times_ms(at_ms("2026-01-01T00:00:00+00:00"), 12)
    ]

    assert schedule.days_either is False
    assert all(fire.day % 2 == 1 and fire.weekday() == 0 for fire in fires)
    assert fires[0] == datetime(2026, 1, 5, tzinfo=UTC)


def test_day_of_week_step_from_star_is_unrestricted_so_both_fields_must_match() -> None:
    # */2 is Sunday, Tuesday, Thursday and Saturday; 1 April to 1 July 2026 fall on other days.
    assert local_fires("0 0 1 * */2", "UTC", "2026-01-02T00:00:00+00:00", 3) == [
        "2026-02-01T00:00:00+00:00",
        "2026-03-01T00:00:00+00:00",
        "2026-08-01T00:00:00+00:00",
    ]


def test_thirty_first_of_february_with_a_weekday_fires_on_that_weekday() -> None:
    # The OR rule lets the weekday fire even though 31 February never exists.
    assert local_fires("0 0 31 2 mon", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-02-02T00:00:00+00:00",
        "2026-02-09T00:00:00+00:00",
    ]


# Rollovers and leap days.


def test_minute_rolls_over_into_next_hour_day_month_and_year() -> None:
    assert local_fires("59 23 31 12 *", "UTC", "2026-12-31T23:59:00+00:00", 1) == [
        "2027-12-31T23:59:00+00:00"
    ]
    assert local_fires("* * * * *", "UTC", "2026-12-31T23:59:30+00:00", 1) == [
        "2027-01-01T00:00:00+00:00"
    ]


def test_monthly_job_rolls_over_into_next_year() -> None:
    assert local_fires("@monthly", "UTC", "2026-12-01T00:00:00+00:00", 2) == [
        "2027-01-01T00:00:00+00:00",
        "2027-02-01T00:00:00+00:00",
    ]


def test_thirty_first_day_skips_months_without_one() -> None:
    assert local_fires("0 0 31 * *", "UTC", "2026-01-31T00:00:00+00:00", 4) == [
        "2026-03-31T00:00:00+00:00",
        "2026-05-31T00:00:00+00:00",
        "2026-07-31T00:00:00+00:00",
        "2026-08-31T00:00:00+00:00",
    ]


def test_leap_day_job_fires_only_in_leap_years() -> None:
    assert local_fires("0 0 29 2 *", "UTC", "2026-01-01T00:00:00+00:00", 3) == [
        "2028-02-29T00:00:00+00:00",
        "2032-02-29T00:00:00+00:00",
        "2036-02-29T00:00:00+00:00",
    ]


def test_leap_day_job_skips_century_years_that_are_not_leap_years() -> None:
    assert local_fires("0 0 29 2 *", "UTC", "2096-03-01T00:00:00+00:00", 1) == [
        "2104-02-29T00:00:00+00:00"
    ]
    assert local_fires("0 0 29 2 *", "UTC", "1996-03-01T00:00:00+00:00", 1) == [
        "2000-02-29T00:00:00+00:00"
    ]


def test_end_of_february_job_fires_on_the_28th_and_on_leap_days() -> None:
    assert local_fires("0 12 28,29 2 *", "UTC", "2027-03-01T00:00:00+00:00", 3) == [
        "2028-02-28T12:00:00+00:00",
        "2028-02-29T12:00:00+00:00",
        "2029-02-28T12:00:00+00:00",
    ]


def test_daily_job_in_a_zone_east_of_utc_fires_on_the_previous_utc_day() -> None:
    assert local_fires("0 0 1 1 *", "Asia/Tokyo", "2026-06-01T00:00:00+09:00", 1) == [
        "2027-01-01T00:00:00+09:00"
    ]
    assert parse_cron("0 0 1 1 *", "Asia/Tokyo").next_fire_ms(
        at_ms("2026-06-01T00:00:00+00:00")
    ) == at_ms("2026-12-31T15:00:00+00:00")


# Agreement with croniter where there is no daylight saving (UTC).

CRONITER_FIVE_FIELD_EXPRESSIONS = [
    "* * * * *",
    "*/7 * * * *",
    "5-40/5 3,15 * * *",
    "10/20 * * * *",
    "0 0 1 * *",
    "0 0 31 * *",
    "0 12 * * mon-fri",
    "15 10 * jan,jul *",
    "0 0 13 * 5",
    "0 0 1,15 * 3",
    "59 23 31 12 *",
    "0 0 29 2 *",
    "30 4 1-7 * 1",
    "0 */6 * * 0,6",
    "0 0 * * 7",
    "0 0 */10 * *",
    "0 9 * 2-11/3 *",
]
CRONITER_START_TIMES = [
    datetime(2026, 1, 1, tzinfo=UTC),
    datetime(2027, 12, 31, 23, 59, 30, tzinfo=UTC),
    datetime(2028, 2, 28, 12, 0, tzinfo=UTC),
    datetime(2026, 6, 15, 8, 7, 9, 500000, tzinfo=UTC),
]


def croniter_fire_times_ms(
    expression: str, start: datetime, count: int, *, seconds_first: bool = False
) -> list[int]:
    fires = croniter(expression, start, second_at_beginning=seconds_first)
    return [round(fires.get_next(float) * 1000) for _ in range(count)]


@pytest.mark.parametrize("expression", CRONITER_FIVE_FIELD_EXPRESSIONS)
@pytest.mark.parametrize("start", CRONITER_START_TIMES, ids=lambda start: start.isoformat())
def test_fire_times_in_utc_agree_with_croniter(expression: str, start: datetime) -> None:
    start_ms = round(start.timestamp() * 1000)

    assert parse_cron(expression).fire_times_ms(start_ms, 25) == croniter_fire_times_ms(
        expression, start, 25
    )


@pytest.mark.parametrize(
    "expression", ["*/20 * * * * *", "30 0 12 * * *", "0-10/5 30 9 * * mon", "7 7 7 7 7 *"]
)
@pytest.mark.parametrize("start", CRONITER_START_TIMES, ids=lambda start: start.isoformat())
def test_six_field_fire_times_in_utc_agree_with_croniter_seconds_first(
    expression: str, start: datetime
) -> None:
    start_ms = round(start.timestamp() * 1000)

    assert parse_cron(expression).fire_times_ms(start_ms, 25) == croniter_fire_times_ms(
        expression, start, 25, seconds_first=True
    )


# Spring forward: wall times in the gap do not exist.


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        pytest.param(
            "America/New_York",
            "30 2 * * *",
            "2026-03-07T00:00:00-05:00",
            ["2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
            id="new-york",
        ),
        pytest.param(
            "Europe/Berlin",
            "30 2 * * *",
            "2026-03-28T00:00:00+01:00",
            ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
            id="berlin",
        ),
        pytest.param(
            "Australia/Sydney",
            "30 2 * * *",
            "2026-10-03T00:00:00+10:00",
            ["2026-10-03T02:30:00+10:00", "2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"],
            id="sydney",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "15 2 * * *",
            "2026-10-03T00:00:00+10:30",
            ["2026-10-03T02:15:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
            id="lord-howe-half-hour-shift",
        ),
    ],
)
def test_fixed_time_job_due_in_spring_gap_fires_at_first_instant_after_it(
    zone: str, expression: str, after: str, expected: list[str]
) -> None:
    assert local_fires(expression, zone, after, 3) == expected


def test_new_york_0230_job_fires_at_0700_utc_on_spring_forward_day() -> None:
    schedule = parse_cron("30 2 * * *", "America/New_York")

    assert schedule.next_fire_ms(at_ms("2026-03-08T00:00:00-05:00")) == at_ms(
        "2026-03-08T07:00:00+00:00"
    )


def test_fixed_times_skipped_by_spring_gap_collapse_into_one_fire() -> None:
    assert local_fires(
        "0,15,30,45 2 * * *", "America/New_York", "2026-03-08T01:00:00-05:00", 3
    ) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:00:00-04:00",
        "2026-03-09T02:15:00-04:00",
    ]


def test_fixed_time_in_gap_and_fixed_time_at_gap_end_fire_once() -> None:
    assert local_fires("0 2,3 * * *", "America/New_York", "2026-03-08T00:00:00-05:00", 3) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:00:00-04:00",
        "2026-03-09T03:00:00-04:00",
    ]


def test_fixed_time_after_gap_end_still_fires_on_spring_forward_day() -> None:
    assert local_fires("30 2,3 * * *", "America/New_York", "2026-03-08T00:00:00-05:00", 2) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:30:00-04:00",
    ]


def test_fixed_time_job_asked_from_gap_end_does_not_fire_again() -> None:
    assert local_fires("30 2 * * *", "America/New_York", "2026-03-08T03:00:00-04:00", 1) == [
        "2026-03-09T02:30:00-04:00"
    ]


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        pytest.param(
            "America/New_York",
            "0 * * * *",
            "2026-03-08T00:30:00-05:00",
            ["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"],
            id="new-york-hourly",
        ),
        pytest.param(
            "America/New_York",
            "30 * * * *",
            "2026-03-08T01:00:00-05:00",
            ["2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00", "2026-03-08T04:30:00-04:00"],
            id="new-york-half-past",
        ),
        pytest.param(
            "America/New_York",
            "0 */2 * * *",
            "2026-03-07T23:00:00-05:00",
            ["2026-03-08T00:00:00-05:00", "2026-03-08T04:00:00-04:00", "2026-03-08T06:00:00-04:00"],
            id="new-york-every-two-hours",
        ),
        pytest.param(
            "Europe/Berlin",
            "0 * * * *",
            "2026-03-29T00:30:00+01:00",
            ["2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"],
            id="berlin-hourly",
        ),
        pytest.param(
            "Australia/Sydney",
            "*/30 * * * *",
            "2026-10-04T01:00:00+10:00",
            ["2026-10-04T01:30:00+10:00", "2026-10-04T03:00:00+11:00", "2026-10-04T03:30:00+11:00"],
            id="sydney-half-hourly",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "*/15 * * * *",
            "2026-10-04T01:30:00+10:30",
            ["2026-10-04T01:45:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"],
            id="lord-howe-quarter-hourly",
        ),
    ],
)
def test_wildcard_job_has_no_occurrence_at_wall_times_skipped_by_spring_gap(
    zone: str, expression: str, after: str, expected: list[str]
) -> None:
    assert local_fires(expression, zone, after, 3) == expected


def test_wildcard_job_fires_one_real_hour_apart_across_the_spring_gap() -> None:
    schedule = parse_cron("0 * * * *", "America/New_York")
    one_am, three_am = schedule.fire_times_ms(at_ms("2026-03-08T00:30:00-05:00"), 2)

    assert three_am - one_am == 3_600_000


# Fall back: wall times in the overlap happen twice.


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        pytest.param(
            "America/New_York",
            "30 1 * * *",
            "2026-10-31T00:00:00-04:00",
            ["2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
            id="new-york",
        ),
        pytest.param(
            "Europe/Berlin",
            "30 2 * * *",
            "2026-10-24T00:00:00+02:00",
            ["2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
            id="berlin",
        ),
        pytest.param(
            "Australia/Sydney",
            "30 2 * * *",
            "2026-04-04T00:00:00+11:00",
            ["2026-04-04T02:30:00+11:00", "2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"],
            id="sydney",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "45 1 * * *",
            "2026-04-04T00:00:00+11:00",
            ["2026-04-04T01:45:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
            id="lord-howe-half-hour-shift",
        ),
    ],
)
def test_fixed_time_job_fires_once_when_local_hour_repeats(
    zone: str, expression: str, after: str, expected: list[str]
) -> None:
    assert local_fires(expression, zone, after, 3) == expected


@pytest.mark.parametrize(
    "after",
    ["2026-11-01T01:30:00-04:00", "2026-11-01T01:45:00-04:00", "2026-11-01T01:10:00-05:00"],
    ids=["at-first-occurrence", "later-in-first-pass", "in-second-pass"],
)
def test_fixed_time_job_asked_from_inside_the_repeated_hour_waits_for_the_next_day(
    after: str,
) -> None:
    assert local_fires("30 1 * * *", "America/New_York", after, 1) == ["2026-11-02T01:30:00-05:00"]


def test_fixed_time_job_asked_just_before_the_repeated_hour_fires_at_first_occurrence() -> None:
    assert local_fires("30 1 * * *", "America/New_York", "2026-11-01T00:59:59-04:00", 1) == [
        "2026-11-01T01:30:00-04:00"
    ]


def test_hour_range_job_is_fixed_time_so_the_repeated_hour_fires_once() -> None:
    assert local_fires("0 0-3 * * *", "America/New_York", "2026-10-31T23:00:00-04:00", 4) == [
        "2026-11-01T00:00:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T02:00:00-05:00",
        "2026-11-01T03:00:00-05:00",
    ]


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        pytest.param(
            "America/New_York",
            "0 * * * *",
            "2026-10-31T23:30:00-04:00",
            [
                "2026-11-01T00:00:00-04:00",
                "2026-11-01T01:00:00-04:00",
                "2026-11-01T01:00:00-05:00",
                "2026-11-01T02:00:00-05:00",
            ],
            id="new-york-hourly",
        ),
        pytest.param(
            "Europe/Berlin",
            "0 * * * *",
            "2026-10-25T00:30:00+02:00",
            [
                "2026-10-25T01:00:00+02:00",
                "2026-10-25T02:00:00+02:00",
                "2026-10-25T02:00:00+01:00",
                "2026-10-25T03:00:00+01:00",
            ],
            id="berlin-hourly",
        ),
        pytest.param(
            "Australia/Sydney",
            "30 * * * *",
            "2026-04-05T01:45:00+11:00",
            [
                "2026-04-05T02:30:00+11:00",
                "2026-04-05T02:30:00+10:00",
                "2026-04-05T03:30:00+10:00",
            ],
            id="sydney-half-past",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "*/15 * * * *",
            "2026-04-05T01:20:00+11:00",
            [
                "2026-04-05T01:30:00+11:00",
                "2026-04-05T01:45:00+11:00",
                "2026-04-05T01:30:00+10:30",
                "2026-04-05T01:45:00+10:30",
                "2026-04-05T02:00:00+10:30",
            ],
            id="lord-howe-quarter-hourly",
        ),
    ],
)
def test_wildcard_job_fires_at_both_occurrences_of_a_repeated_wall_time(
    zone: str, expression: str, after: str, expected: list[str]
) -> None:
    assert local_fires(expression, zone, after, len(expected)) == expected


def test_wildcard_job_fires_every_thirty_real_minutes_through_the_repeated_hour() -> None:
    schedule = parse_cron("*/30 * * * *", "America/New_York")
    fire_times = schedule.fire_times_ms(at_ms("2026-11-01T00:15:00-04:00"), 7)

    assert [format_fire_time(ms, "America/New_York") for ms in fire_times] == [
        "2026-11-01T00:30:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-01T02:00:00-05:00",
        "2026-11-01T02:30:00-05:00",
    ]
    assert {
        later - earlier for earlier, later in zip(fire_times, fire_times[1:], strict=False)
    } == {1_800_000}


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        pytest.param(
            "15 * * * *",
            "2026-11-01T01:20:00-04:00",
            "2026-11-01T01:15:00-05:00",
            id="first-pass-after-the-wall-time-gets-its-second-occurrence",
        ),
        pytest.param(
            "*/30 * * * *",
            "2026-11-01T01:40:00-04:00",
            "2026-11-01T01:00:00-05:00",
            id="first-pass-near-its-end-gets-the-repeat-start",
        ),
        pytest.param(
            "*/30 * * * *",
            "2026-11-01T01:59:59.999-04:00",
            "2026-11-01T01:00:00-05:00",
            id="last-millisecond-of-first-pass",
        ),
        pytest.param(
            "0 * * * *",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T02:00:00-05:00",
            id="second-occurrence-itself-does-not-refire-the-first",
        ),
        pytest.param(
            "*/30 * * * *",
            "2026-11-01T01:10:00-05:00",
            "2026-11-01T01:30:00-05:00",
            id="second-pass-continues-in-second-pass",
        ),
        pytest.param(
            "15 * * * *",
            "2026-11-01T01:15:00-05:00",
            "2026-11-01T02:15:00-05:00",
            id="second-pass-moves-past-the-overlap",
        ),
        pytest.param(
            "45 * * * *",
            "2026-11-01T01:50:00-04:00",
            "2026-11-01T01:45:00-05:00",
            id="first-pass-after-last-match-waits-for-its-repeat",
        ),
    ],
)
def test_wildcard_job_asked_from_inside_the_repeated_hour_neither_refires_nor_skips(
    expression: str, after: str, expected: str
) -> None:
    assert local_fires(expression, "America/New_York", after, 1) == [expected]


# Zones that shift at midnight or skip a whole day.


def test_daily_job_fires_at_first_instant_after_gap_when_midnight_is_skipped() -> None:
    assert local_fires("@daily", "America/Havana", "2026-03-06T12:00:00-05:00", 3) == [
        "2026-03-07T00:00:00-05:00",
        "2026-03-08T01:00:00-04:00",
        "2026-03-09T00:00:00-04:00",
    ]


def test_daily_job_fires_once_when_midnight_repeats() -> None:
    assert local_fires("@daily", "America/Havana", "2026-10-31T12:00:00-04:00", 2) == [
        "2026-11-01T00:00:00-04:00",
        "2026-11-02T00:00:00-05:00",
    ]


def test_fixed_time_job_on_a_skipped_calendar_day_fires_when_the_next_day_begins() -> None:
    assert local_fires("0 12 * * *", "Pacific/Apia", "2011-12-29T00:00:00-10:00", 3) == [
        "2011-12-29T12:00:00-10:00",
        "2011-12-31T00:00:00+14:00",
        "2011-12-31T12:00:00+14:00",
    ]


def test_wildcard_job_has_no_occurrence_on_a_skipped_calendar_day() -> None:
    assert local_fires("0 * * * *", "Pacific/Apia", "2011-12-29T22:30:00-10:00", 2) == [
        "2011-12-29T23:00:00-10:00",
        "2011-12-31T00:00:00+14:00",
    ]


# Seconds and daylight saving together.


def test_six_field_fixed_time_seconds_in_spring_gap_collapse_into_one_fire() -> None:
    assert local_fires("*/30 30 2 * * *", "America/New_York", "2026-03-08T00:00:00-05:00", 2) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]


def test_six_field_fixed_time_seconds_in_repeated_hour_fire_in_first_pass_only() -> None:
    assert local_fires("*/30 30 1 * * *", "America/New_York", "2026-11-01T00:00:00-04:00", 3) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:30:30-04:00",
        "2026-11-02T01:30:00-05:00",
    ]


def test_six_field_wildcard_seconds_continue_into_the_repeated_hour() -> None:
    assert local_fires("*/20 * * * * *", "America/New_York", "2026-11-01T01:59:20-04:00", 3) == [
        "2026-11-01T01:59:40-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:00:20-05:00",
    ]


def test_six_field_wildcard_seconds_jump_the_spring_gap() -> None:
    assert local_fires("*/20 * * * * *", "Europe/Berlin", "2026-03-29T01:59:20+01:00", 2) == [
        "2026-03-29T01:59:40+01:00",
        "2026-03-29T03:00:00+02:00",
    ]


# Exhaustive check against a brute-force statement of the DST rules.

TRANSITIONS = [
    ("America/New_York", "2026-03-08T07:00:00+00:00"),
    ("America/New_York", "2026-11-01T06:00:00+00:00"),
    ("Europe/Berlin", "2026-03-29T01:00:00+00:00"),
    ("Europe/Berlin", "2026-10-25T01:00:00+00:00"),
    ("Australia/Sydney", "2026-04-04T16:00:00+00:00"),
    ("Australia/Sydney", "2026-10-03T16:00:00+00:00"),
    ("Australia/Lord_Howe", "2026-04-04T15:00:00+00:00"),
    ("Australia/Lord_Howe", "2026-10-03T15:30:00+00:00"),
    ("America/Havana", "2026-03-08T05:00:00+00:00"),
    ("America/Havana", "2026-11-01T05:00:00+00:00"),
    ("Pacific/Apia", "2011-12-30T10:00:00+00:00"),
]
ORACLE_EXPRESSIONS = [
    "0 * * * *",
    "*/15 * * * *",
    "30 * * * *",
    "*/7 */2 * * *",
    "30 2 * * *",
    "0,30 1,2 * * *",
    "0 0-3 * * *",
    "15 1 * * *",
    "45 2 * * *",
    "0 0 * * *",
    "59 1 * * *",
    "0 3 * * *",
]


def croniter_wall_matcher(expression: str) -> Callable[[datetime], bool]:
    """Whether a naive wall time matches, from croniter's expansion of the fields."""
    minute, hour, day, month, weekday = croniter.expand(expression)[0]
    either = day != ["*"] and weekday != ["*"]
    weekdays = {0 if value == 7 else value for value in weekday}

    def matches(wall: datetime) -> bool:
        in_month = day == ["*"] or wall.day in day
        in_week = weekday == ["*"] or (wall.weekday() + 1) % 7 in weekdays
        day_ok = (in_month or in_week) if either else (in_month and in_week)
        return (
            day_ok
            and (month == ["*"] or wall.month in month)
            and (hour == ["*"] or wall.hour in hour)
            and (minute == ["*"] or wall.minute in minute)
        )

    return matches


def brute_force_fire_times_s(
    expression: str, zone_name: str, start_s: int, end_s: int
) -> list[int]:
    """Every fire time in [start_s, end_s), found by visiting each UTC minute.

    The rules restated: a wildcard job fires at each instant whose wall time matches; a
    fixed-time job fires at the first instant of a matching wall time, and at the first instant
    after a gap that swallowed a matching wall time.
    """
    zone = ZoneInfo(zone_name)
    matches = croniter_wall_matcher(expression)
    fixed_time = parse_cron(expression).fixed_time
    fires = []
    for instant_s in range(start_s, end_s, MINUTE_S):
        local = datetime.fromtimestamp(instant_s, zone)
        wall = local.replace(tzinfo=None, fold=0)
        wall_expected = datetime.fromtimestamp(instant_s - MINUTE_S, zone).replace(
            tzinfo=None, fold=0
        ) + timedelta(minutes=1)
        skipped = []
        while wall_expected < wall:
            skipped.append(wall_expected)
            wall_expected += timedelta(minutes=1)
        if fixed_time:
            fires_now = (matches(wall) and local.fold == 0) or any(map(matches, skipped))
        else:
            fires_now = matches(wall)
        if fires_now:
            fires.append(instant_s)
    return fires


@pytest.mark.parametrize("expression", ORACLE_EXPRESSIONS)
@pytest.mark.parametrize(("zone", "transition"), TRANSITIONS, ids=lambda value: str(value))
def test_fire_times_around_transitions_match_brute_force_statement_of_rules(
    zone: str, transition: str, expression: str
) -> None:
    transition_s = at_ms(transition) // 1000
    start_s, end_s = transition_s - 26 * 3600, transition_s + 26 * 3600
    expected_s = brute_force_fire_times_s(expression, zone, start_s, end_s)
    schedule = parse_cron(expression, zone)

    fired_ms = []
    fire_ms = schedule.next_fire_ms(start_s * 1000 - 1)
    while fire_ms < end_s * 1000:
        fired_ms.append(fire_ms)
        fire_ms = schedule.next_fire_ms(fire_ms)

    assert fired_ms == [second * 1000 for second in expected_s]


@pytest.mark.parametrize("expression", ORACLE_EXPRESSIONS)
@pytest.mark.parametrize(("zone", "transition"), TRANSITIONS, ids=lambda value: str(value))
def test_next_fire_from_any_minute_near_a_transition_is_the_next_brute_force_fire(
    zone: str, transition: str, expression: str
) -> None:
    transition_s = at_ms(transition) // 1000
    start_s, end_s = transition_s - 3 * 3600, transition_s + 3 * 3600
    expected_s = brute_force_fire_times_s(expression, zone, start_s, end_s + 26 * 3600)
    schedule = parse_cron(expression, zone)

    for probe_s in range(start_s, end_s, MINUTE_S):
        for probe_ms in (probe_s * 1000 - 1, probe_s * 1000, probe_s * 1000 + 30_000):
            expected = next(second * 1000 for second in expected_s if second * 1000 > probe_ms)
            assert schedule.next_fire_ms(probe_ms) == expected, format_fire_time(probe_ms, zone)


# Errors: each names its field and says what to change.


def test_out_of_range_minute_names_the_minute_field() -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron("61 * * * *")

    assert caught.value.field == "minute"
    assert str(caught.value) == "minute field '61' is out of range 0-59"


@pytest.mark.parametrize(
    ("expression", "field", "message"),
    [
        ("60 * * * * *", "second", "second field '60' is out of range 0-59"),
        ("0 24 * * *", "hour", "hour field '24' is out of range 0-23"),
        ("0 0 0 * *", "day_of_month", "day-of-month field '0' is out of range 1-31"),
        ("0 0 32 * *", "day_of_month", "day-of-month field '32' is out of range 1-31"),
        ("0 0 * 13 *", "month", "month field '13' is out of range 1-12"),
        ("0 0 * 0 *", "month", "month field '0' is out of range 1-12"),
        ("0 0 * * 8", "day_of_week", "day-of-week field '8' is out of range 0-7"),
        ("0,15,75 * * * *", "minute", "minute field '75' is out of range 0-59"),
        ("0 20-24 * * *", "hour", "hour field '20-24' is out of range 0-23"),
    ],
)
def test_out_of_range_value_names_its_field_and_the_allowed_range(
    expression: str, field: str, message: str
) -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron(expression)

    assert caught.value.field == field
    assert str(caught.value) == message


@pytest.mark.parametrize("expression", ["* * *", "0 0 * * * * 2026", "0", "", "  \t "])
def test_wrong_field_count_says_which_forms_are_accepted(expression: str) -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron(expression)

    count = len(expression.split())
    assert caught.value.field == "expression"
    assert str(caught.value) == (
        "expected 5 fields (minute hour day-of-month month day-of-week) "
        f"or 6 with seconds first, got {count}"
    )


def test_three_field_expression_reports_got_3() -> None:
    with pytest.raises(InvalidCronExpression, match=r"or 6 with seconds first, got 3$"):
        parse_cron("0 12 *")


@pytest.mark.parametrize("macro", ["@reboot", "@fortnightly", "@", "@dailly"])
def test_unknown_macro_lists_the_supported_macros(macro: str) -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron(macro)

    assert caught.value.field == "expression"
    assert str(caught.value) == (
        f"unknown macro '{macro}'; use one of "
        "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
    )


def test_macro_followed_by_fields_is_rejected() -> None:
    with pytest.raises(InvalidCronExpression, match="macro '@daily' must be the whole expression"):
        parse_cron("@daily 5")


@pytest.mark.parametrize(
    ("expression", "field", "message_part"),
    [
        ("abc * * * *", "minute", "minute field 'abc' is not valid; use a number 0-59"),
        ("0 jan * * *", "hour", "hour field 'jan' is not valid; use a number 0-23"),
        ("0 0 * foo *", "month", "or a name jan-dec"),
        ("0 0 * * funday", "day_of_week", "or a name sun-sat"),
        ("-5 * * * *", "minute", "minute field '-5' is not valid"),
        ("1.5 * * * *", "minute", "minute field '1.5' is not valid"),
        (
            "*/0 * * * *",
            "minute",
            "minute field '*/0' has step '0'; use a whole number from 1 to 59",
        ),
        ("*/x * * * *", "minute", "minute field '*/x' has step 'x'"),
        ("*/ * * * *", "minute", "minute field '*/' has step ''"),
        ("0 */24 * * *", "hour", "use a whole number from 1 to 23"),
        (
            "0 22-2 * * *",
            "hour",
            "hour field '22-2' is a reversed range; write 22-23,0-2 to wrap around, or 2-22",
        ),
        ("0 0 * * fri-mon", "day_of_week", "write 5-6,0-1 to wrap around, or 1-5"),
        ("0 0 25-5 * *", "day_of_month", "write 25-31,1-5 to wrap around, or 5-25"),
        ("1,,2 * * * *", "minute", "minute field '1,,2' has an empty list item"),
        (
            "? * * * *",
            "minute",
            "minute field '?' uses '?', which only day-of-month and day-of-week",
        ),
        ("0 L * * *", "hour", "L, LW, L-n and nW go in day-of-month"),
        ("0 0 * 5W *", "month", "uses L, W, # or H where it does not belong"),
        ("0 0 1,L * *", "day_of_month", "Quartz allows 'L' and 'W' only on their own"),
        ("0 0 * * 1,5L", "day_of_week", "Quartz allows 'L' and '#' only on their own"),
        ("0 0 1-? * *", "day_of_month", "uses '?'"),
    ],
)
def test_malformed_field_names_the_field_and_how_to_write_it(
    expression: str, field: str, message_part: str
) -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron(expression)

    assert caught.value.field == field
    assert message_part in str(caught.value)


def test_thirtieth_of_february_never_fires() -> None:
    with pytest.raises(CronNeverFires) as caught:
        parse_cron("0 0 30 2 *")

    assert caught.value.field == "day_of_month"
    assert str(caught.value).startswith("day-of-month 30 never occurs in February")
    assert "choose a day from 1 to 29" in str(caught.value)


def test_thirty_first_of_the_short_months_never_fires() -> None:
    with pytest.raises(CronNeverFires) as caught:
        parse_cron("0 0 31 4,6,9,11 *")

    assert caught.value.field == "day_of_month"
    assert str(caught.value).startswith(
        "day-of-month 31 never occurs in April, June, September or November"
    )
    assert "choose a day from 1 to 30" in str(caught.value)


def test_several_impossible_days_are_all_named() -> None:
    with pytest.raises(CronNeverFires, match="^day-of-month 30,31 never occurs in February"):
        parse_cron("0 0 30,31 feb *")


def test_never_firing_six_field_expression_is_detected() -> None:
    with pytest.raises(CronNeverFires):
        parse_cron("0 0 0 31 6 *")


@pytest.mark.parametrize(
    "expression", ["0 0 29 2 *", "0 0 30,31 2,3 *", "0 0 31 2 1", "0 0 */30 2 *", "0 0 31 * *"]
)
def test_days_that_exist_in_some_chosen_month_are_accepted(expression: str) -> None:
    assert parse_cron(expression).next_fire_ms(0) > 0


def test_errors_are_value_errors_of_the_scheduler_family() -> None:
    with pytest.raises(ValueError):
        parse_cron("61 * * * *")
    assert issubclass(CronNeverFires, InvalidSchedule)
    assert issubclass(UnknownTimeZone, InvalidSchedule)


# Time zones.


def test_unknown_time_zone_names_the_timezone_field_and_suggests_an_iana_name() -> None:
    with pytest.raises(UnknownTimeZone) as caught:
        validate_timezone("Mars/Olympus")

    assert caught.value.field == "timezone"
    assert str(caught.value) == (
        "unknown time zone 'Mars/Olympus'; use an IANA name such as 'Europe/Paris'"
    )


def test_parse_cron_rejects_an_unknown_time_zone() -> None:
    with pytest.raises(UnknownTimeZone) as caught:
        parse_cron("0 0 * * *", "Mars/Olympus")

    assert caught.value.field == "timezone"


def test_misspelt_time_zone_gets_a_suggestion() -> None:
    with pytest.raises(UnknownTimeZone, match=r"\(did you mean 'America/New_York'\?\)$"):
        validate_timezone("america/new_york")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/etc/localtime",
        "../usr/share/zoneinfo/UTC",
        "Etc/../UTC",
        "localtime",
        "UTC ",
        "Europe",
        "Europe/",
        "zone1970.tab",
    ],
)
def test_paths_host_names_and_malformed_names_are_not_time_zones(name: str) -> None:
    with pytest.raises(UnknownTimeZone):
        validate_timezone(name)


def test_non_string_time_zone_is_rejected() -> None:
    with pytest.raises(UnknownTimeZone):
        validate_timezone(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["UTC", "Europe/Paris", "America/Argentina/Buenos_Aires"])
def test_iana_time_zone_is_returned_as_zoneinfo(name: str) -> None:
    assert validate_timezone(name) == ZoneInfo(name)


def test_schedule_carries_its_zone() -> None:
    assert parse_cron("0 0 * * *", "Asia/Kolkata").zone == ZoneInfo("Asia/Kolkata")


def test_schedule_built_directly_still_validates_its_zone() -> None:
    with pytest.raises(UnknownTimeZone):
        CronSchedule(
            expression="0 0 * * *",
            timezone="Nowhere/Special",
            seconds=(0,),
            minutes=(0,),
            hours=(0,),
            days_of_month=frozenset(range(1, 32)),
            months=tuple(range(1, 13)),
            days_of_week=frozenset(range(7)),
            days_either=False,
            fixed_time=True,
        )


# Formatting fire times.


@pytest.mark.parametrize(
    ("fire", "zone", "expected"),
    [
        ("2026-03-08T07:00:00+00:00", "America/New_York", "2026-03-08T03:00:00-04:00"),
        ("2026-03-08T06:59:59+00:00", "America/New_York", "2026-03-08T01:59:59-05:00"),
        ("2026-11-01T05:30:00+00:00", "America/New_York", "2026-11-01T01:30:00-04:00"),
        ("2026-11-01T06:30:00+00:00", "America/New_York", "2026-11-01T01:30:00-05:00"),
        ("2026-01-01T00:00:00+00:00", "UTC", "2026-01-01T00:00:00+00:00"),
        ("2026-01-01T00:00:00+00:00", "Asia/Kolkata", "2026-01-01T05:30:00+05:30"),
        ("2026-10-03T15:30:00+00:00", "Australia/Lord_Howe", "2026-10-04T02:30:00+11:00"),
        ("2026-06-01T00:00:00+00:00", "Asia/Kathmandu", "2026-06-01T05:45:00+05:45"),
    ],
)
def test_format_fire_time_is_iso_8601_local_time_with_utc_offset(
    fire: str, zone: str, expected: str
) -> None:
    assert format_fire_time(at_ms(fire), zone) == expected


def test_format_fire_time_drops_milliseconds() -> None:
    assert format_fire_time(at_ms("2026-01-01T00:00:01.999+00:00"), "UTC") == (
        "2026-01-01T00:00:01+00:00"
    )


def test_format_fire_time_rejects_an_unknown_time_zone() -> None:
    with pytest.raises(UnknownTimeZone):
        format_fire_time(0, "Mars/Olympus")


# Only ASCII: str.isdigit() also accepts superscripts (which int() refuses) and other scripts'
# digits (which int() reads), so each would either crash the parser or be stored as written.


@pytest.mark.parametrize(
    ("expression", "field", "message"),
    [
        ("² * * * *", "minute", "minute field '²' uses '²' (U+00B2 SUPERSCRIPT TWO), which "
         "is not ASCII; write numbers with the digits 0-9 and names in English letters"),
        ("٣ * * * *", "minute", "minute field '٣' uses '٣' (U+0663 ARABIC-INDIC DIGIT "
         "THREE), which is not ASCII"),
        ("0 １２ * * *", "hour", "hour field '１２' uses '１' (U+FF11 FULLWIDTH DIGIT ONE)"),
        ("*/٥ * * * *", "minute", "minute field '*/٥' uses '٥'"),
        ("0 0 1-³ * *", "day_of_month", "day-of-month field '1-³' uses '³'"),
        ("0 0 * * ５", "day_of_week", "day-of-week field '５' uses '５'"),
        ("0 0 * ｊan *", "month", "month field 'ｊan' uses 'ｊ'"),
        ("⁵ 0 * * * *", "second", "second field '⁵' uses '⁵'"),
        ("0 0 * * * ²", "day_of_week", "day-of-week field '²' uses '²'"),
        ("@daily²", "expression", "'@daily²' uses '²' (U+00B2 SUPERSCRIPT TWO), which is "
         "not ASCII"),
        ("0 0 * ²", "expression", "'²' uses '²' (U+00B2 SUPERSCRIPT TWO)"),
    ],
)
def test_a_character_that_is_not_ascii_is_refused_naming_its_field(
    expression: str, field: str, message: str | None
) -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron(expression)

    assert caught.value.field == field
    if message is not None:
        assert message in str(caught.value)


def test_a_space_that_is_not_ascii_is_refused_rather_than_read_as_a_separator() -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        parse_cron("0\u2003* * * *")

    assert caught.value.field == "expression"
    assert str(caught.value) == (
        "'0\u2003*' uses '\u2003' (U+2003 EM SPACE), a space that is not ASCII; separate the "
        "fields with ordinary spaces")


@pytest.mark.parametrize("separator", ["\x1c", "\x1f", "\x85", "\xa0"])
def test_only_ascii_white_space_separates_fields(separator: str) -> None:
    with pytest.raises(InvalidCronExpression):
        parse_cron(separator.join("0 * * * *".split()))
