"""Every kind of state change leaves its document in the audit data stream of the real engine.

Each test makes changes through the code the platform runs (the Python API, the beat's batch
statements, the worker's start and finish, the heartbeat thread's upsert), ships the outbox with
the real indexer and reads the documents back from OpenSearch.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import transaction

from scheduler import api, occurrences
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.executions import finish_execution, start_execution
from scheduler.heartbeats import beat_heart
from scheduler.lifecycle import execution_id_for
from scheduler.models import Execution, ExecutionStatus
from search import audit
from search.models import AuditEvent
from tests.integration.audit_support import actions, documents, ship_all

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = pytest.mark.django_db


def dispatch(job) -> str:
    """What the beat does for one due occurrence of ``job``: insert, publish, record."""
    fire_ms = datetime_to_ms(job.next_run_at)
    due = occurrences.load_and_insert([(str(job.job_id), fire_ms)])[str(job.job_id)]
    execution_id = execution_id_for(str(job.job_id), fire_ms)
    next_ms = None if due.schedule is None else due.schedule.next_fire_ms(fire_ms)
    confirmed_ms = now_ms()
    occurrences.record_dispatched([(execution_id, fire_ms, confirmed_ms)],
                                  advances=[occurrences.JobAdvance(
                                      str(job.job_id), fire_ms, next_ms, confirmed_ms)])
    return str(execution_id)


def test_each_change_of_a_job_writes_one_document_with_its_actor(
    tenant, indexer, search_client, audit_stream
):
    job = api.schedule_cron("reports.daily", tenant=tenant, cron="0 6 * * *", by="user:alice")
    api.reschedule(job.job_id, tenant=tenant, cron="30 6 * * *", by="user:alice")
    api.pause(job.job_id, tenant=tenant, by="api-key:0123abcd4567")
    api.resume(job.job_id, tenant=tenant, by="api-key:0123abcd4567")
    api.trigger(job.job_id, tenant=tenant, by="user:bob")
    api.cancel(job.job_id, tenant=tenant, by="user:carol")
    api.delete(job.job_id, tenant=tenant, by="user:dave")
    ship_all(indexer)

    docs = documents(search_client, audit_stream, chrono__job_id=job.job_id)
    assert actions(docs) == [
        "job.created", "job.edited", "job.paused", "job.resumed", "job.triggered",
        "job.cancelled", "job.deleted",
    ]
    assert [d["chrono"]["actor"] for d in docs] == [
        "user:alice", "user:alice", "api-key:0123abcd4567", "api-key:0123abcd4567",
        "user:bob", "user:carol", "user:dave",
    ]
    assert {d["chrono"]["tenant_id"] for d in docs} == {str(tenant.tenant_id)}
    assert {d["event"]["outcome"] for d in docs} == {"success"}
    created, edited = docs[0], docs[1]
    assert created["chrono"]["job_type"] == "reports.daily"
    assert created["chrono"]["cron_expression"] == "0 6 * * *"
    assert edited["chrono"]["cron_expression"] == "30 6 * * *"
    assert created["message"] == f"Job reports.daily ({job.job_id}) created by user:alice"
    assert created["labels"]["tenant"] == tenant.slug
    assert created["event"]["category"] == ["configuration"]
    assert created["event"]["type"] == ["creation"]
    assert created["_id"] == created["event"]["id"] == str(created["event"]["sequence"])


def test_an_execution_run_writes_dispatched_started_and_succeeded_with_its_duration(
    tenant, indexer, search_client, audit_stream
):
    job = api.schedule_once("billing.charge", tenant=tenant, delay=0)
    execution_id = dispatch(job)
    started = start_execution(execution_id, attempt=1, worker_id="w1@host", lease_ttl_ms=60_000,
                              at_ms=now_ms())
    assert finish_execution(started, status=ExecutionStatus.SUCCEEDED, result={"ok": 1},
                            at_ms=now_ms() + 1_500)
    ship_all(indexer)

    docs = documents(search_client, audit_stream, chrono__job_id=job.job_id)
    assert actions(docs) == [
        "job.created", "execution.dispatched", "job.completed", "execution.started",
        "execution.succeeded",
    ]
    dispatched, completed, started_doc, succeeded = docs[1:]
    assert dispatched["chrono"]["execution_id"] == execution_id
    assert dispatched["chrono"]["actor"] == "beat"
    assert dispatched["chrono"]["lateness_ms"] >= 0
    assert dispatched["chrono"]["job_type"] == "billing.charge"  # joined in by the indexer
    assert completed["chrono"]["actor"] == "beat"
    assert started_doc["chrono"]["actor"] == "worker:w1@host"
    assert started_doc["chrono"]["worker_id"] == "w1@host"
    assert started_doc["chrono"]["attempt"] == 1
    assert succeeded["event"]["outcome"] == "success"
    assert 1_400_000_000 <= succeeded["event"]["duration"] <= 1_600_000_000  # ns
    assert succeeded["event"]["type"] == ["end"]


def test_a_failed_execution_carries_the_error_type_message_and_stack_trace(
    tenant, indexer, search_client, audit_stream
):
    job = api.schedule_once("billing.charge", tenant=tenant, delay=0)
    execution_id = dispatch(job)
    started = start_execution(execution_id, attempt=1, worker_id="w1", lease_ttl_ms=60_000)
    error = ('Traceback (most recent call last):\n  File "tasks.py", line 3, in charge\n'
             "billing.errors.CardDeclined: card 4242 declined\n")
    assert finish_execution(started, status=ExecutionStatus.FAILED, error=error, exit_code=1)
    ship_all(indexer)

    (failed,) = documents(search_client, audit_stream, event__action="execution.failed",
                          chrono__execution_id=execution_id)
    assert failed["event"]["outcome"] == "failure"
    assert failed["log"]["level"] == "error"
    assert failed["error"]["type"] == "billing.errors.CardDeclined"
    assert failed["error"]["message"] == "card 4242 declined"
    assert failed["error"]["stack_trace"].startswith("Traceback")
    assert failed["chrono"]["exit_code"] == 1
    assert "CardDeclined: card 4242 declined" in failed["message"]


def test_a_second_delivery_that_may_not_start_writes_nothing(tenant, indexer):
    job = api.schedule_once("billing.charge", tenant=tenant, delay=0)
    execution_id = dispatch(job)
    started = start_execution(execution_id, attempt=1, worker_id="w1", lease_ttl_ms=60_000)
    assert start_execution(execution_id, attempt=1, worker_id="w2", lease_ttl_ms=60_000) is None
    stale = type(started)(execution_id=execution_id, fencing_token=0, attempt=1)
    assert not finish_execution(stale, status=ExecutionStatus.SUCCEEDED)  # fenced
    assert not api.pause(job.job_id, tenant=tenant)  # COMPLETED: nothing to pause
    events = AuditEvent.objects.filter(execution_id=execution_id)
    assert list(events.values_list("action", flat=True)) == [
        "execution.dispatched", "execution.started",
    ]
    assert not AuditEvent.objects.filter(job_id=job.job_id, action="job.paused").exists()


def test_occurrences_the_misfire_policy_did_not_fire_are_missed_and_other_skips_skipped(
    tenant, indexer, search_client, audit_stream
):
    job = api.schedule_cron("reports.hourly", tenant=tenant, cron="0 * * * *")
    due = occurrences.load_and_insert([(str(job.job_id), datetime_to_ms(job.next_run_at))])
    due_job = due[str(job.job_id)]
    hour_ms = 3_600_000
    base = datetime_to_ms(job.next_run_at) - 10 * hour_ms
    planned = occurrences.PlannedOccurrence
    occurrences.record_misfires([
        planned(due_job, base, "missed (misfire policy skip)"),
        planned(due_job, base + hour_ms, "overlap: the previous run was still running"),
        planned(due_job, base + 2 * hour_ms, None),  # fires: not a skip
    ])
    occurrences.record_misfires([planned(due_job, base, "missed (misfire policy skip)")])  # again
    ship_all(indexer)

    docs = documents(search_client, audit_stream, chrono__job_id=job.job_id)
    assert actions(docs) == ["job.created", "execution.missed", "execution.skipped"]
    missed, skipped = docs[1:]
    assert missed["event"]["reason"] == "missed (misfire policy skip)"
    assert missed["event"]["outcome"] == "failure"
    assert skipped["event"]["reason"] == "overlap: the previous run was still running"
    assert skipped["chrono"]["execution_id"] == str(execution_id_for(str(job.job_id), base +
                                                                     hour_ms))
    assert datetime_to_ms_of(skipped["chrono"]["scheduled_for"]) == base + hour_ms


def datetime_to_ms_of(iso: str) -> int:
    from datetime import datetime

    return datetime_to_ms(datetime.fromisoformat(iso))


def test_cancelling_a_job_cancels_its_pending_executions_each_with_a_document(
    tenant, indexer, search_client, audit_stream
):
    job = api.schedule_cron("reports.hourly", tenant=tenant, cron="* * * * *")
    fire_ms = datetime_to_ms(job.next_run_at)
    occurrences.load_and_insert([(str(job.job_id), fire_ms)])  # SCHEDULED, not yet published
    assert api.cancel(job.job_id, tenant=tenant, by="user:carol")
    ship_all(indexer)

    docs = documents(search_client, audit_stream, chrono__job_id=job.job_id)
    assert actions(docs) == ["job.created", "job.cancelled", "execution.cancelled"]
    assert docs[2]["chrono"]["execution_id"] == str(execution_id_for(str(job.job_id), fire_ms))
    assert docs[2]["chrono"]["actor"] == "user:carol"
    assert Execution.objects.get(job=job).status == ExecutionStatus.CANCELLED


def test_a_worker_coming_up_and_going_down_writes_platform_documents(
    indexer, search_client, audit_stream
):
    worker_id = f"w-{uuid.uuid4().hex[:8]}@host"
    beat_heart(worker_id, queue_name="chrono", event=audit.WORKER_UP)
    beat_heart(worker_id, queue_name="chrono")  # an ordinary heartbeat: no document
    beat_heart(worker_id, queue_name="chrono", final=True, event=audit.WORKER_DOWN)
    ship_all(indexer)

    docs = documents(search_client, audit_stream, chrono__worker_id=worker_id)
    assert actions(docs) == ["worker.up", "worker.down"]
    assert {d["chrono"]["tenant_id"] for d in docs} == {"platform"}
    assert docs[0]["chrono"]["actor"] == f"worker:{worker_id}"
    assert docs[0]["host"]["name"]
    assert docs[0]["process"]["pid"] > 0
    assert docs[0]["message"] == f"Worker {worker_id} is up"


def test_jobs_scheduled_in_bulk_get_one_created_document_each(
    tenant, indexer, search_client, audit_stream
):
    now = now_ms()
    from scheduler.clock import ms_to_datetime

    jobs = api.schedule_once_many("bulk.task", tenant=tenant, by="user:erin",
                                  fire_times=[ms_to_datetime(now + 60_000 + i) for i in range(50)])
    ship_all(indexer)
    for job in (jobs[0], jobs[-1]):
        (doc,) = documents(search_client, audit_stream, chrono__job_id=job.job_id)
        assert doc["event"]["action"] == "job.created"
        assert doc["chrono"]["actor"] == "user:erin"
        assert doc["chrono"]["job_type"] == "bulk.task"
    assert search_client.count(audit_stream.name, {"bool": {"filter": [
        {"term": {"chrono.actor": "user:erin"}},
        {"terms": {"chrono.job_id": [str(j.job_id) for j in jobs]}},
    ]}}) == 50


def test_a_change_that_rolls_back_leaves_no_audit_row(tenant):
    job = api.schedule_once("x.y", tenant=tenant, delay=timedelta(hours=1))
    with pytest.raises(RuntimeError), transaction.atomic():
        api.pause(job.job_id, tenant=tenant, by="user:alice")
        raise RuntimeError("the caller's transaction fails after the pause")
    assert list(AuditEvent.objects.filter(job_id=job.job_id).values_list("action", flat=True)) == [
        "job.created"
    ]


def test_without_an_explicit_actor_a_rest_call_is_attributed_to_its_api_key(
    tenant_api, indexer, search_client, audit_stream
):
    job = tenant_api.create_job()
    response = tenant_api.post(f"/api/v1/jobs/{job['id'] if 'id' in job else job['job_id']}/pause/")
    assert response.status_code == 200, response.content
    prefix = tenant_api.full_key.split("_")[1]
    events = AuditEvent.objects.filter(tenant_id=tenant_api.tenant.tenant_id)
    assert set(events.values_list("action", "actor")) == {
        ("job.created", f"api-key:{prefix}"), ("job.paused", f"api-key:{prefix}"),
    }


def test_a_call_without_actor_outside_a_request_is_the_system(tenant):
    job = api.schedule_once("x.y", tenant=tenant, delay=60)
    assert AuditEvent.objects.get(job_id=job.job_id).actor == "system"


def test_the_retry_path_helper_writes_the_failure_then_retried_or_dead_lettered(
    tenant, indexer, search_client, audit_stream
):
    # The retry path (scheduler.attempts, the reaper) adds one CTE to the statement that ends
    # an attempt: here its source is a literal row set in that statement's RETURNING shape.
    job_id, retried, dead, lost = (str(uuid.uuid4()) for _ in range(4))
    rows = [(retried, "RETRY_WAIT", "ValueError: boom", "attempt 2 in 2000 ms"),
            (dead, "DEAD_LETTERED", "ValueError: boom", "retries exhausted")]
    from django.db import connection

    for ended, failure, actor in ((rows, audit.EXECUTION_FAILED, "'worker:w1'"),
                                  ([(lost, "RETRY_WAIT", "", "lease expired")],
                                   audit.EXECUTION_LOST, f"'{audit.REAPER_ACTOR}'")):
        values = ", ".join(["(%s::uuid, %s::uuid, %s::uuid, 2, %s, %s, %s)"] * len(ended))
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH e AS (SELECT * FROM (VALUES {values}) AS v(execution_id, job_id, "
                "tenant_id, attempt, status, error, reason)) "
                + audit.attempt_ended("e", failure_action=failure, actor=actor),
                [value for execution_id, status, error, reason in ended
                 for value in (execution_id, job_id, tenant.tenant_id, status, error, reason)],
            )
    ship_all(indexer)

    docs = documents(search_client, audit_stream, chrono__job_id=job_id)
    by_execution = {
        execution_id: [(d["event"]["action"], d["event"]["outcome"]) for d in docs
                       if d["chrono"]["execution_id"] == execution_id]
        for execution_id in (retried, dead, lost)
    }
    assert by_execution == {
        retried: [("execution.failed", "failure"), ("execution.retried", "unknown")],
        dead: [("execution.failed", "failure"), ("execution.dead_lettered", "failure")],
        lost: [("execution.lost", "failure"), ("execution.retried", "unknown")],
    }
    lost_doc = next(d for d in docs if d["event"]["action"] == "execution.lost")
    assert lost_doc["chrono"]["actor"] == "reaper"
    assert lost_doc["event"]["reason"] == "lease expired"
    dead_doc = next(d for d in docs if d["event"]["action"] == "execution.dead_lettered")
    assert dead_doc["error"] == {"type": "ValueError", "message": "boom"}
    assert dead_doc["message"].endswith("dead-lettered: retries exhausted")


def test_rows_of_many_jobs_keep_text_that_copy_must_escape(tenant):
    job_ids = [uuid.uuid4(), str(uuid.uuid4())]
    data = {"job_type": "reports.daily", "note": "tab\there, back\\slash, line\nbreak, é"}
    with transaction.atomic():
        audit.record_jobs(audit.JOB_CREATED, tenant_id=tenant.tenant_id, job_ids=job_ids,
                          actor="user:a\tb\\c", data=data)

    events = AuditEvent.objects.filter(tenant_id=tenant.tenant_id).order_by("id")
    assert [str(e.job_id) for e in events] == [str(job_id) for job_id in job_ids]
    assert {(e.action, e.outcome, e.actor, e.message, e.execution_id) for e in events} == {
        ("job.created", "success", "user:a\tb\\c", "", None)}
    assert [e.data for e in events] == [data, data]


def test_a_jobs_creation_and_edit_keep_how_its_occurrences_run(tenant):
    """The audit of a creation or an edit keeps the job's options, not only its schedule: an
    operator reading it in Kibana sees which retry policy, timeouts, overlap, misfire rule and
    jitter the job ran with from then on (a one-time job has no schedule-only options)."""
    from scheduler.retry import RetryPolicy

    job = api.schedule_cron("reports.daily", tenant=tenant, cron="0 6 * * *", jitter_ms=60_000,
                            hard_timeout_ms=600_000, by="user:alice")
    api.configure(job.job_id, tenant=tenant, retry=RetryPolicy(max_attempts=4),
                  overlap="buffer_one", jitter_ms=0, by="user:alice")
    created, edited = AuditEvent.objects.filter(job_id=job.job_id).order_by("id")
    assert (created.action, edited.action) == (audit.JOB_CREATED, audit.JOB_EDITED)
    assert created.data["jitter_ms"] == 60_000 and created.data["hard_timeout_ms"] == 600_000
    assert created.data["overlap_policy"] == "skip"
    assert created.data["misfire_policy"] == "fire_once"
    assert edited.data["overlap_policy"] == "buffer_one"
    assert edited.data["retry_policy"]["max_attempts"] == 4
    assert "jitter_ms" not in edited.data and "soft_timeout_ms" not in edited.data

    once = api.schedule_once("billing.charge", tenant=tenant, delay=60, soft_timeout_ms=5_000)
    data = AuditEvent.objects.get(job_id=once.job_id).data
    assert data["soft_timeout_ms"] == 5_000
    assert not {"overlap_policy", "misfire_policy", "jitter_ms", "timezone"} & set(data)
