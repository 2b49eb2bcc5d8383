"""Exclusion calendars with a real beat and worker: every occurrence on an excluded day is
recorded SKIPPED with the reason ``calendar <name>``, none is published, and the job moves from
occurrence to occurrence; a job whose calendar excludes other days runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler import api
from scheduler.clock import datetime_to_ms
from scheduler.models import Calendar, ExecutionStatus
from tests.e2e.tasks import RUNS_KEY
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_real_beat_skips_the_excluded_days_occurrences_and_records_them(platform, tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker()
    today = datetime.now(UTC).date()
    # Yesterday to tomorrow in UTC: no midnight during the test leaves the range.
    Calendar.objects.create(tenant=tenant, name="these-days", ranges=[
        f"{today - timedelta(days=1)}/{today + timedelta(days=1)}"])
    Calendar.objects.create(tenant=tenant, name="far-days", dates=["2031-01-01"])
    excluded = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",
                                 queue=platform.queue, calendars=["these-days"])
    runs = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",
                             queue=platform.queue, calendars=["far-days"])
    first_ms = datetime_to_ms(excluded.next_run_at)

    assert wait_for(lambda: excluded.executions.filter(status="SKIPPED").count() >= 3
                    and runs.executions.filter(status="SUCCEEDED").count() >= 3, timeout_s=30)
    skipped = list(excluded.executions.order_by("scheduled_for"))
    assert all(e.status == ExecutionStatus.SKIPPED for e in skipped), [e.status for e in skipped]
    assert {e.reason for e in skipped} == {"calendar these-days"}
    assert all(e.dispatched_at is None for e in skipped)
    times = [datetime_to_ms(e.scheduled_for) for e in skipped]
    assert times[0] == first_ms
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == [1_000] * (len(times) - 1)

    def moved_on() -> bool:
        excluded.refresh_from_db()
        return datetime_to_ms(excluded.next_run_at) > times[-1]

    # Past each of them: a skip is recorded as its occurrence is prepared, up to the beat's
    # preparation lead before its time; the job moves on at that time.
    assert wait_for(moved_on, timeout_s=5), (excluded.next_run_at, times[-1])
    ran = {k.decode() for k in platform.redis.hkeys(RUNS_KEY)}
    assert not ran & {str(e.execution_id) for e in skipped}, "an excluded occurrence ran"
    assert {str(e.execution_id) for e in runs.executions.filter(status="SUCCEEDED")} <= ran
