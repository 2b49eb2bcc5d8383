"""The one job writer (scheduler.job_writer) and the one change of a job (scheduler.api.update),
against the real PostgreSQL and Redis: what every way in gets from them whichever it is."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chronocore.models import Tenant
from scheduler import api, job_writer, specs
from scheduler.clock import datetime_to_ms
from scheduler.errors import InvalidJob, TaskNotGranted
from scheduler.misfire import jittered_ms
from scheduler.models import Job
from scheduler.timers import timer_store
from search.models import AuditEvent

pytestmark = pytest.mark.django_db


def spec(**fields) -> specs.JobSpec:
    return specs.checked_spec({"job_type": "tests.noop", "delay_ms": 60_000} | fields,
                              job_writer.current_limits())


def test_neither_mode_writes_for_a_disabled_tenant(tenant, redis_client):
    Tenant.objects.filter(pk=tenant.pk).update(is_active=False)
    for write in (lambda: job_writer.create(tenant.tenant_id, spec()),
                  lambda: job_writer.copy(tenant.tenant_id, [spec(), spec()])):
        with pytest.raises(InvalidJob) as refused:
            write()
        assert refused.value.field == "tenant" and "disabled" in refused.value.message
    assert not Job.objects.exists() and not AuditEvent.objects.exists()


@pytest.mark.no_default_grants
def test_the_copy_mode_checks_every_tasks_grant_and_writes_nothing_when_one_is_missing(
    tenant, redis_client
):
    from chronocore import grants

    grants.grant(tenant, "tests.*", "chrono")
    with pytest.raises(TaskNotGranted) as refused:
        job_writer.copy(tenant.tenant_id, [spec(), spec(job_type="billing.charge")])
    assert refused.value.task_name == "billing.charge"
    assert not Job.objects.exists()
    assert len(job_writer.copy(tenant.tenant_id, [spec(), spec(name="b")])) == 2


def test_both_modes_spread_a_cron_jobs_first_occurrence_by_its_id(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    jittered = specs.checked_spec(
        {"job_type": "tests.noop", "cron_expression": "*/5 * * * *", "jitter_ms": 200_000},
        job_writer.current_limits())
    with django_capture_on_commit_callbacks(execute=True):
        one = job_writer.create(tenant.tenant_id, jittered)
        (copied,) = job_writer.copy(tenant.tenant_id, [jittered])
    for job in (one, Job.objects.get(job_id=copied)):
        job.refresh_from_db()
        expected = jittered_ms(str(job.job_id), jittered.fire_at_ms, 200_000)
        assert datetime_to_ms(job.next_run_at) == expected
        assert timer_store().fire_time_of(str(job.job_id)) == expected


def test_schedule_once_many_writes_by_copy_with_its_audit_rows_and_timers(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    fire_times = [timezone.now() + timedelta(minutes=5, milliseconds=i) for i in range(3)]
    with django_capture_on_commit_callbacks(execute=True):
        jobs = api.schedule_once_many("tests.noop", tenant=tenant, fire_times=fire_times,
                                      args=(1, 2), name="batch", by="user:erin")
    for job, at in zip(jobs, fire_times, strict=True):
        row = Job.objects.get(job_id=job.job_id)
        assert (row.args, row.name, row.queue) == ([1, 2], "batch", "chrono")
        assert datetime_to_ms(row.next_run_at) == datetime_to_ms(at) == \
            datetime_to_ms(job.next_run_at)
        assert timer_store().fire_time_of(str(job.job_id)) == datetime_to_ms(at)
    events = AuditEvent.objects.filter(action="job.created")
    assert {(e.actor, e.data["name"], e.data["job_type"]) for e in events} == {
        ("user:erin", "batch", "tests.noop")}
    assert events.count() == 3
    with pytest.raises(InvalidJob) as refused:
        api.schedule_once_many("tests.noop", tenant=tenant,
                               fire_times=[timezone.now() - timedelta(minutes=10)])
    assert refused.value.field == "at" and "in the past" in refused.value.message


def test_a_patch_locks_the_job_once(tenant_api):
    job_id = tenant_api.post_json("/api/v1/jobs/", {
        "job_type": "tests.noop", "cron_expression": "*/5 * * * *"}).json()["job_id"]
    with CaptureQueriesContext(connection) as queries:
        response = tenant_api.patch_json(f"/api/v1/jobs/{job_id}/", {
            "cron_expression": "*/10 * * * *", "jitter_ms": 1_000, "overlap_policy": "allow"})
    assert response.status_code == 200, response.json()
    locks = [q["sql"] for q in queries if "FOR UPDATE" in q["sql"] and "chrono_job" in q["sql"]]
    assert len(locks) == 1, locks
    edits = AuditEvent.objects.filter(job_id=job_id, action="job.edited")
    assert edits.count() == 1  # one change, one row
    job = Job.objects.get(job_id=job_id)
    assert (job.cron_expression, job.jitter_ms, job.overlap_policy) == ("*/10 * * * *", 1_000,
                                                                        "allow")


def test_a_change_that_changes_nothing_writes_nothing(tenant, redis_client):
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="*/5 * * * *", jitter_ms=1_000)
    before = Job.objects.get(pk=job.pk).updated_at
    api.configure(job.job_id, tenant=tenant, jitter_ms=1_000, overlap="skip")
    assert Job.objects.get(pk=job.pk).updated_at == before
    assert not AuditEvent.objects.filter(job_id=job.job_id, action="job.edited").exists()


def test_an_id_that_is_not_a_uuid_is_not_found_by_every_change(tenant_api, tenant):
    from scheduler.errors import JobNotFound

    response = tenant_api.patch_json("/api/v1/jobs/not-a-uuid/", {"jitter_ms": 5})
    assert response.status_code == 404 and response.json() == {"detail": "No job with this id."}
    for change in (lambda: api.configure("not-a-uuid", tenant=tenant, jitter_ms=5),
                   lambda: api.delete("not-a-uuid", tenant=tenant)):
        with pytest.raises(JobNotFound):
            change()


def test_max_retries_of_the_python_api_is_a_deprecated_alias_of_max_attempts(tenant,
                                                                             redis_client):
    with pytest.warns(DeprecationWarning, match="retry=RetryPolicy"):
        job = api.schedule_once("tests.noop", tenant=tenant, delay=60, max_retries=2)
    job.refresh_from_db()
    assert (job.max_retries, job.retry_policy) == (2, {})  # as REST stores max_retries alone
