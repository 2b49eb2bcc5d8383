"""Specification of scheduler.intervals: every N of elapsed time from an anchor, unmoved by
daylight saving, with the misfire policies and jitter of cron jobs."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from scheduler.intervals import IntervalSchedule, describe_period, period_problem
from scheduler.misfire import (
    MisfirePolicy,
    MisfireRule,
    jitter_room_ms,
    jittered_ms,
    jittered_occurrence_ms,
    plan_occurrences,
)

NEW_YORK = ZoneInfo("America/New_York")
HOUR_MS = 3_600_000


def at_ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def local(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, NEW_YORK).isoformat()


def test_occurrences_are_the_anchor_and_every_period_after_it() -> None:
    schedule = IntervalSchedule(45 * 60_000, anchor_ms=1_000_000)
    assert schedule.next_fire_ms(0) == 1_000_000
    assert schedule.next_fire_ms(1_000_000) == 1_000_000 + 2_700_000
    assert schedule.fire_times_ms(1_000_001, 3) == [
        1_000_000 + 2_700_000 * k for k in (1, 2, 3)]


@pytest.mark.parametrize(("anchor", "period_ms", "count"), [
    ("2026-03-07T12:00:00-05:00", 6 * HOUR_MS, 8),   # spring forward, 8 March 02:00
    ("2026-10-31T12:00:00-04:00", 6 * HOUR_MS, 8),   # fall back, 1 November 02:00
    ("2026-03-06T09:00:00-05:00", 48 * HOUR_MS, 3),  # every 2 days across spring
    ("2026-10-30T09:00:00-04:00", 48 * HOUR_MS, 3),  # and across fall
])
def test_dst_transitions_do_not_change_the_elapsed_period(anchor, period_ms, count) -> None:
    schedule = IntervalSchedule(period_ms, anchor_ms=at_ms(anchor))
    times = schedule.fire_times_ms(at_ms(anchor) - 1, count)
    assert {later - earlier for earlier, later in pairwise(times)} == {period_ms}


def test_every_two_days_moves_its_local_hour_when_the_clocks_do() -> None:
    schedule = IntervalSchedule(48 * HOUR_MS, anchor_ms=at_ms("2026-03-06T09:00:00-05:00"))
    assert [local(ms) for ms in schedule.fire_times_ms(at_ms("2026-03-06T08:00:00-05:00"), 3)] \
        == ["2026-03-06T09:00:00-05:00", "2026-03-08T10:00:00-04:00",
            "2026-03-10T10:00:00-04:00"]


def test_misfire_policies_apply_to_intervals_as_to_cron() -> None:
    schedule = IntervalSchedule(60_000, anchor_ms=0)
    plan = plan_occurrences(schedule=schedule, fire_at_ms=60_000, now_ms=330_000,
                            rule=MisfireRule(MisfirePolicy.FIRE_ONCE), grace_ms=1_000)
    assert plan.fire_ms == [300_000]
    assert [ms for ms, _ in plan.skipped] == [60_000, 120_000, 180_000, 240_000]
    assert plan.next_ms == 360_000
    plan = plan_occurrences(schedule=schedule, fire_at_ms=60_000, now_ms=330_000,
                            rule=MisfireRule(MisfirePolicy.FIRE_ALL, 2), grace_ms=1_000)
    assert plan.fire_ms == [60_000, 120_000]


def test_jitter_is_bounded_by_the_period_and_found_again() -> None:
    schedule = IntervalSchedule(60_000, anchor_ms=0)
    assert jitter_room_ms(schedule, 0) == 60_000
    pending = jittered_ms("job", 120_000, 5_000)
    assert 120_000 <= pending < 125_000
    assert jittered_occurrence_ms("job", schedule, pending, 5_000) == 120_000


@pytest.mark.parametrize(("period", "says"), [
    (999, "from 1000 ms"), (367 * 86_400_000, "366 days"), (1.5, "whole number"),
    (True, "whole number"),
])
def test_bad_periods_say_what_to_use(period, says) -> None:
    assert says in period_problem(period)
    with pytest.raises(ValueError):
        IntervalSchedule(period, anchor_ms=0)


def test_periods_are_described_in_their_largest_unit() -> None:
    assert [describe_period(ms) for ms in (7_000, 2_700_000, 172_800_000, 1_500, 60_000)] == [
        "7 seconds", "45 minutes", "2 days", "1500 ms", "1 minute"]
    assert IntervalSchedule(timedelta(hours=2) // timedelta(milliseconds=1), 0).expression == \
        "every 2 hours"


def test_the_beat_plans_a_hashed_cron_with_its_job_id_and_an_interval_with_its_period() -> None:
    from scheduler.beat import planned_schedule
    from scheduler.cron import parse_cron
    from scheduler.occurrences import DueJob
    from scheduler.retry import RetryPolicy

    def due(**fields) -> DueJob:
        return DueJob(**{
            "job_id": "0b4f2c1e-0000-4000-8000-000000000001", "tenant_id": "t",
            "job_type": "x", "args_json": "[]", "kwargs_json": "{}", "queue": "q",
            "cron_expression": None, "timezone": "UTC", "status": "ACTIVE", "next_run_ms": 0,
            "misfire": MisfireRule(), "jitter_ms": 0, "retry": RetryPolicy(),
            "soft_timeout_ms": None, "hard_timeout_ms": None, "overlap_policy": "skip",
            "idempotency_key": None} | fields)

    hashed = planned_schedule(due(cron_expression="H H * * *"))
    expected = parse_cron("H H * * *", "UTC", "0b4f2c1e-0000-4000-8000-000000000001")
    assert hashed.next_fire_ms(0) == expected.next_fire_ms(0)
    assert planned_schedule(due(interval_ms=7_000, anchor_ms=3)) == IntervalSchedule(7_000, 3)
    assert planned_schedule(due()) is None
