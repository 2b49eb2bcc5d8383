"""The admin's object pages: a job page with its buttons, next fire times (UTC and local, DST
marked), executions, ledger of skipped occurrences and history; an execution page read-only to
the millisecond; workers read-only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scheduler import api
from scheduler.fire_times import fire_time_rows
from scheduler.models import Execution, ExecutionStatus, JobStatus, JobWatch
from scheduler.timers import timer_store
from search import audit
from search.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff(db):
    client = Client()
    client.force_login(User.objects.create_superuser("ops", password="x"))
    return client


def test_a_cron_job_page_lists_ten_fire_times_buttons_and_sections(staff, tenant, redis_client):
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="*/5 * * * * *",
                            timezone="Europe/Paris")
    page = staff.get(f"/admin/scheduler/job/{job.job_id}/change/").content.decode()
    assert page.count('class="fire-time"') == 10
    for section in ("job-executions", "job-ledger", "job-history"):
        assert f'id="{section}"' in page
    for button in ("job-action-pause", "job-action-trigger", "job-action-cancel"):
        assert f'id="{button}"' in page
    assert 'id="job-action-resume"' not in page


def test_the_pause_button_pauses_through_the_api_and_the_fire_times_go(staff, tenant,
                                                                        redis_client):
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="*/5 * * * *")
    answer = staff.post(f"/admin/scheduler/job/{job.job_id}/do/pause/", follow=True)
    assert "Pause: done." in answer.content.decode()
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
    assert timer_store().fire_time_of(str(job.job_id)) is None
    assert AuditEvent.objects.get(job_id=job.job_id, action=audit.JOB_PAUSED).actor == "user:ops"
    page = answer.content.decode()
    assert 'id="no-fire-times"' in page and 'class="fire-time"' not in page
    assert 'id="job-action-resume"' in page
    assert staff.get(f"/admin/scheduler/job/{job.job_id}/do/pause/").status_code == 405


def test_fire_times_mark_the_dst_transition_between_two_rows():
    # Paris leaves summer time on 2026-10-25 at 03:00 local (01:00 UTC).
    before = int(datetime(2026, 10, 24, 10, tzinfo=UTC).timestamp() * 1000)
    after = int(datetime(2026, 10, 25, 11, tzinfo=UTC).timestamp() * 1000)
    rows = fire_time_rows([before, after, after + 3_600_000], "Europe/Paris")
    assert [r["offset_changed"] for r in rows] == [False, True, False]


def test_an_execution_page_is_read_only_with_millisecond_timings(staff, tenant, redis_client):
    job = api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(seconds=60))
    scheduled = datetime(2026, 12, 1, 10, 0, 0, 123_000, tzinfo=UTC)
    execution = Execution.objects.create(
        job=job, tenant=tenant, scheduled_for=scheduled, status=ExecutionStatus.SUCCEEDED,
        started_at=scheduled + timedelta(milliseconds=7),
        finished_at=scheduled + timedelta(milliseconds=257), worker_id="w1@host", attempt=1)
    page = staff.get(f"/admin/scheduler/execution/{execution.execution_id}/change/")
    text = page.content.decode()
    assert page.status_code == 200
    assert "2026-12-01 10:00:00.123" in text and "2026-12-01 10:00:00.130" in text
    assert "250 ms" in text and "7 ms" in text
    assert 'name="_save"' not in text and "deletelink" not in text
    assert 'id="execution-attempts"' in text
    listing = staff.get("/admin/scheduler/execution/").content.decode()
    assert "/admin/scheduler/execution/add/" not in listing


def test_workers_cannot_be_added_changed_or_deleted_in_the_admin(staff):
    listing = staff.get("/admin/reaper/worker/").content.decode()
    assert "/admin/reaper/worker/add/" not in listing
    assert staff.get("/admin/reaper/worker/add/").status_code == 403


def test_the_job_list_leaves_workflow_steps_out_unless_asked(staff, tenant, redis_client):
    """A step of a workflow run is a watched one-time job: the list shows the jobs people
    scheduled, ``?origin=steps`` the steps, ``?origin=all`` both."""
    api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(hours=1),
                                  name="scheduled-by-hand")
    step = api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(hours=1),
                             name="workflow demo 1234abcd extract #1")
    JobWatch.objects.create(job_id=step.job_id, watcher="workflow")

    def listed(query: str) -> set[str]:
        page = staff.get(f"/admin/scheduler/job/{query}")
        assert page.status_code == 200
        return {name for name in ("scheduled-by-hand", "workflow demo 1234abcd extract #1")
                if name in page.content.decode()}

    assert listed("") == {"scheduled-by-hand"}
    assert listed("?origin=steps") == {"workflow demo 1234abcd extract #1"}
    assert listed("?origin=all") == {"scheduled-by-hand", "workflow demo 1234abcd extract #1"}
    assert "Workflow steps" in staff.get("/admin/scheduler/job/").content.decode()
