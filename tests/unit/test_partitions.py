"""The pure rules of the executions table's daily partitions: names, days ahead, expired days."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from scheduler.partitions import (
    day_bounds,
    day_of,
    days_to_create,
    expired_days,
    partition_name,
)

TODAY = date(2026, 12, 1)


def test_a_days_partition_is_named_by_its_utc_date_and_read_back():
    assert partition_name(date(2026, 3, 9)) == "chrono_execution_p20260309"
    assert day_of("chrono_execution_p20260309") == date(2026, 3, 9)
    assert day_of("chrono_execution_default") is None
    assert day_of("chrono_execution_p2026030") is None
    assert day_of("chrono_execution_p20260309_old") is None


def test_a_day_spans_midnight_to_midnight_utc():
    assert day_bounds(date(2026, 3, 29)) == (datetime(2026, 3, 29, tzinfo=UTC),
                                              datetime(2026, 3, 30, tzinfo=UTC))


def test_the_days_ahead_are_today_and_the_next_ones_missing():
    existing = {date(2026, 12, 1), date(2026, 12, 3)}
    assert days_to_create(existing, today=TODAY, ahead_days=3) == [
        date(2026, 12, 2), date(2026, 12, 4)]
    assert days_to_create(set(), today=TODAY, ahead_days=1) == [TODAY, date(2026, 12, 2)]


def test_only_days_older_than_the_retention_expire_and_never_today():
    existing = {date(2026, 11, d) for d in range(20, 31)} | {TODAY, date(2026, 12, 2)}
    # Seven days kept before today: 24 to 30 November; 20 to 23 November expire.
    assert expired_days(existing, today=TODAY, retention_days=7) == [
        date(2026, 11, 20), date(2026, 11, 21), date(2026, 11, 22), date(2026, 11, 23)]
    assert TODAY not in expired_days(existing, today=TODAY, retention_days=1)
    assert date(2026, 11, 30) not in expired_days(existing, today=TODAY, retention_days=1)


def test_a_retention_under_one_day_is_refused():
    with pytest.raises(ValueError, match="retention_days must be at least 1"):
        expired_days({TODAY}, today=TODAY, retention_days=0)
