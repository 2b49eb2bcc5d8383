"""Ending an attempt: the retry decision, the fencing check and its audit rows, in one statement."""

from __future__ import annotations

import random

import pytest

from scheduler import api
from scheduler.attempts import end_attempt
from scheduler.executions import start_execution
from scheduler.lifecycle import execution_id_for
from scheduler.models import Execution
from scheduler.retry import RetryPolicy
from search import audit
from search.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def running_execution(tenant):
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    execution_id = execution_id_for(str(job.job_id), 1_000)
    Execution.objects.create(execution_id=execution_id, job=job, tenant=tenant,
                             scheduled_for=job.next_run_at, status="DISPATCHED")
    started = start_execution(str(execution_id), attempt=1, worker_id="w1", lease_ttl_ms=60_000)
    assert started is not None
    return job, started


def actions_of(execution_id) -> list[str]:
    return list(AuditEvent.objects.filter(execution_id=execution_id).order_by("id")
                .values_list("action", flat=True))


def test_a_failed_attempt_with_retries_left_waits_and_writes_failed_then_retried(
    tenant, redis_client
):
    job, started = running_execution(tenant)
    outcome = end_attempt(started.execution_id, fencing_token=started.fencing_token,
                          from_status="RUNNING", attempt=1, policy=RetryPolicy(max_attempts=3),
                          error="boom", error_type="builtins.RuntimeError", actor="worker:w1",
                          rng=random.Random(1))
    assert outcome.status == "RETRY_WAIT" and outcome.attempt == 2
    assert 0 <= outcome.delay_ms <= 1_000
    assert actions_of(started.execution_id)[-2:] == [audit.EXECUTION_FAILED,
                                                     audit.EXECUTION_RETRIED]
    job.refresh_from_db()
    assert job.retry_count == 1


def test_the_last_attempt_is_dead_lettered_and_a_stale_token_is_refused(tenant, redis_client):
    _, started = running_execution(tenant)
    stale = end_attempt(started.execution_id, fencing_token=started.fencing_token - 1,
                        from_status="RUNNING", attempt=1, policy=RetryPolicy(max_attempts=1),
                        error="late", error_type="builtins.RuntimeError")
    assert stale is None
    lost = end_attempt(started.execution_id, fencing_token=started.fencing_token,
                       from_status="RUNNING", attempt=1,
                       policy=RetryPolicy(max_attempts=1, non_retryable=("ValueError",)),
                       error="bad", error_type="builtins.ValueError",
                       audit_action=audit.EXECUTION_LOST, actor="reaper")
    assert lost.status == "DEAD_LETTERED"
    execution = Execution.objects.get(pk=started.execution_id)
    assert execution.status == "DEAD_LETTERED" and "not retryable" in execution.reason
    assert actions_of(started.execution_id)[-2:] == [audit.EXECUTION_LOST,
                                                     audit.EXECUTION_DEAD_LETTERED]


def test_attempts_sent_from_a_retry_timer_are_marked_dispatched_with_their_audit_rows(tenant):
    from scheduler.attempts import load_waiting, mark_dispatched
    from scheduler.clock import datetime_to_ms, now_ms
    from scheduler.lifecycle import RetryTimer

    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    waiting = [execution_id_for(str(job.job_id), ms) for ms in (1_000, 2_000)]
    for execution_id in waiting:
        Execution.objects.create(execution_id=execution_id, job=job, tenant=tenant, attempt=2,
                                 scheduled_for=job.next_run_at, status="RETRY_WAIT")
    fire_ms = datetime_to_ms(job.next_run_at)
    # One timer with its partition key (every timer written now), one without (written
    # before the table was partitioned): both are found.
    rows = load_waiting([RetryTimer(str(waiting[0]), 2, fire_ms), RetryTimer(str(waiting[1]), 2)])
    assert len(rows) == 2 and {row.scheduled_for for row in rows} == {job.next_run_at}
    mark_dispatched(rows, at_ms=now_ms())
    assert set(Execution.objects.filter(pk__in=waiting).values_list("status", flat=True)) == {
        "DISPATCHED"}
    assert all(actions_of(e) == [audit.EXECUTION_DISPATCHED] for e in waiting)


def test_a_refused_write_is_explained_by_what_owns_the_execution_now(tenant):
    from dataclasses import replace

    from scheduler.executions import finish_execution, refusal_reason
    from scheduler.models import ExecutionStatus

    _, started = running_execution(tenant)
    stale = replace(started, fencing_token=started.fencing_token - 1)
    assert finish_execution(stale, status=ExecutionStatus.SUCCEEDED) is False
    assert refusal_reason(stale) == (
        f"fencing token {stale.fencing_token} is stale: the execution is RUNNING, attempt 1, "
        f"token {started.fencing_token}, on w1 (its lease expired and the reaper handed it on)")

    assert finish_execution(started, status=ExecutionStatus.SUCCEEDED) is True
    assert finish_execution(started, status=ExecutionStatus.FAILED) is False
    assert refusal_reason(started) == (
        f"the execution is already SUCCEEDED (attempt 1, token {started.fencing_token})")

    Execution.objects.filter(pk=started.execution_id).delete()
    assert refusal_reason(started).startswith("its execution row is gone")
