"""Exclusion calendars, the pure rules (scheduler.calendars): which UTC instants a calendar's
local days cover in its own zone, DST days, cron day rules, the planner's skips and the checks
of a calendar document."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from scheduler.calendars import (
    ExclusionCalendar,
    allowed_fire_times,
    calendar_names_problem,
    calendar_problems,
    day_start_ms,
    excluding_calendar,
    never_fires_problem,
    parse_calendar,
    skip_reason,
)
from scheduler.cron import parse_cron, validate_timezone
from scheduler.errors import SpecInvalid
from scheduler.intervals import HOUR_MS, MINUTE_MS, IntervalSchedule
from scheduler.misfire import MisfirePolicy, MisfireRule, calendar_exclusion, plan_occurrences


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def iso(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


TOKYO = ExclusionCalendar("jp-christmas", "Asia/Tokyo", dates=frozenset({date(2026, 12, 25)}))
NEW_YORK = ExclusionCalendar("us-christmas", "America/New_York",
                             dates=frozenset({date(2026, 12, 25)}))


# One date, two zones: different UTC instants


@pytest.mark.parametrize(("instant", "in_tokyo", "in_new_york"), [
    ("2026-12-24T14:59:59+00:00", False, False),
    ("2026-12-24T15:00:00+00:00", True, False),   # Tokyo's 25th begins (UTC+9)
    ("2026-12-25T04:59:59+00:00", True, False),
    ("2026-12-25T05:00:00+00:00", True, True),    # New York's 25th begins (UTC-5)
    ("2026-12-25T14:59:59+00:00", True, True),
    ("2026-12-25T15:00:00+00:00", False, True),   # Tokyo's 26th
    ("2026-12-26T04:59:59+00:00", False, True),
    ("2026-12-26T05:00:00+00:00", False, False),  # New York's 26th
])
def test_one_date_covers_the_utc_instants_of_that_day_in_each_calendars_zone(
        instant, in_tokyo, in_new_york):
    assert TOKYO.excludes(ms(instant)) is in_tokyo
    assert NEW_YORK.excludes(ms(instant)) is in_new_york


def test_an_hourly_job_skips_tokyos_christmas_and_new_yorks_in_their_own_hours():
    hourly = parse_cron("0 * * * *", "UTC")
    after = ms("2026-12-24T13:30:00+00:00")
    tokyo_times = allowed_fire_times(hourly, [TOKYO], after, 3)
    new_york_times = allowed_fire_times(hourly, [NEW_YORK], after, 17)
    assert [iso(t) for t in tokyo_times] == [
        "2026-12-24T14:00:00Z", "2026-12-25T15:00:00Z", "2026-12-25T16:00:00Z"]
    assert iso(new_york_times[14]) == "2026-12-25T04:00:00Z"
    assert iso(new_york_times[15]) == "2026-12-26T05:00:00Z"


def test_the_first_calendar_that_excludes_an_instant_is_named():
    both = [TOKYO, NEW_YORK]
    assert excluding_calendar(both, ms("2026-12-25T10:00:00+00:00")) == "jp-christmas"
    assert excluding_calendar(both, ms("2026-12-25T20:00:00+00:00")) == "us-christmas"
    assert excluding_calendar(both, ms("2026-12-27T10:00:00+00:00")) is None
    assert skip_reason("us-christmas") == "calendar us-christmas"


# DST days are local days of 23 and 25 hours


@pytest.mark.parametrize(("day", "start", "end", "hours"), [
    (date(2026, 3, 8), "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z", 23),   # spring forward
    (date(2026, 11, 1), "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z", 25),  # fall back
])
def test_a_dst_day_is_excluded_for_all_of_its_local_hours(day, start, end, hours):
    calendar = ExclusionCalendar("dst", "America/New_York", dates=frozenset({day}))
    zone = validate_timezone("America/New_York")
    assert iso(day_start_ms(day, zone)) == start
    assert iso(day_start_ms(day + timedelta(days=1), zone)) == end
    hourly = parse_cron("0 * * * *", "UTC")
    around = hourly.fire_times_ms(day_start_ms(day, zone) - 3 * HOUR_MS - 1, hours + 6)
    excluded = [t for t in around if calendar.excludes(t)]
    assert len(excluded) == hours
    assert (iso(excluded[0]), iso(excluded[-1] + HOUR_MS)) == (start, end)


def test_a_day_whose_midnight_the_clocks_skip_begins_when_the_gap_ends():
    # Havana springs forward at midnight: 2026-03-08 00:00 CST never happens, 01:00 CDT does.
    zone = validate_timezone("America/Havana")
    start = day_start_ms(date(2026, 3, 8), zone)
    calendar = ExclusionCalendar("havana", "America/Havana",
                                 dates=frozenset({date(2026, 3, 8)}))
    assert datetime.fromtimestamp(start / 1000, zone).isoformat() == "2026-03-08T01:00:00-04:00"
    assert calendar.excludes(start) and not calendar.excludes(start - 1000)


def test_a_job_in_one_zone_and_a_calendar_in_another_meet_in_utc():
    # 09:00 Tokyo every day is 00:00 UTC: the New York calendar's 25 December (05:00 UTC on
    # the 25th to 05:00 on the 26th) covers the fire of Tokyo's 26th, not of its 25th.
    tokyo_nine = parse_cron("0 9 * * *", "Asia/Tokyo")
    times = allowed_fire_times(tokyo_nine, [NEW_YORK], ms("2026-12-24T01:00:00+00:00"), 2)
    assert [iso(t) for t in times] == ["2026-12-25T00:00:00Z", "2026-12-27T00:00:00Z"]


# Rules: cron's day fields


@pytest.mark.parametrize(("rule", "matching", "not_matching"), [
    ("* * SAT,SUN", [date(2026, 12, 26), date(2026, 12, 27)], [date(2026, 12, 28)]),
    ("25 DEC *", [date(2026, 12, 25), date(2027, 12, 25)], [date(2026, 11, 25)]),
    ("* * 5L", [date(2026, 12, 25), date(2027, 1, 29)], [date(2026, 12, 18)]),
    ("L FEB *", [date(2028, 2, 29), date(2027, 2, 28)], [date(2028, 2, 28)]),
    ("* * MON#1", [date(2026, 12, 7)], [date(2026, 12, 14)]),
    ("1 JAN MON", [date(2027, 1, 1), date(2027, 1, 4)], [date(2027, 1, 5)]),  # either, as cron
    ("LW * *", [date(2026, 5, 29)], [date(2026, 5, 31)]),  # the 31st is a Sunday
])
def test_rules_read_the_day_fields_of_chronos_cron(rule, matching, not_matching):
    calendar = parse_calendar({"name": "r", "rules": [rule]})
    assert all(calendar.excludes_day(d) for d in matching)
    assert not any(calendar.excludes_day(d) for d in not_matching)


def test_dates_ranges_and_rules_add_up():
    calendar = parse_calendar({
        "name": "holidays", "timezone": "Europe/Paris", "dates": ["2026-07-14"],
        "ranges": ["2026-12-24/2027-01-02"], "rules": ["* * SUN"]})
    assert calendar.excludes_day(date(2026, 7, 14))
    assert calendar.excludes_day(date(2026, 12, 24)) and calendar.excludes_day(date(2027, 1, 2))
    assert not calendar.excludes_day(date(2027, 1, 4))
    assert calendar.excludes_day(date(2027, 1, 10))  # a Sunday
    assert calendar.to_document() == {
        "name": "holidays", "timezone": "Europe/Paris", "dates": ["2026-07-14"],
        "ranges": ["2026-12-24/2027-01-02"], "rules": ["* * SUN"]}


# The beat's plan


def test_a_claimed_occurrence_on_an_excluded_day_is_skipped_and_the_job_moves_on():
    daily = parse_cron("0 12 * * *", "America/New_York")
    christmas = ms("2026-12-25T17:00:00+00:00")
    plan = plan_occurrences(schedule=daily, fire_at_ms=christmas, now_ms=christmas,
                            rule=MisfireRule(), grace_ms=5_000,
                            excluded_by=lambda t: excluding_calendar([NEW_YORK], t))
    assert plan.fire_ms == []
    assert plan.skipped == [(christmas, "calendar us-christmas")]
    assert plan.next_ms == christmas + 24 * HOUR_MS


def test_late_occurrences_on_excluded_days_are_skipped_for_the_calendar_and_the_rest_by_policy():
    daily = parse_cron("0 12 * * *", "America/New_York")
    first = ms("2026-12-23T17:00:00+00:00")
    now = ms("2026-12-27T17:00:30+00:00")
    weekend = parse_calendar({"name": "weekend", "timezone": "America/New_York",
                              "rules": ["* * SAT,SUN"]})  # the 26th and 27th
    calendars = [NEW_YORK, weekend]
    plan = plan_occurrences(schedule=daily, fire_at_ms=first, now_ms=now,
                            rule=MisfireRule(MisfirePolicy.FIRE_ONCE), grace_ms=5_000,
                            excluded_by=lambda t: excluding_calendar(calendars, t))
    day = 24 * HOUR_MS
    assert plan.fire_ms == [first + day]  # the 24th: the latest late one no calendar excludes
    assert plan.skipped == [
        (first, "missed; fired once for all (misfire policy fire_once)"),
        (first + 2 * day, "calendar us-christmas"),
        (first + 3 * day, "calendar weekend"),
        (first + 4 * day, "calendar weekend"),
    ]
    assert plan.next_ms == first + 5 * day


def test_a_trigger_is_never_excluded_but_the_occurrences_after_it_are():
    daily = parse_cron("0 12 * * *", "America/New_York")
    christmas_noon = ms("2026-12-25T17:00:00+00:00")
    trigger = christmas_noon - 3 * HOUR_MS  # "run now", at 09:00 on the 25th
    excluded_by = calendar_exclusion("job-1", daily, trigger, 0, [NEW_YORK])
    assert excluded_by is not None
    assert excluded_by(trigger) is None
    assert excluded_by(christmas_noon) == "us-christmas"
    assert calendar_exclusion("job-1", daily, christmas_noon, 0, [NEW_YORK])(christmas_noon) \
        == "us-christmas"
    assert calendar_exclusion("job-1", daily, christmas_noon, 0, []) is None


def test_without_calendars_the_plan_is_unchanged():
    daily = parse_cron("0 12 * * *", "America/New_York")
    christmas = ms("2026-12-25T17:00:00+00:00")
    plan = plan_occurrences(schedule=daily, fire_at_ms=christmas, now_ms=christmas,
                            rule=MisfireRule(), grace_ms=5_000)
    assert (plan.fire_ms, plan.skipped) == ([christmas], [])


def test_an_interval_job_is_judged_by_the_instant_it_fires():
    every_90_minutes = IntervalSchedule(90 * MINUTE_MS, ms("2026-12-24T00:00:00+00:00"))
    times = allowed_fire_times(every_90_minutes, [TOKYO], ms("2026-12-24T12:00:00+00:00"), 3)
    assert [iso(t) for t in times] == [
        "2026-12-24T13:30:00Z", "2026-12-25T15:00:00Z", "2026-12-25T16:30:00Z"]


def test_a_long_exclusion_is_stepped_over_a_day_at_a_time():
    calls = []

    class Counting:
        def next_fire_ms(self, after_ms: int) -> int:
            calls.append(after_ms)
            return (after_ms // MINUTE_MS + 1) * MINUTE_MS

    fortnight = parse_calendar({"name": "closed", "ranges": ["2026-08-01/2026-08-14"]})
    times = allowed_fire_times(Counting(), [fortnight], ms("2026-07-31T23:58:00+00:00"), 3)
    assert [iso(t) for t in times] == [
        "2026-07-31T23:59:00Z", "2026-08-15T00:00:00Z", "2026-08-15T00:01:00Z"]
    assert len(calls) < 30  # not 20,160 minutes one by one


def test_the_spread_of_a_jitter_is_judged_where_it_lands():
    hourly = parse_cron("0 * * * *", "UTC")
    utc_day = parse_calendar({"name": "d", "dates": ["2026-12-25"]})
    # Every occurrence lands 59 minutes later: 23:00 on the 24th fires at 23:59 (allowed), the
    # one of 23:00 on the 25th at 23:59 (excluded), 00:00 on the 26th at 00:59.
    times = allowed_fire_times(hourly, [utc_day], ms("2026-12-24T22:30:00+00:00"), 2,
                               fire_time=lambda t: t + 59 * MINUTE_MS, max_spread_ms=HOUR_MS)
    assert [iso(t) for t in times] == ["2026-12-24T23:59:00Z", "2026-12-26T00:59:00Z"]


# A job that would never fire


def test_calendars_that_exclude_every_occurrence_are_a_problem_naming_them():
    everyday = parse_calendar({"name": "always", "rules": ["* * *"]})
    problem = never_fires_problem(parse_cron("*/5 * * * *"), [everyday], ms(
        "2026-12-01T00:00:00+00:00"))
    assert problem is not None and "always" in problem and "never fire" in problem
    christmas_job = parse_cron("0 9 25 12 *", "America/New_York")
    every_christmas = parse_calendar({"name": "xmas", "timezone": "America/New_York",
                                      "rules": ["25 DEC *"]})
    start = ms("2026-12-01T00:00:00+00:00")
    assert never_fires_problem(christmas_job, [every_christmas], start) is not None
    assert never_fires_problem(christmas_job, [NEW_YORK], start) is None  # 2027's fires
    # 09:00 New York on the 25th is 23:00 in Tokyo, still its 25th: excluded there too ...
    tokyo_christmas = parse_calendar({"name": "jp", "timezone": "Asia/Tokyo",
                                      "rules": ["25 DEC *"]})
    assert never_fires_problem(christmas_job, [tokyo_christmas], start) is not None
    # ... but not 09:00 in Honolulu, the 26th in Tokyo.
    honolulu_job = parse_cron("0 9 25 12 *", "Pacific/Honolulu")
    assert never_fires_problem(honolulu_job, [tokyo_christmas], start) is None
    weekdays_only = parse_calendar({"name": "weekdays", "rules": ["* * MON-FRI"]})
    assert never_fires_problem(parse_cron("0 9 * * *"), [weekdays_only],
                               ms("2026-12-01T00:00:00+00:00")) is None


# Documents


@pytest.mark.parametrize(("document", "field", "words"), [
    ({"name": "x", "timezone": "Mars/Olympus"}, "timezone", "time zone"),
    ({"name": "x", "timezone": 5}, "timezone", "IANA time zone"),
    ({"name": "x", "dates": ["2026-12-25", "25/12/2026"]}, "dates[1]", "YYYY-MM-DD"),
    ({"name": "x", "dates": ["2026-02-30"]}, "dates[0]", "YYYY-MM-DD"),
    ({"name": "x", "dates": "2026-12-25"}, "dates", "list of strings"),
    ({"name": "x", "ranges": ["2027-01-02/2026-12-24"]}, "ranges[0]", "before it starts"),
    ({"name": "x", "ranges": ["2026-12-24"]}, "ranges[0]", "START/END"),
    ({"name": "x", "rules": ["0 0 * * SAT"]}, "rules[0]", "three cron fields"),
    ({"name": "x", "rules": ["* * FUNDAY"]}, "rules[0]", "day-of-week"),
    ({"name": "x", "rules": ["H * *"]}, "rules[0]", "H hashes a job's id"),
    ({"name": "x", "rules": ["30 FEB *"]}, "rules[0]", "never"),
    ({"name": "bad name!"}, "name", "letters, digits"),
    ({"timezone": "UTC"}, "name", "Required"),
    ({"name": "x", "colour": "red"}, "colour", "Unknown field"),
    ({"name": "x", "dates": ["2026-12-25"] * 1_001}, "dates", "at most 1000"),
])
def test_a_bad_document_names_the_field_and_what_to_change(document, field, words):
    errors = calendar_problems(document)
    assert field in errors, errors
    assert words in errors[field][0]
    with pytest.raises(SpecInvalid):
        parse_calendar(document)


def test_thursday_is_not_taken_for_h():
    assert calendar_problems({"name": "x", "rules": ["* * THU"]}) == {}


@pytest.mark.parametrize(("value", "words"), [
    ("holidays", "list of calendar names"),
    ([1], "calendar names (strings)"),
    (["a", "a"], "twice"),
    (["ok", "not ok"], "'not ok'"),
    ([f"c{i}" for i in range(11)], "at most 10"),
])
def test_a_jobs_calendars_are_names(value, words):
    problem = calendar_names_problem(value)
    assert problem is not None and words in problem


def test_a_jobs_calendars_may_be_empty_or_names():
    assert calendar_names_problem([]) is None
    assert calendar_names_problem(["us-holidays", "weekend"]) is None
