"""Task and queue grants: a tenant schedules only what it was granted, through every way in
(REST create, bulk, PATCH; the Python API; decorators and sync-jobs; import-beat; workflows),
and platform staff manage grants in the admin, the API and the CLI."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery
from celery.schedules import crontab
from django.core.management import CommandError, call_command

from chronocore import grants
from chronocore.models import TaskGrant
from scheduler import api
from scheduler.decorators import chrono_job
from scheduler.errors import TaskNotGranted
from scheduler.models import Job
from workflows import engine
from workflows.errors import DefinitionError
from workflows.models import WorkflowRun

pytestmark = [pytest.mark.django_db, pytest.mark.no_default_grants]

MODULE = __name__

granted_app = Celery("granted", set_as_current=False)


@chrono_job(cron="*/5 * * * *", queue="reports")
@granted_app.task(name="tests.grants.nightly")
def nightly() -> None:
    return None


@chrono_job(queue="mail")
@granted_app.task(name="tests.grants.send_mail")
def send_mail(to: str) -> None:
    return None


beat_app = Celery("beatapp", set_as_current=False)
beat_app.conf.beat_schedule = {
    "hourly": {"task": "tests.grants.hourly", "schedule": crontab(minute=0),
               "options": {"queue": "hourly-q"}},
}


def cli(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def in_an_hour() -> str:
    return (datetime.now(UTC) + timedelta(hours=1)).isoformat()


@pytest.fixture
def granted(tenant_api):
    """The first tenant (acme) granted billing.* on the billing queue."""
    grants.grant(tenant_api.tenant, "billing.*", "billing")
    return tenant_api


# ------------------------------------------------------------------------------------ REST


def test_create_is_403_naming_the_task_the_queue_and_how_to_get_them(granted, other_api):
    job = {"job_type": "billing.tasks.charge", "queue": "billing", "run_at": in_an_hour()}
    assert granted.post_json("/api/v1/jobs/", job).status_code == 201
    response = other_api.post_json("/api/v1/jobs/", job)
    assert response.status_code == 403, response.json()
    detail = response.json()["detail"]
    assert "'billing.tasks.charge'" in detail and "'billing'" in detail and "globex" in detail
    assert "chrono grants add --tenant globex" in detail
    assert not Job.objects.filter(tenant=other_api.tenant).exists()


@pytest.mark.parametrize(("job_type", "queue"), [
    ("billing.tasks.charge", "chrono"),  # the task, but not on that queue
    ("reports.daily", "billing"),  # the queue, but not that task
    ("chrono.demo.report", "billing"),  # built-in tasks are granted to nobody
    ("celery.accumulate", "billing"),
])
def test_create_is_403_for_a_task_or_queue_outside_the_grant(granted, job_type, queue):
    response = granted.post_json("/api/v1/jobs/", {"job_type": job_type, "queue": queue,
                                                   "delay_ms": 1000})
    assert response.status_code == 403, response.json()
    assert repr(job_type) in response.json()["detail"]


def test_bulk_refuses_the_items_not_granted_and_creates_the_others(granted):
    items = [
        {"job_type": "billing.tasks.charge", "queue": "billing", "delay_ms": 60_000},
        {"job_type": "celery.accumulate", "queue": "billing", "delay_ms": 60_000},
        {"job_type": "billing.tasks.refund", "queue": "billing", "delay_ms": 60_000},
        {"job_type": "billing.tasks.refund", "queue": "other", "delay_ms": 60_000},
    ]
    response = granted.post_json("/api/v1/jobs/bulk", items)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["created"], body["failed"]) == (2, 2)
    assert [e["index"] for e in body["errors"]] == [1, 3]
    assert {e["field"] for e in body["errors"]} == {"job_type"}
    assert "'celery.accumulate'" in body["errors"][0]["message"]
    assert body["ids"][1] is None and body["ids"][3] is None
    assert sorted(Job.objects.filter(tenant=granted.tenant).values_list("job_type", flat=True)) \
        == ["billing.tasks.charge", "billing.tasks.refund"]


def test_a_bulk_request_with_nothing_granted_creates_nothing(other_api):
    response = other_api.post_json("/api/v1/jobs/bulk", [
        {"job_type": "billing.tasks.charge", "queue": "billing", "delay_ms": 60_000}])
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "job_type"


def test_patch_of_a_job_whose_grant_was_removed_is_403(granted):
    body = granted.post_json("/api/v1/jobs/", {"job_type": "billing.tasks.charge",
                                                "queue": "billing",
                                                "cron_expression": "0 * * * *"}).json()
    grants.revoke(granted.tenant, "billing.*", "billing")
    response = granted.patch_json(f"/api/v1/jobs/{body['job_id']}/",
                                  {"cron_expression": "30 * * * *"})
    assert response.status_code == 403, response.json()
    assert Job.objects.get(job_id=body["job_id"]).cron_expression == "0 * * * *"


def test_patch_cannot_change_a_jobs_task_or_queue(granted):
    body = granted.create_job(job_type="billing.tasks.charge", queue="billing")
    for change in ({"job_type": "celery.accumulate"}, {"queue": "other"}):
        response = granted.patch_json(f"/api/v1/jobs/{body['job_id']}/", change)
        assert response.status_code == 400, response.json()
    job = Job.objects.get(job_id=body["job_id"])
    assert (job.job_type, job.queue) == ("billing.tasks.charge", "billing")


# ------------------------------------------------------------------------------ Python API


def test_the_python_api_raises_task_not_granted_on_every_way_to_schedule(tenant, other_tenant):
    grants.grant(tenant, "billing.*", "billing")
    at = datetime.now(UTC) + timedelta(hours=1)
    with pytest.raises(TaskNotGranted) as refused:
        api.schedule_once("billing.tasks.charge", tenant=other_tenant, queue="billing", delay=60)
    assert (refused.value.task_name, refused.value.queue) == ("billing.tasks.charge", "billing")
    with pytest.raises(TaskNotGranted):
        api.schedule_cron("billing.tasks.charge", tenant=other_tenant, queue="billing",
                          cron="0 * * * *")
    with pytest.raises(TaskNotGranted):
        api.schedule_once_many("billing.tasks.charge", tenant=other_tenant, queue="billing",
                               fire_times=[at])
    with pytest.raises(TaskNotGranted):  # granted the task, on another queue only
        api.schedule_once("billing.tasks.charge", tenant=tenant, delay=60)
    assert not Job.objects.filter(tenant=other_tenant).exists()
    job = api.schedule_cron("billing.tasks.charge", tenant=tenant, queue="billing",
                            cron="0 * * * *")
    grants.revoke(tenant, "billing.*", "billing")
    with pytest.raises(TaskNotGranted):
        api.reschedule(job.job_id, tenant=tenant, cron="5 * * * *")
    with pytest.raises(TaskNotGranted):
        api.configure(job.job_id, tenant=tenant, jitter_ms=10)


def test_a_grant_change_in_this_process_applies_at_once(tenant):
    with pytest.raises(TaskNotGranted):
        api.schedule_once("reports.daily", tenant=tenant, delay=60)
    grants.grant(tenant, "reports.*")
    api.schedule_once("reports.daily", tenant=tenant, delay=60)
    TaskGrant.objects.filter(tenant=tenant).delete()
    with pytest.raises(TaskNotGranted):
        api.schedule_once("reports.daily", tenant=tenant, delay=60)


# --------------------------------------------------------------- decorators and sync-jobs


def test_a_decorated_tasks_schedule_is_refused_until_sync_jobs_grants_it(tenant):
    with pytest.raises(TaskNotGranted):
        send_mail.schedule("a@example.com", tenant=tenant, delay=60)
    output = cli("sync_jobs", MODULE, "--tenant", "acme")
    assert "granted      tests.grants.nightly on queue reports to tenant acme" in output
    assert "granted      tests.grants.send_mail on queue mail to tenant acme" in output
    assert grants.is_granted(tenant.tenant_id, "tests.grants.nightly", "reports")
    assert Job.objects.filter(tenant=tenant, job_type="tests.grants.nightly").exists()
    send_mail.schedule("a@example.com", tenant=tenant, delay=60)
    assert "granted" not in cli("sync_jobs", MODULE, "--tenant", "acme")  # nothing new


def test_sync_jobs_grants_the_tenant_it_syncs_for_only(tenant, other_tenant):
    cli("sync_jobs", MODULE, "--tenant", "acme")
    with pytest.raises(TaskNotGranted):
        send_mail.schedule("a@example.com", tenant=other_tenant, delay=60)


def test_a_dry_run_of_sync_jobs_grants_nothing(tenant):
    cli("sync_jobs", MODULE, "--tenant", "acme", "--dry-run")
    assert not TaskGrant.objects.filter(tenant=tenant).exists()


# ----------------------------------------------------------------------------- import-beat


def test_import_beat_grants_what_it_imports_to_that_tenant_and_prints_it(tenant, other_tenant):
    output = cli("import_beat", f"{MODULE}:beat_app", "--tenant", "acme")
    assert "granted      tests.grants.hourly on queue hourly-q to tenant acme" in output
    assert Job.objects.filter(tenant=tenant, job_type="tests.grants.hourly").exists()
    assert not grants.is_granted(other_tenant.tenant_id, "tests.grants.hourly", "hourly-q")
    with pytest.raises(TaskNotGranted):
        api.schedule_once("tests.grants.hourly", tenant=other_tenant, queue="hourly-q",
                          delay=60)


# ------------------------------------------------------------------------------- workflows


def test_a_workflow_definition_naming_a_task_not_granted_is_refused_at_its_path(tenant):
    grants.grant(tenant, "etl.*")
    spec = {"name": "etl", "steps": [
        {"key": "extract", "task": "etl.extract"},
        {"key": "charge", "task": "billing.charge", "parents": ["extract"]},
        {"key": "notify", "task": "etl.notify", "queue": "mail", "parents": ["charge"]},
    ]}
    grants.revoke(tenant, "etl.*")
    grants.grant(tenant, "etl.*", "chrono")
    with pytest.raises(DefinitionError) as refused:
        engine.define(tenant, spec)
    assert refused.value.paths() == ["steps.charge.task", "steps.notify.task"]
    assert "'billing.charge'" in str(refused.value)


def test_the_rest_api_refuses_such_a_definition_with_the_path(tenant_api):
    response = tenant_api.post_json("/api/v1/workflows/", {"name": "w", "steps": [
        {"key": "a", "task": "celery.accumulate"}]})
    assert response.status_code == 400, response.json()
    assert "steps.a.task" in str(response.json())


def test_a_step_whose_grant_was_removed_fails_at_dispatch_and_makes_no_job(tenant):
    grants.grant(tenant, "wf.*")
    engine.define(tenant, {"name": "one", "steps": [{"key": "only", "task": "wf.only"}]})
    grants.revoke(tenant, "wf.*")
    run = engine.start_run("one", tenant=tenant)
    run = WorkflowRun.objects.get(run_id=run.run_id)
    assert run.status == "FAILED", run.state
    assert "not granted task 'wf.only'" in str(run.state)
    assert not Job.objects.filter(tenant=tenant, job_type="wf.only").exists()


# ------------------------------------------------------------------ admin, API and CLI


def test_platform_staff_grant_list_and_revoke_through_the_api(staff_api, tenant, tenant_api):
    response = staff_api.post("/api/v1/task-grants/", {
        "tenant": str(tenant.tenant_id), "task_pattern": "billing.*",
        "queue_pattern": "billing"}, format="json")
    assert response.status_code == 201, response.json()
    grant_id = response.json()["id"]
    again = staff_api.post("/api/v1/task-grants/", {
        "tenant": str(tenant.tenant_id), "task_pattern": "billing.*",
        "queue_pattern": "billing"}, format="json")
    assert (again.status_code, again.json()["id"]) == (200, grant_id)
    listed = staff_api.get(f"/api/v1/task-grants/?tenant_slug={tenant.slug}").json()
    assert [g["task_pattern"] for g in listed["results"]] == ["billing.*"]
    assert tenant_api.create_job(job_type="billing.x", queue="billing")
    assert staff_api.delete(f"/api/v1/task-grants/{grant_id}/").status_code == 204
    assert tenant_api.post_json("/api/v1/jobs/", {"job_type": "billing.x", "queue": "billing",
                                                  "delay_ms": 10}).status_code == 403


def test_the_grants_api_refuses_a_bad_pattern_and_tenants(staff_api, tenant, tenant_api):
    response = staff_api.post("/api/v1/task-grants/", {
        "tenant": str(tenant.tenant_id), "task_pattern": "billing .*"}, format="json")
    assert response.status_code == 400
    assert "task_pattern" in response.json()
    assert tenant_api.get("/api/v1/task-grants/").status_code == 403
    assert tenant_api.post_json("/api/v1/task-grants/", {
        "tenant": str(tenant.tenant_id), "task_pattern": "*"}).status_code == 403
    assert not TaskGrant.objects.exists()


def test_the_cli_adds_lists_and_removes_grants(tenant):
    assert "granted: billing.* on queue billing to tenant acme" in cli(
        "grants", "add", "--tenant", "acme", "--task", "billing.*", "--queue", "billing")
    assert "already granted" in cli("grants", "add", "--tenant", "acme", "--task", "billing.*",
                                    "--queue", "billing")
    cli("grants", "add", "--tenant", "acme", "--task", "reports.daily")
    assert cli("grants", "list", "--tenant", "acme").splitlines() == [
        "billing.*\tbilling\tchrono grants", "reports.daily\t*\tchrono grants"]
    assert "removed" in cli("grants", "remove", "--tenant", "acme", "--task", "reports.daily")
    with pytest.raises(CommandError, match="no grant of reports.daily"):
        cli("grants", "remove", "--tenant", "acme", "--task", "reports.daily")
    with pytest.raises(CommandError, match="whitespace"):
        cli("grants", "add", "--tenant", "acme", "--task", "a b")
    with pytest.raises(CommandError, match="no tenant"):
        cli("grants", "list", "--tenant", "nobody")


def test_the_admin_lists_and_adds_grants(admin_client, tenant):
    response = admin_client.post("/admin/chronocore/taskgrant/add/", {
        "tenant": str(tenant.tenant_id), "task_pattern": "billing.*", "queue_pattern": "*"})
    assert response.status_code == 302, response.content[:2000]
    grant = TaskGrant.objects.get(tenant=tenant)
    assert grant.created_by == "admin:admin"
    assert grants.is_granted(tenant.tenant_id, "billing.charge", "any")
    page = admin_client.get("/admin/chronocore/taskgrant/")
    assert b"billing.*" in page.content
    assert admin_client.get(f"/admin/chronocore/tenant/{tenant.tenant_id}/change/"
                            ).status_code == 200
    bad = admin_client.post("/admin/chronocore/taskgrant/add/", {
        "tenant": str(tenant.tenant_id), "task_pattern": "a b", "queue_pattern": "*"})
    assert bad.status_code == 200 and b"whitespace" in bad.content
