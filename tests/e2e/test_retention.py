"""``chrono retention`` drops an expired day of executions while a real beat and worker run a
job every second: the day goes, today's partition and every job run stay, nothing runs twice."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import api, partitions
from scheduler.models import Execution
from tests.helpers import runs, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _report(process) -> dict:
    lines = [line for line in process.log_path.read_text().splitlines() if line.startswith("{")]
    assert lines, process.log_tail()
    return json.loads(lines[-1])


def test_an_expired_day_is_dropped_while_jobs_keep_running(platform, tenant):
    today = partitions.today_utc()
    today_start, _ = partitions.day_bounds(today)
    old_day = today - timedelta(days=10)
    partitions.create_day(old_day)
    job = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",
                            queue=platform.queue)
    old_start, _ = partitions.day_bounds(old_day)
    Execution.objects.bulk_create(
        Execution(execution_id=uuid.uuid4(), job=job, tenant=tenant, status="SUCCEEDED",
                  scheduled_for=old_start + timedelta(minutes=n)) for n in range(200))
    with platform.together():
        platform.start_beat()
        platform.start_worker()

    def succeeded_today() -> int:
        return job.executions.filter(status="SUCCEEDED", scheduled_for__gte=today_start).count()

    assert wait_for(lambda: succeeded_today() >= 2, timeout_s=30)
    reports, spans = [], []
    for n in range(3):  # the first pass drops the day; the others find nothing more to do
        started = timezone.now()
        retention = platform.group.start(f"retention-{n}", ["retention", "--json"])
        assert retention.popen.wait(timeout=120) == 0, retention.log_tail()
        spans.append((started, timezone.now()))
        reports.append(_report(retention))

    assert reports[0]["dropped"] == [partitions.partition_name(old_day)]
    assert reports[0]["failed"] == {}
    assert [r["dropped"] for r in reports[1:]] == [[], []]
    assert old_day not in partitions.existing_days()
    assert today in partitions.existing_days()
    assert not job.executions.filter(scheduled_for__lt=today_start - timedelta(days=7)).exists()

    after = succeeded_today()
    assert wait_for(lambda: succeeded_today() >= after + 3, timeout_s=30)
    # An occurrence whose previous one is still in flight is skipped (the default overlap
    # policy): that is the schedule's rule, not a failure. Nothing failed or was lost.
    ended_badly = job.executions.exclude(status__in=["SUCCEEDED", "RUNNING", "DISPATCHED",
                                                     "SCHEDULED", "SKIPPED"])
    assert not ended_badly.exists(), list(ended_badly.values("status", "reason", "error"))
    # Occurrences due while the passes ran were inserted, published and run meanwhile.
    during = job.executions.filter(scheduled_for__gte=spans[0][0],
                                   scheduled_for__lte=spans[-1][1], status="SUCCEEDED")
    assert during.count() >= 1
    ran = runs(platform.redis)
    mine = {str(e) for e in job.executions.values_list("execution_id", flat=True)}
    assert mine & set(ran)
    assert all(count == 1 for execution_id, count in ran.items() if execution_id in mine), ran
    assert all(child.popen.poll() is None for child in platform.group.children
               if not child.name.startswith("retention")), "a beat or worker died"
