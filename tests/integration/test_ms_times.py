"""Epoch-millisecond arrays (prepared.ms_array) turned into times in a statement
(prepared.MS_TIME) give exactly the datetime ms_to_datetime gives, as the hot statements need:
their rows are matched on those times (a job's next_run_at, an execution's partition key)."""

from __future__ import annotations

import pytest

from scheduler import prepared
from scheduler.clock import datetime_to_ms, ms_to_datetime

pytestmark = pytest.mark.django_db

TIMES_MS = [0, 1, 999, 1_764_604_800_000, 1_764_604_800_001, 1_764_604_800_999,
            4_102_444_799_999, 253_402_300_799_999, -1, -86_400_001]


def test_ms_times_equal_their_datetimes_exactly():
    with prepared.cursor() as cursor:
        cursor.execute(
            f"SELECT ms, {prepared.MS_TIME.format('ms')}, "
            f"{prepared.MS_TIME.format('ms')} = t "
            "FROM unnest(%s::bigint[], %s::timestamptz[]) AS x(ms, t)",
            [prepared.ms_array(TIMES_MS), prepared.array(ms_to_datetime(ms) for ms in TIMES_MS)],
            rows=len(TIMES_MS))
        rows = cursor.fetchall()
    assert [(ms, ms_to_datetime(ms), True) for ms in TIMES_MS] == rows
    assert [datetime_to_ms(t) for _, t, _ in rows] == TIMES_MS


def test_a_missing_time_is_null():
    assert prepared.ms_array([5, None]) == "{5,NULL}"
    with prepared.cursor() as cursor:
        cursor.execute(f"SELECT {prepared.MS_TIME.format('ms')} FROM unnest(%s::bigint[]) ms",
                       [prepared.ms_array([None])], rows=1)
        assert cursor.fetchall() == [(None,)]
