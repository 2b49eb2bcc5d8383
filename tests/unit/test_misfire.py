"""Misfire planning and jitter: pure functions, no services."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.clock import datetime_to_ms
from scheduler.cron import parse_cron
from scheduler.misfire import MisfirePolicy, MisfireRule, jittered_ms, plan_occurrences

MINUTE = 60_000
EVERY_MINUTE = parse_cron("* * * * *", "UTC")
T0 = datetime_to_ms(datetime(2026, 5, 1, 12, 0, tzinfo=UTC))


def plan(policy: MisfirePolicy, *, late_by_ms: int, limit: int = 10, schedule=EVERY_MINUTE):
    return plan_occurrences(
        schedule=schedule,
        fire_at_ms=T0,
        now_ms=T0 + late_by_ms,
        rule=MisfireRule(policy, limit),
        grace_ms=MINUTE // 2,
    )


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_an_on_time_occurrence_fires_whatever_the_policy(policy):
    result = plan(policy, late_by_ms=5)
    assert result.fire_ms == [T0]
    assert result.skipped == []
    assert result.next_ms == T0 + MINUTE


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_occurrences_within_the_grace_all_fire(policy):
    # 10 s late on a per-second schedule: ten occurrences, all within the 30 s grace.
    schedule = parse_cron("* * * * * *", "UTC")
    result = plan(policy, late_by_ms=10_000, schedule=schedule)
    assert result.fire_ms == [T0 + i * 1_000 for i in range(11)]
    assert result.skipped == []
    assert result.next_ms == T0 + 11_000


def test_fire_once_fires_the_latest_late_occurrence_and_records_the_others():
    result = plan(MisfirePolicy.FIRE_ONCE, late_by_ms=5 * MINUTE + 1_000)
    # occurrences T0..T0+5min; T0+5min is 1 s late (on time), the five before are late
    assert result.fire_ms == [T0 + 4 * MINUTE, T0 + 5 * MINUTE]
    assert [ms for ms, _ in result.skipped] == [T0 + i * MINUTE for i in range(4)]
    assert all("fire_once" in reason for _, reason in result.skipped)
    assert result.next_ms == T0 + 6 * MINUTE


def test_fire_all_fires_late_occurrences_oldest_first_up_to_its_limit():
    result = plan(MisfirePolicy.FIRE_ALL, late_by_ms=10 * MINUTE + 40_000, limit=3)
    assert result.fire_ms == [T0, T0 + MINUTE, T0 + 2 * MINUTE]
    assert [ms for ms, _ in result.skipped] == [T0 + i * MINUTE for i in range(3, 11)]
    assert all("limit of 3" in reason for _, reason in result.skipped)


def test_skip_fires_no_late_occurrence_and_records_every_one():
    result = plan(MisfirePolicy.SKIP, late_by_ms=3 * MINUTE + 40_000)
    assert result.fire_ms == []
    assert [ms for ms, _ in result.skipped] == [T0 + i * MINUTE for i in range(4)]
    assert result.next_ms == T0 + 4 * MINUTE


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_a_late_one_time_job_follows_the_policy(policy):
    result = plan_occurrences(schedule=None, fire_at_ms=T0, now_ms=T0 + 5 * MINUTE,
                              rule=MisfireRule(policy), grace_ms=MINUTE)
    assert result.next_ms is None
    if policy is MisfirePolicy.SKIP:
        assert result.fire_ms == [] and [ms for ms, _ in result.skipped] == [T0]
    else:
        assert result.fire_ms == [T0] and result.skipped == []


def test_fire_all_limit_must_be_positive():
    with pytest.raises(ValueError):
        MisfireRule(MisfirePolicy.FIRE_ALL, 0)


def test_jitter_is_deterministic_per_job_and_occurrence_and_within_its_spread():
    spread = 30_000
    values = [jittered_ms("job-a", T0 + i * MINUTE, spread) - (T0 + i * MINUTE)
              for i in range(500)]
    assert all(0 <= v < spread for v in values)
    assert len(set(values)) > 400  # spread out, not one offset
    assert jittered_ms("job-a", T0, spread) == jittered_ms("job-a", T0, spread)
    assert jittered_ms("job-a", T0, spread) != jittered_ms("job-b", T0, spread)
    assert jittered_ms("job-a", T0, 0) == T0
