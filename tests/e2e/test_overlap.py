"""Overlap policies of cron jobs whose runs outlast their period, on real processes.

A job fires every second and each run sleeps 2.5 s; two worker slots make overlap possible.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import api
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.lifecycle import execution_id_for
from scheduler.models import Execution, ExecutionStatus, Job, OverlapPolicy
from scheduler.timers import timer_store
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

RUN_S = 2.5


def run_cron(platform, tenant, overlap: OverlapPolicy, seconds: float = 7.0):
    with platform.together():
        platform.start_beat()
        platform.start_worker(concurrency=2, execution_lease_ttl_ms=10_000)
    job = api.schedule_cron("e2e.sleep", tenant=tenant, cron="* * * * * *",
                            kwargs={"seconds": RUN_S}, overlap=overlap, queue=platform.queue)
    time.sleep(seconds)
    api.pause(job.job_id, tenant=tenant)
    assert wait_for(lambda: not job.executions.filter(
        status__in=["SCHEDULED", "DISPATCHED", "RUNNING"]).exists(), timeout_s=20)
    return list(job.executions.order_by("scheduled_for"))


def ran(executions):
    return [e for e in executions if e.started_at is not None]


def overlapping_pairs(executions) -> int:
    runs = sorted((e.started_at, e.finished_at) for e in ran(executions))
    return sum(1 for (_, end), (start, _) in zip(runs, runs[1:], strict=False) if start < end)


def test_allow_lets_runs_overlap(platform, tenant):
    executions = run_cron(platform, tenant, OverlapPolicy.ALLOW)
    assert overlapping_pairs(executions) >= 2
    assert not [e for e in executions if e.status == ExecutionStatus.SKIPPED]


def test_skip_records_occurrences_that_fire_while_the_previous_runs(platform, tenant):
    executions = run_cron(platform, tenant, OverlapPolicy.SKIP)
    assert overlapping_pairs(executions) == 0
    skipped = [e for e in executions if e.status == ExecutionStatus.SKIPPED]
    assert len(skipped) >= 2
    assert all("overlap policy skip" in e.reason for e in skipped)
    assert len(ran(executions)) >= 2


def test_buffer_one_starts_the_waiting_occurrence_when_the_previous_ends(platform, tenant):
    executions = run_cron(platform, tenant, OverlapPolicy.BUFFER_ONE)
    assert overlapping_pairs(executions) == 0
    runs = sorted((e.started_at, e.finished_at) for e in ran(executions))
    assert len(runs) >= 2
    gaps = [(start - end).total_seconds() for (_, end), (start, _) in
            zip(runs, runs[1:], strict=False)]
    assert all(gap < 2.0 for gap in gaps), gaps  # the buffered one went as soon as it could


def test_cancel_previous_stops_the_running_occurrence_for_the_new_one(platform, tenant):
    executions = run_cron(platform, tenant, OverlapPolicy.CANCEL_PREVIOUS, seconds=5)
    cancelled = [e for e in executions if e.status == ExecutionStatus.CANCELLED]
    assert len(cancelled) >= 2
    assert all("cancel_previous" in e.reason for e in cancelled)
    assert overlapping_pairs(executions) <= len(executions)  # stops take a moment, not a run


@pytest.mark.parametrize("overlap, previous_status", [
    (OverlapPolicy.SKIP, ExecutionStatus.DISPATCHED),
    (OverlapPolicy.BUFFER_ONE, ExecutionStatus.RUNNING),
])
def test_a_late_occurrence_meeting_an_overlap_policy_does_not_wedge_the_beat(
        platform, tenant, overlap, previous_status):
    """After an outage past the misfire grace, fire_once's late occurrence met the overlap
    policy too: both wrote a row for it in one statement, which PostgreSQL refused, so the claim
    batch (and every job in it) failed again at each redelivery. A regression test."""
    late_ms = now_ms() - 5 * 60_000
    job = api.schedule_cron("chrono.noop", tenant=tenant, cron="* * * * * *", overlap=overlap,
                            queue=platform.queue)
    Job.objects.filter(pk=job.pk).update(next_run_at=ms_to_datetime(late_ms))
    Execution.objects.create(
        execution_id=execution_id_for(str(job.job_id), late_ms - 1_000), job=job, tenant=tenant,
        scheduled_for=ms_to_datetime(late_ms - 1_000), status=previous_status,
        worker_id="gone@host" if previous_status == ExecutionStatus.RUNNING else None,
        lease_expires_at=ms_to_datetime(now_ms() + 600_000))
    timer_store().add([(str(job.job_id), late_ms)])
    bystander = api.schedule_once("chrono.noop", tenant=tenant, delay=timedelta(milliseconds=300),
                                  queue=platform.queue)
    beat = platform.start_beat()

    assert wait_for(lambda: Job.objects.get(pk=job.pk).next_run_at > timezone.now(),
                    timeout_s=20), beat.log_tail()
    assert wait_for(lambda: bystander.executions.filter(dispatched_at__isnull=False).exists(),
                    timeout_s=20), beat.log_tail()
    assert "beat iteration failed" not in beat.log_tail(200)
    late = job.executions.exclude(scheduled_for=ms_to_datetime(late_ms - 1_000))
    # Nothing of the late occurrences was published while the previous one is active.
    assert not late.filter(dispatched_at__isnull=False).exists()
    if overlap == OverlapPolicy.SKIP:
        assert late.filter(status=ExecutionStatus.SKIPPED, reason__contains="overlap").exists()
    # Each occurrence has one row at most, and none is left SCHEDULED without being published.
    assert not late.filter(status=ExecutionStatus.SCHEDULED).exists()
