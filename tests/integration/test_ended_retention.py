"""The retention pass deletes jobs that ended and workflow runs that finished before its cutoff,
once nothing of theirs is left in the days it keeps, workers not heard from since, the
dashboard's old rollups and expired Idempotency-Key records, against real PostgreSQL (and the
reaper's series)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from chronocore.config import get_config
from chronocore.models import IdempotencyRecord
from reaper import retention as worker_retention
from reaper.metrics import ReaperCollector
from reaper.models import Worker
from reaper.reaper import RETENTION_RETRY_MS, Reaper
from scheduler import api, ended_jobs, job_counts, partitions, retention, rollups
from scheduler.clock import now_ms
from scheduler.dispatch import Publisher
from scheduler.models import Execution, ExecutionRollup, ExecutionStatus, Job
from scheduler.retention import run_retention
from scheduler.timers import timer_store
from tests.integration.workflow_support import run_step_job
from workflows import engine
from workflows import retention as run_retention_of_workflows
from workflows.models import WorkflowRun, WorkflowTask
from workflows.runs import StepRef

pytestmark = pytest.mark.django_db

RETENTION_DAYS = 7
ONE_STEP = {"name": "tidy", "steps": [{"key": "only", "task": "tests.noop"}]}


def config(**values):
    return dataclasses.replace(get_config(), execution_retention_days=RETENTION_DAYS, **values)


def ended_days_ago(job: Job, days: float, status: str = "COMPLETED") -> Job:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE chrono_job SET status = %s, next_run_at = NULL, updated_at = %s "
                       "WHERE job_id = %s", [status, timezone.now() - timedelta(days=days),
                                              job.job_id])
    return job


def once(tenant, **kwargs) -> Job:
    return api.schedule_once("tests.noop", tenant=tenant, delay=3600, **kwargs)


def watched(job: Job) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO chrono_job_watch (job_id, watcher) VALUES (%s, 'test')",
                       [job.job_id])


def watches(job: Job) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM chrono_job_watch WHERE job_id = %s", [job.job_id])
        return cursor.fetchone()[0]


def exists(job: Job) -> bool:
    return Job.objects.filter(job_id=job.job_id).exists()


def test_jobs_that_ended_before_the_cutoff_go_with_their_watches_and_the_rest_stay(tenant):
    completed = ended_days_ago(once(tenant), 10)
    cancelled = ended_days_ago(once(tenant), 9, status="CANCELLED")
    recent = ended_days_ago(once(tenant), 2)
    active = once(tenant)
    with connection.cursor() as cursor:  # pending for a long time: not ended
        cursor.execute("UPDATE chrono_job SET updated_at = %s WHERE job_id = %s",
                       [timezone.now() - timedelta(days=30), active.job_id])
    # An ended job whose execution is still retrying in a day the pass keeps.
    retrying = ended_days_ago(once(tenant), 10)
    start, _ = partitions.day_bounds(partitions.today_utc())
    Execution.objects.create(execution_id=uuid.uuid4(), job=retrying, tenant=tenant,
                             scheduled_for=start, status=ExecutionStatus.RETRY_WAIT)
    watched(completed)
    before = job_counts.jobs_by_status(tenant.tenant_id)

    report = run_retention(config())

    assert not exists(completed) and not exists(cancelled)
    assert exists(recent) and exists(active) and exists(retrying)
    assert watches(completed) == 0
    assert report.deleted[retention.ENDED_JOBS] == 2 and not report.more_left
    assert "delete 2 ended jobs" in report.lines()
    after = job_counts.jobs_by_status(tenant.tenant_id)
    assert after.get("COMPLETED", 0) == before["COMPLETED"] - 1
    assert after.get("CANCELLED", 0) == before["CANCELLED"] - 1
    assert run_retention(config()).deleted[retention.ENDED_JOBS] == 0


def test_a_dry_run_counts_them_and_deletes_nothing(tenant):
    old = ended_days_ago(once(tenant), 10)

    report = run_retention(config(), dry_run=True)

    assert report.deleted[retention.ENDED_JOBS] == 1
    assert "would delete 1 ended jobs" in report.lines()
    assert exists(old)


def test_a_deleted_jobs_idempotency_key_makes_a_new_job(tenant):
    old = ended_days_ago(once(tenant, idempotency_key="nightly-2026-11-20"), 10)
    assert once(tenant, idempotency_key="nightly-2026-11-20").job_id == old.job_id

    run_retention(config())

    again = once(tenant, idempotency_key="nightly-2026-11-20")
    assert again.job_id != old.job_id and again.status == "ACTIVE"


def test_deletions_stop_when_their_time_is_spent_and_say_that_some_are_left(tenant,
                                                                            monkeypatch):
    jobs = [ended_days_ago(once(tenant), 10) for _ in range(5)]
    assert ended_jobs.delete_expired(timezone.now() - timedelta(days=RETENTION_DAYS), batch=2,
                                      should_stop=lambda: True) == (2, True)
    assert sum(exists(job) for job in jobs) == 3

    monkeypatch.setattr(retention, "DELETE_BUDGET_S", 0.0)
    report = run_retention(config())

    assert report.more_left
    assert "more ended rows are left for the next pass" in report.lines()
    assert sum(exists(job) for job in jobs) == 3
    monkeypatch.undo()
    assert run_retention(config()).deleted[retention.ENDED_JOBS] == 3


def finished_run(tenant, *, days_ago: float):
    """A run of ONE_STEP carried to SUCCEEDED, its step's execution gone with its day, its end
    ``days_ago``."""
    run = engine.start_run("tidy", tenant=tenant)
    run_step_job(run, StepRef("only"), status=ExecutionStatus.SUCCEEDED)
    engine.apply_pending_ends()
    run.refresh_from_db()
    assert run.status == "SUCCEEDED"
    step_job = Job.objects.get(job_id=engine.task_job_id(run.run_id, StepRef("only"), 1))
    Execution.objects.filter(job_id=step_job.job_id).delete()  # its day dropped
    ended_days_ago(step_job, days_ago)
    WorkflowRun.objects.filter(run_id=run.run_id).update(
        finished_at=timezone.now() - timedelta(days=days_ago))
    return run, step_job


@pytest.mark.django_db(transaction=True)
def test_finished_runs_go_with_their_step_rows_unless_something_of_theirs_is_left(
        tenant, redis_client):
    engine.define(tenant, ONE_STEP)
    old, old_step = finished_run(tenant, days_ago=10)
    recent, recent_step = finished_run(tenant, days_ago=2)
    # A finished run with a child run that has not finished (an abandoned sub-workflow).
    parent, _ = finished_run(tenant, days_ago=10)
    child = engine.start_run("tidy", tenant=tenant)
    WorkflowRun.objects.filter(run_id=child.run_id).update(parent_run_id=parent.run_id)
    # A finished run whose step's execution is still in a day the pass keeps.
    kept, kept_step = finished_run(tenant, days_ago=10)
    start, _ = partitions.day_bounds(partitions.today_utc())
    Execution.objects.create(execution_id=uuid.uuid4(), job=kept_step, tenant=tenant,
                             scheduled_for=start, status=ExecutionStatus.RUNNING)
    running = engine.start_run("tidy", tenant=tenant)

    assert run_retention_of_workflows.count_expired(
        timezone.now() - timedelta(days=RETENTION_DAYS)) == 1
    report = run_retention(config())

    assert report.deleted[run_retention_of_workflows.WHAT] == 1
    assert "delete 1 finished workflow runs" in report.lines()
    assert not WorkflowRun.objects.filter(run_id=old.run_id).exists()
    assert not WorkflowTask.objects.filter(run_id=old.run_id).exists()
    assert not exists(old_step)  # the jobs' step: ended, nothing left
    left = set(WorkflowRun.objects.values_list("run_id", flat=True))
    assert {recent.run_id, parent.run_id, child.run_id, kept.run_id, running.run_id} <= left
    assert WorkflowTask.objects.filter(run_id=kept.run_id).exists()
    assert exists(recent_step) and exists(kept_step)


def test_the_reaper_counts_what_its_passes_deleted_and_comes_back_soon_when_some_is_left(
        tenant, monkeypatch):
    for _ in range(3):
        ended_days_ago(once(tenant), 10)
    reaper = Reaper(config=config(), publisher=Publisher(get_config().broker_url),
                    store=timer_store())
    try:
        reaper.retention_pass()
        series = {(sample.name, sample.labels.get("what")): sample.value
                  for family in ReaperCollector(reaper).collect() for sample in family.samples}
        assert series[("chrono_reaper_retention_deleted_total", "ended_jobs")] == 3
        assert reaper._next_retention_ms > now_ms() + RETENTION_RETRY_MS

        ended_days_ago(once(tenant), 10)
        monkeypatch.setattr(retention, "DELETE_BUDGET_S", 0.0)
        reaper.retention_pass()
        assert reaper._next_retention_ms <= now_ms() + RETENTION_RETRY_MS
    finally:
        reaper.publisher.close()
        reaper.inspector.close()


def test_workers_not_heard_from_since_the_cutoff_go_and_the_others_stay():
    now = timezone.now()
    rows = {name: Worker.objects.create(worker_id=name, queue_name="chrono",
                                        last_heartbeat_at=now - timedelta(days=days),
                                        is_healthy=healthy,
                                        stopped_at=now - timedelta(days=days) if stopped else None)
            for name, days, healthy, stopped in (("celery@pod-old-stopped", 10, False, True),
                                                 ("celery@pod-old-lost", 9, False, False),
                                                 ("celery@pod-recent-stopped", 1, False, True),
                                                 ("celery@pod-up", 0, True, False))}

    assert run_retention(config(), dry_run=True).deleted[worker_retention.WHAT] == 2
    assert Worker.objects.count() == len(rows)
    report = run_retention(config())

    assert report.deleted[worker_retention.WHAT] == 2
    assert "delete 2 workers gone" in report.lines()
    assert set(Worker.objects.values_list("worker_id", flat=True)) == {
        "celery@pod-recent-stopped", "celery@pod-up"}


def test_dashboard_rollups_older_than_their_retention_go_and_the_last_hours_stay(tenant):
    now = timezone.now().replace(second=0, microsecond=0)
    old, recent = (ExecutionRollup.objects.create(
        minute=now - age, tenant_id=tenant.tenant_id, task="tests.noop", dispatched=1,
        dispatch_lateness=[0] * rollups.BUCKETS, start_lateness=[0] * rollups.BUCKETS,
        duration=[0] * rollups.BUCKETS)
        for age in (timedelta(hours=49), timedelta(hours=1)))

    assert run_retention(config(), dry_run=True).deleted[retention.ROLLUP_ROWS] >= 1
    assert ExecutionRollup.objects.filter(pk=old.pk).exists()
    report = run_retention(config(rollup_retention_hours=48))

    assert report.deleted[retention.ROLLUP_ROWS] >= 1
    assert not ExecutionRollup.objects.filter(pk=old.pk).exists()
    assert ExecutionRollup.objects.filter(pk=recent.pk).exists()


def test_idempotency_records_past_their_ttl_go_and_fresh_ones_stay(tenant):
    now = timezone.now()
    old, fresh = (IdempotencyRecord.objects.create(
        tenant=tenant, key=key, request_fingerprint="f" * 64, response_status=201,
        response_body={"job_id": key}, created_at=now - age)
        for key, age in (("old", timedelta(hours=25)), ("fresh", timedelta(hours=1))))

    report = run_retention(config(idempotency_ttl_s=24 * 3600))

    assert report.deleted[retention.IDEMPOTENCY_RECORDS] >= 1
    assert not IdempotencyRecord.objects.filter(pk=old.pk).exists()
    assert IdempotencyRecord.objects.filter(pk=fresh.pk).exists()
