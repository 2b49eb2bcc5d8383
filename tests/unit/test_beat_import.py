"""Celery beat schedules translated to cron: pure functions, no services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery.schedules import BaseSchedule, crontab, schedule

from scheduler.beat_import import (
    cron_for_crontab,
    cron_for_interval,
    describe_seconds,
    translate_entry,
    translate_schedule,
)
from scheduler.clock import datetime_to_ms
from scheduler.cron import parse_cron
from scheduler.errors import UntranslatableSchedule

# --------------------------------------------------------------------------------- intervals


@pytest.mark.parametrize(
    ("seconds", "cron"),
    [
        (1, "* * * * * *"),
        (2, "*/2 * * * * *"),
        (30, "*/30 * * * * *"),
        (60, "* * * * *"),
        (5 * 60, "*/5 * * * *"),
        (30 * 60, "*/30 * * * *"),
        (3_600, "0 * * * *"),
        (6 * 3_600, "0 */6 * * *"),
        (12 * 3_600, "0 */12 * * *"),
        (86_400, "0 0 * * *"),
        (7 * 86_400, "0 0 * * 0"),
        (30.0, "*/30 * * * * *"),
    ],
)
def test_an_interval_that_divides_its_unit_becomes_the_cron_firing_at_exactly_that_period(
    seconds, cron
):
    assert cron_for_interval(seconds) == cron
    fires = parse_cron(cron, "UTC").fire_times_ms(datetime_to_ms(datetime(2026, 3, 1, tzinfo=UTC)),
                                                  20)
    assert {b - a for a, b in zip(fires, fires[1:], strict=False)} == {int(seconds) * 1000}


@pytest.mark.parametrize(
    ("seconds", "says"),
    [
        (7, "every 7 s does not divide a minute"),
        (45, "every 45 s does not divide a minute"),
        (90, "every 90 s does not divide an hour"),
        (45 * 60, "every 45 min does not divide an hour"),
        (5 * 3_600, "every 5 h does not divide a day"),
        (2 * 86_400, "every 2 days has no exact cron form"),
        (0.5, "every 0.5 s is not a whole number of seconds"),
        (0, "use a positive interval"),
        (-30, "use a positive interval"),
    ],
)
def test_an_interval_no_cron_fires_at_exactly_is_refused_with_what_to_use(seconds, says):
    with pytest.raises(UntranslatableSchedule) as refused:
        cron_for_interval(seconds)
    assert says in str(refused.value)
    if 0 < seconds < 60:
        assert "1, 2, 3, 4, 5, 6, 10, 12, 15, 20 or 30 s" in str(refused.value)


def test_intervals_become_interval_jobs_of_elapsed_time_whatever_the_app_time_zone():
    translation = translate_schedule(timedelta(minutes=15), app_timezone="Europe/Paris")
    assert (translation.cron, translation.interval_ms, translation.timezone) == (
        None, 15 * 60_000, "UTC")
    assert translation.note == "every 15 min of elapsed time"


@pytest.mark.parametrize(("value", "period_ms"), [
    (timedelta(seconds=7), 7_000), (timedelta(minutes=45), 2_700_000),
    (timedelta(days=2), 172_800_000), (1.5, 1_500),
])
def test_intervals_no_cron_can_express_translate_too(value, period_ms):
    assert translate_schedule(value, app_timezone="UTC").interval_ms == period_ms


@pytest.mark.parametrize(("value", "says"), [
    (0.5, "use a period from 1000 ms"), (timedelta(days=400), "366 days"),
    (0, "use a positive interval"),
])
def test_intervals_out_of_bounds_are_refused_with_the_bounds(value, says):
    with pytest.raises(UntranslatableSchedule, match=says):
        translate_schedule(value, app_timezone="UTC")


def test_celery_interval_schedule_objects_and_plain_numbers_translate_alike():
    for value in (schedule(run_every=timedelta(seconds=10)), timedelta(seconds=10), 10, 10.0):
        assert translate_schedule(value, app_timezone="UTC").interval_ms == 10_000


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(30, "30 s"), (90, "90 s"), (900, "15 min"), (7_200, "2 h"), (86_400, "1 day"),
     (172_800, "2 days"), (0.5, "0.5 s")],
)
def test_describe_seconds_uses_the_largest_unit_that_divides(seconds, text):
    assert describe_seconds(seconds) == text


# --------------------------------------------------------------------------------- crontab


@pytest.mark.parametrize(
    ("celery_crontab", "cron"),
    [
        (crontab(), "* * * * *"),
        (crontab(minute=30, hour=2), "30 2 * * *"),
        (crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"), "*/15 9-17 * * 1-5"),
        (crontab(minute=0, hour="0,12", day_of_month="1,15"), "0 0,12 1,15 * *"),
        (crontab(minute=0, hour=0, day_of_month=1, month_of_year="*/3"), "0 0 1 */3 *"),
        (crontab(minute="5,6,7,20", hour=3, day_of_week="sat,sun"), "5-7,20 3 * * 0,6"),
        (crontab(minute=0, hour=8, day_of_month="2-30/2"), "0 8 2-30/2 * *"),
        (crontab(minute=0, hour=8, day_of_month="*/2"), "0 8 */2 * *"),
        (crontab(minute="1-59/2", hour="*/4"), "1-59/2 */4 * * *"),
        (crontab(minute="10,25,40"), "10-40/15 * * * *"),
    ],
)
def test_crontab_becomes_the_cron_of_the_same_values(celery_crontab, cron):
    assert cron_for_crontab(celery_crontab) == cron


@pytest.mark.parametrize(
    "celery_crontab",
    [
        crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"),
        crontab(minute=0, hour=8, day_of_month="2-30/2"),
        crontab(minute=30, hour="1,13", day_of_month="1,15,31", month_of_year="1-6"),
        crontab(minute="0,20,40", hour=3, day_of_week="sat,sun"),
        crontab(minute="1-59/2", hour="*/4", day_of_week="*/2"),
    ],
)
def test_the_cron_fires_exactly_when_celery_beat_would_over_a_year(celery_crontab):
    # Celery fires on a minute whose fields are all in the crontab's expanded sets (day fields
    # ANDed); in UTC there is no DST to blur the comparison.
    start = datetime(2026, 1, 1, tzinfo=UTC)
    expected = []
    minute = start
    while minute < datetime(2027, 1, 1, tzinfo=UTC):
        if (minute.minute in celery_crontab.minute and minute.hour in celery_crontab.hour
                and minute.day in celery_crontab.day_of_month
                and minute.month in celery_crontab.month_of_year
                and minute.isoweekday() % 7 in celery_crontab.day_of_week):
            expected.append(datetime_to_ms(minute))
        minute += timedelta(minutes=1)
    fires = parse_cron(cron_for_crontab(celery_crontab), "UTC").fire_times_ms(
        datetime_to_ms(start) - 1, len(expected) + 1)
    assert fires[:-1] == expected
    assert fires[-1] >= datetime_to_ms(datetime(2027, 1, 1, tzinfo=UTC))


def test_crontab_restricting_both_day_fields_is_refused_because_cron_ors_them():
    with pytest.raises(UntranslatableSchedule) as refused:
        cron_for_crontab(crontab(minute=0, hour=8, day_of_week="mon", day_of_month="1-7"))
    message = str(refused.value)
    assert "both day_of_month (1-7) and day_of_week (1) are restricted" in message
    assert "restrict only one of them" in message


def test_crontab_keeps_the_app_time_zone():
    translation = translate_schedule(crontab(minute=30, hour=2), app_timezone="Europe/Paris")
    assert (translation.cron, translation.timezone) == ("30 2 * * *", "Europe/Paris")


# --------------------------------------------------------------------------------- other kinds


class EveryFullMoon(BaseSchedule):
    pass


def test_a_schedule_class_chrono_cannot_read_is_refused_naming_it():
    with pytest.raises(UntranslatableSchedule) as refused:
        translate_schedule(EveryFullMoon(), app_timezone="UTC")
    assert "a EveryFullMoon schedule is not one Chrono can read" in str(refused.value)
    assert "rewrite the entry with a crontab" in str(refused.value)


# --------------------------------------------------------------------------------- entries


def test_entry_carries_task_args_kwargs_and_queue():
    entry = translate_entry(
        "refresh-rates",
        {"task": "billing.refresh", "schedule": crontab(minute=0), "args": (1, "x"),
         "kwargs": {"currencies": ["EUR"]}, "options": {"queue": "billing"}},
        app_timezone="Europe/Paris",
        routed_queue="from-routes",
    )
    assert entry.task_name == "billing.refresh"
    assert (entry.cron, entry.timezone) == ("0 * * * *", "Europe/Paris")
    assert entry.args == (1, "x") and entry.kwargs == {"currencies": ["EUR"]}
    assert entry.queue == "billing"
    assert entry.ignored_options == ()


def test_entry_without_a_queue_option_takes_the_routed_queue_else_none():
    entry = {"task": "t", "schedule": 60}
    assert translate_entry("e", entry, app_timezone="UTC", routed_queue="r").queue == "r"
    assert translate_entry("e", entry, app_timezone="UTC").queue is None


def test_entry_options_chrono_does_not_apply_are_listed():
    entry = translate_entry(
        "e", {"task": "t", "schedule": 60, "options": {"queue": "q", "expires": 30,
                                                       "priority": 5}},
        app_timezone="UTC",
    )
    assert entry.ignored_options == ("expires", "priority")


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"schedule": 60}, "the entry has no 'task'"),
        ({"task": "t"}, "the entry has no 'schedule'"),
        ({"task": "t", "schedule": 60, "args": "abc"}, "'args' is a str; use a list or tuple"),
        ({"task": "t", "schedule": 60, "kwargs": [1]}, "'kwargs' is a list; use a dict"),
        ({"task": "t", "schedule": 60, "options": "q"}, "'options' is a str; use a dict"),
        ({"task": "t", "schedule": 0.2}, "use a period from 1000 ms (a second)"),
        ("t", "the entry is a str, not a dict"),
    ],
)
def test_a_malformed_entry_is_refused_saying_what_is_wrong(entry, says):
    with pytest.raises(UntranslatableSchedule) as refused:
        translate_entry("e", entry, app_timezone="UTC")
    assert says in str(refused.value)
