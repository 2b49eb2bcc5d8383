"""The Django admin changes jobs only through scheduler.api: its actions and its delete reach the
job's timer, take the job's lock and are audited with the staff user; its form edits the name
alone, and it adds no job."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from scheduler import api
from scheduler.clock import datetime_to_ms
from scheduler.lifecycle import execution_id_for
from scheduler.models import Execution, Job, JobStatus
from scheduler.timers import timer_store
from search import audit
from search.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff(db):
    user = User.objects.create_superuser("ops", password="x")
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def cron_job(tenant):
    return api.schedule_cron("tests.noop", tenant=tenant, cron="*/5 * * * *")


def act(staff, action: str, *jobs: Job):
    return staff.post("/admin/scheduler/job/", {
        "action": action, "_selected_action": [str(j.job_id) for j in jobs]}, follow=True)


def test_pause_and_resume_from_the_admin_move_the_timer_and_are_audited(staff, tenant,
                                                                        redis_client):
    job = cron_job(tenant)
    store = timer_store()
    assert store.fire_time_of(str(job.job_id)) is not None

    response = act(staff, "pause_jobs", job)
    assert "Paused: 1 job(s)." in response.content.decode()
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
    assert store.fire_time_of(str(job.job_id)) is None
    assert AuditEvent.objects.get(job_id=job.job_id, action=audit.JOB_PAUSED).actor == "user:ops"

    response = act(staff, "pause_jobs", job)  # already paused: said, not done twice
    assert "Not paused" in response.content.decode()
    act(staff, "resume_jobs", job)
    job.refresh_from_db()
    assert job.status == JobStatus.ACTIVE
    assert store.fire_time_of(str(job.job_id)) == datetime_to_ms(job.next_run_at)


def test_deleting_from_the_admin_takes_the_executions_the_timer_and_writes_the_audit(
        staff, tenant, redis_client):
    job, other = cron_job(tenant), cron_job(tenant)
    Execution.objects.create(execution_id=execution_id_for(str(job.job_id), 1_000), job=job,
                             tenant=tenant, scheduled_for=job.next_run_at, status="SUCCEEDED")

    response = staff.post(f"/admin/scheduler/job/{job.job_id}/delete/", {"post": "yes"},
                          follow=True)
    assert response.status_code == 200
    assert not Job.objects.filter(pk=job.job_id).exists()
    assert not Execution.objects.filter(job_id=job.job_id).exists()
    assert timer_store().fire_time_of(str(job.job_id)) is None
    assert AuditEvent.objects.get(job_id=job.job_id, action=audit.JOB_DELETED).actor == "user:ops"

    act_response = staff.post("/admin/scheduler/job/", {
        "action": "delete_selected", "_selected_action": [str(other.job_id)], "post": "yes"},
        follow=True)
    assert act_response.status_code == 200
    assert not Job.objects.filter(pk=other.job_id).exists()
    assert timer_store().fire_time_of(str(other.job_id)) is None


def test_the_form_edits_the_name_only_and_no_job_is_added_here(staff, tenant, redis_client):
    job = cron_job(tenant)
    page = staff.get(f"/admin/scheduler/job/{job.job_id}/change/")
    assert page.status_code == 200
    response = staff.post(f"/admin/scheduler/job/{job.job_id}/change/", {
        "name": "nightly billing", "cron_expression": "* * * * *", "status": "CANCELLED"})
    assert response.status_code == 302, response.content.decode()[:2000]
    job.refresh_from_db()
    assert job.name == "nightly billing"
    assert job.cron_expression == "*/5 * * * *" and job.status == JobStatus.ACTIVE
    assert staff.get("/admin/scheduler/job/add/").status_code == 403
    assert staff.get("/admin/scheduler/execution/add/").status_code == 403


def test_interval_and_hashed_jobs_show_their_schedule_and_next_fire_times(staff, tenant,
                                                                           redis_client):
    from scheduler.cron import parse_cron

    interval = api.schedule_interval("tests.noop", tenant=tenant, every=45 * 60)
    hashed = api.schedule_cron("tests.noop", tenant=tenant, cron="H H * * *")
    listing = staff.get("/admin/scheduler/job/").content.decode()
    assert "every 45 minutes" in listing and "H H * * *" in listing
    page = staff.get(f"/admin/scheduler/job/{interval.job_id}/change/").content.decode()
    assert page.count('class="fire-time"') >= 5
    page = staff.get(f"/admin/scheduler/job/{hashed.job_id}/change/").content.decode()
    schedule = parse_cron("H H * * *", "UTC", str(hashed.job_id))
    assert f"{schedule.hours[0]:02}:{schedule.minutes[0]:02}:00" in page
