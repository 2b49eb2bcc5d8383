"""The whole path with real processes: API → PostgreSQL → Redis → beat → RabbitMQ → worker."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import api
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.models import Execution, ExecutionStatus, Job, JobStatus
from tests.e2e.tasks import RUNS_KEY
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


# A prefork pool of 2 makes its starts in its children and records their successes beside its
# consumer, one of 8 both (scheduler.consumer_recording.MIN_PREFORK_CHILDREN).
@pytest.mark.parametrize("pool, concurrency", [("prefork", 2), ("prefork", 8), ("threads", 16)])
def test_a_thousand_one_time_jobs_due_over_three_seconds_each_run_exactly_once(
        platform, tenant, pool, concurrency):
    with platform.together():
        platform.start_beat()
        platform.start_worker(concurrency=concurrency, pool=pool)
    start = now_ms() + 1_000
    fire_times = [ms_to_datetime(start + i * 3) for i in range(1_000)]  # 1,000 over 3 s
    jobs = api.schedule_once_many("e2e.record_run", tenant=tenant, fire_times=fire_times,
                                  queue=platform.queue)

    def all_finished() -> bool:
        return Execution.objects.filter(status=ExecutionStatus.SUCCEEDED).count() >= len(jobs)

    assert wait_for(all_finished, timeout_s=90), Execution.objects.values("status").count()
    time.sleep(1.0)  # a duplicate delivery, if any, would land now

    executions = list(Execution.objects.all())
    assert len(executions) == 1_000
    assert {e.job_id for e in executions} == {j.job_id for j in jobs}
    assert all(e.status == ExecutionStatus.SUCCEEDED for e in executions)
    runs = {k.decode(): int(v) for k, v in platform.redis.hgetall(RUNS_KEY).items()}
    assert len(runs) == 1_000
    assert set(runs.values()) == {1}, "some execution ran more than once"
    assert runs.keys() == {str(e.execution_id) for e in executions}
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 1_000
    assert all(e.started_at >= e.scheduled_for for e in executions), "a job started early"
    # Claimed and prepared ahead of time, but never published before it.
    assert all(e.dispatched_at >= e.scheduled_for for e in executions), "published early"
    assert all(e.worker_id for e in executions)
    assert platform.redis.dbsize() > 0  # the runs hash; timers themselves are all acknowledged
    from scheduler.timers import timer_store

    # Acknowledged in Redis right after the recorder's statement that completed the jobs.
    assert wait_for(lambda: timer_store().pending_count() == 0, timeout_s=5)


def test_cron_job_fires_on_consecutive_occurrences(platform, tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker()
    job = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",  # every second
                            queue=platform.queue)
    first_ms = datetime_to_ms(job.next_run_at)

    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").count() >= 4,
                    timeout_s=30)
    fired = sorted(datetime_to_ms(e.scheduled_for) for e in job.executions.all())
    assert fired[0] == first_ms
    # Each next occurrence goes straight into the beat's wheel when it is acknowledged, not at
    # the next scan of Redis (which would make it up to a scan interval late).
    # (The next occurrence may already be prepared, 100 ms ahead, and not dispatched yet.)
    lateness = sorted((e.dispatched_at - e.scheduled_for).total_seconds()
                      for e in job.executions.filter(dispatched_at__isnull=False))
    assert lateness[len(lateness) // 2] < 0.2, lateness
    assert [b - a for a, b in zip(fired, fired[1:], strict=False)] == [1_000] * (len(fired) - 1)
    runs = platform.redis.hgetall(RUNS_KEY)
    assert all(int(v) == 1 for v in runs.values())
    # The job moves on when an occurrence is recorded dispatched; the newest one may be prepared
    # (its row written 100 ms ahead) and not dispatched yet, and then it is the job's next run.
    # Read before the job, so that a dispatch recorded in between only moves the job further.
    dispatched = [datetime_to_ms(e.scheduled_for)
                  for e in job.executions.filter(dispatched_at__isnull=False)]
    job.refresh_from_db()
    assert job.status == JobStatus.ACTIVE
    assert datetime_to_ms(job.next_run_at) > max(dispatched)
    assert datetime_to_ms(job.next_run_at) >= fired[-1]


def test_job_due_in_50_ms_fires_without_waiting_for_the_next_scan(platform, tenant):
    # Scans every 20 s: only the announcement can bring this timer to the beat in time.
    with platform.together():
        platform.start_beat(lookahead_ms=30_000, scan_interval_ms=20_000, ack_deadline_ms=60_000)
        platform.start_worker()
    time.sleep(1.0)  # the beat's first scan is behind it
    job = api.schedule_once("e2e.record_run", tenant=tenant, delay=0.05, queue=platform.queue)

    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(), timeout_s=15)
    execution = job.executions.get()
    lateness = execution.dispatched_at - execution.scheduled_for
    assert timedelta(0) <= lateness < timedelta(seconds=2), lateness


def test_cancelled_job_never_runs(platform, tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker()
    keep = api.schedule_once("e2e.record_run", tenant=tenant, delay=1.5, queue=platform.queue)
    drop = api.schedule_once("e2e.record_run", tenant=tenant, delay=1.5, queue=platform.queue)
    assert api.cancel(drop.job_id, tenant=tenant, by="test") is True

    assert wait_for(lambda: keep.executions.filter(status="SUCCEEDED").exists(), timeout_s=20)
    time.sleep(1.0)
    assert not drop.executions.exists()
    drop.refresh_from_db()
    assert drop.status == JobStatus.CANCELLED and drop.cancelled_by == "test"
    assert timezone.now() > drop.cancelled_at
