"""The admin for a tenant's staff: their tenant's jobs, executions, workflows, runs, keys and
dashboard, nothing of another tenant's however the URL is made (lists hold none, ids answer
404, buttons and actions change nothing), actions by role, creation pinned to their tenant;
platform staff see every tenant with the tenant filter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from chronoadmin import dashboard
from chronocore.models import ApiKey, StaffRole, TenantMembership
from chronocore.staff import add_member
from scheduler import api, rollups
from scheduler.clock import datetime_to_ms
from scheduler.models import Execution, ExecutionStatus, JobStatus
from tests.integration.audit_support import ship_all
from tests.integration.conftest import platform_staff_user
from workflows import engine
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.integration.audit_fixtures"]

TRACEBACK = "Traceback (most recent call last):\n  File \"/srv/app/billing.py\", line 3"


class Rows:
    """One tenant's job, failed execution, workflow definition, run and API key."""

    def __init__(self, tenant) -> None:
        self.tenant = tenant
        self.job = api.schedule_cron("tests.noop", tenant=tenant, cron="*/5 * * * *")
        now = datetime.now(UTC)
        self.execution = Execution.objects.create(
            job=self.job, tenant=tenant, scheduled_for=now, status=ExecutionStatus.FAILED,
            started_at=now, finished_at=now + timedelta(milliseconds=40), worker_id="w1@h",
            error="ValueError: card declined", traceback=TRACEBACK)
        self.definition = engine.define(tenant, {"name": f"nightly-{tenant.slug}", "steps": [
            {"key": "extract", "task": "tests.noop"}]})
        self.run = engine.start_run(f"nightly-{tenant.slug}", tenant=tenant)
        self.api_key, _ = ApiKey.objects.issue(tenant=tenant, name=f"key-{tenant.slug}")

    def pages(self) -> dict[str, str]:
        """Every admin page of these rows."""
        return {
            "job": f"/admin/scheduler/job/{self.job.job_id}/change/",
            "job history": f"/admin/scheduler/job/{self.job.job_id}/history/",
            "job delete": f"/admin/scheduler/job/{self.job.job_id}/delete/",
            "execution": f"/admin/scheduler/execution/{self.execution.execution_id}/change/",
            "definition": (f"/admin/workflows/workflowdefinitionversion/"
                           f"{self.definition.definition_id}/change/"),
            "run": f"/admin/workflows/workflowrun/{self.run.run_id}/change/",
            "run graph": f"/admin/workflows/workflowrun/{self.run.run_id}/graph/",
            "api key": f"/admin/chronocore/apikey/{self.api_key.key_id}/change/",
            "tenant": f"/admin/chronocore/tenant/{self.tenant.tenant_id}/change/",
        }


@pytest.fixture
def acme(tenant, redis_client):
    return Rows(tenant)


@pytest.fixture
def globex(other_tenant, redis_client):
    return Rows(other_tenant)


def member(username: str, tenant, role: str) -> Client:
    user = User.objects.create_user(username, password="x")
    add_member(user, tenant, role)
    client = Client()
    client.force_login(user)
    return client


LISTS = ("/admin/scheduler/job/", "/admin/scheduler/execution/",
         "/admin/workflows/workflowdefinitionversion/", "/admin/workflows/workflowrun/",
         "/admin/chronocore/apikey/", "/admin/chronocore/tenant/",
         "/admin/chronocore/taskgrant/")


def test_tenant_staff_list_their_tenants_rows_and_none_of_another(acme, globex):
    staff = member("ann", acme.tenant, StaffRole.VIEWER)
    theirs = (acme.job.job_id, acme.execution.execution_id, acme.definition.definition_id,
              acme.run.run_id, acme.api_key.key_id, acme.tenant.tenant_id)
    others = (globex.job.job_id, globex.execution.execution_id,
              globex.definition.definition_id, globex.run.run_id, globex.api_key.key_id,
              globex.tenant.tenant_id)
    pages = ""
    for path in LISTS:
        answer = staff.get(path)
        assert answer.status_code == 200, path
        pages += answer.content.decode()
    assert all(str(i) in pages for i in theirs)
    assert not [i for i in others if str(i) in pages]
    assert "globex" not in pages  # nor the tenant filter's list of every slug
    # Searching for another tenant's id finds nothing either.
    found = staff.get("/admin/scheduler/job/", {"q": str(globex.job.job_id)})
    assert found.context["cl"].result_count == 0


def test_another_tenants_ids_answer_404_on_every_page(acme, globex):
    staff = member("ann", acme.tenant, StaffRole.ADMIN)
    for name, path in acme.pages().items():
        assert staff.get(path).status_code == 200, name
    for name, path in globex.pages().items():
        assert staff.get(path).status_code == 404, name
    assert staff.get("/admin/scheduler/job/not-a-uuid/change/").status_code == 404


def test_crafted_posts_change_nothing_of_another_tenant(acme, globex):
    staff = member("olga", acme.tenant, StaffRole.OPERATOR)
    job, execution, run = globex.job, globex.execution, globex.run
    assert staff.post(f"/admin/scheduler/job/{job.job_id}/do/pause/").status_code == 404
    assert staff.post(f"/admin/scheduler/job/{job.job_id}/delete/",
                      {"post": "yes"}).status_code == 404
    assert staff.post(
        f"/admin/scheduler/execution/{execution.execution_id}/retry/").status_code == 404
    assert staff.post(f"/admin/workflows/workflowrun/{run.run_id}/do/cancel/").status_code == 404
    # A list action whose selection names the other tenant's job changes only their own.
    staff.post("/admin/scheduler/job/", {
        "action": "pause_jobs", "_selected_action": [str(job.job_id), str(acme.job.job_id)]})
    job.refresh_from_db()
    acme.job.refresh_from_db()
    assert job.status == JobStatus.ACTIVE and acme.job.status == JobStatus.PAUSED
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.FAILED and execution.attempt == 1
    assert WorkflowRun.objects.get(run_id=run.run_id).status == "RUNNING"


def test_operators_act_on_their_tenants_rows(acme):
    staff = member("olga", acme.tenant, StaffRole.OPERATOR)
    page = staff.get(acme.pages()["job"]).content.decode()
    assert 'id="job-action-pause"' in page
    answer = staff.post(f"/admin/scheduler/job/{acme.job.job_id}/do/pause/", follow=True)
    assert "Pause: done." in answer.content.decode()
    acme.job.refresh_from_db()
    assert acme.job.status == JobStatus.PAUSED
    answer = staff.post(f"/admin/scheduler/execution/{acme.execution.execution_id}/retry/",
                        follow=True)
    assert "Retrying: attempt 2" in answer.content.decode()
    answer = staff.post(f"/admin/workflows/workflowrun/{acme.run.run_id}/do/cancel/",
                        follow=True)
    assert "Cancel: done." in answer.content.decode()


def test_viewers_see_no_buttons_and_their_posts_are_refused(acme):
    staff = member("vic", acme.tenant, StaffRole.VIEWER)
    job_page = staff.get(acme.pages()["job"]).content.decode()
    assert "job-action-" not in job_page and 'name="_save"' not in job_page
    assert 'id="execution-retry"' not in staff.get(acme.pages()["execution"]).content.decode()
    assert 'id="run-cancel"' not in staff.get(acme.pages()["run"]).content.decode()
    assert staff.post(f"/admin/scheduler/job/{acme.job.job_id}/do/pause/").status_code == 403
    assert staff.post(
        f"/admin/scheduler/execution/{acme.execution.execution_id}/retry/").status_code == 403
    assert staff.post(
        f"/admin/workflows/workflowrun/{acme.run.run_id}/do/cancel/").status_code == 403
    listing = staff.get("/admin/scheduler/job/").content.decode()
    assert "pause_jobs" not in listing  # no actions offered
    staff.post("/admin/scheduler/job/", {"action": "pause_jobs",
                                         "_selected_action": [str(acme.job.job_id)]})
    acme.job.refresh_from_db()
    assert acme.job.status == JobStatus.ACTIVE


def test_tenant_staff_see_the_error_but_not_the_traceback(acme):
    staff = member("vic", acme.tenant, StaffRole.VIEWER)
    page = staff.get(acme.pages()["execution"]).content.decode()
    assert "card declined" in page and "Traceback (most recent" not in page
    root = Client()
    root.force_login(User.objects.create_superuser("root", password="x"))
    assert "Traceback (most recent" in root.get(acme.pages()["execution"]).content.decode()


def test_workers_memberships_and_grants_are_the_platforms(acme):
    staff = member("ann", acme.tenant, StaffRole.ADMIN)
    assert staff.get("/admin/reaper/worker/").status_code == 403
    assert staff.get("/admin/chronocore/tenantmembership/").status_code == 403
    assert staff.get("/admin/chronocore/taskgrant/add/").status_code == 403
    assert staff.get("/api/v1/tenants/").status_code == 403  # the staff REST API neither
    index = staff.get("/admin/").content.decode()
    assert "/admin/scheduler/job/" in index and "/admin/reaper/worker/" not in index


def test_an_api_key_added_by_a_tenant_admin_is_pinned_to_their_tenant(acme, globex):
    staff = member("ann", acme.tenant, StaffRole.ADMIN)
    form = staff.get("/admin/chronocore/apikey/add/").content.decode()
    assert 'name="tenant"' not in form
    # A tenant field slipped into the POST is not a field of the form: ignored.
    answer = staff.post("/admin/chronocore/apikey/add/", {
        "name": "deploys", "tenant": str(globex.tenant.tenant_id)})
    assert answer.status_code == 200 and "API key issued" in answer.content.decode()
    key = ApiKey.objects.get(name="deploys")
    assert key.tenant_id == acme.tenant.tenant_id
    assert member("olga", acme.tenant, StaffRole.OPERATOR).get(
        "/admin/chronocore/apikey/add/").status_code == 403


def test_a_member_of_two_tenants_picks_one_of_them_only(acme, globex):
    from chronocore.models import Tenant

    third = Tenant.objects.create(slug="initech", name="Initech")
    user = User.objects.create_user("ann", password="x")
    add_member(user, acme.tenant, StaffRole.ADMIN)
    add_member(user, third, StaffRole.ADMIN)
    staff = Client()
    staff.force_login(user)
    form = staff.get("/admin/chronocore/apikey/add/").content.decode()
    assert "acme" in form and "initech" in form and "globex" not in form
    refused = staff.post("/admin/chronocore/apikey/add/", {
        "name": "x", "tenant": str(globex.tenant.tenant_id)})
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not ApiKey.objects.filter(name="x").exists()


def _counted(tenant, n: int) -> None:
    accumulator = rollups.Accumulator()
    at_ms = datetime_to_ms(datetime.now(UTC))
    for _ in range(n):
        accumulator.note_dispatched(at_ms, str(tenant.tenant_id), "billing.charge",
                                    lateness_ms=2)
    rollups.write_counts(accumulator.drain())


def test_the_dashboard_shows_tenant_staff_their_tenant_only(acme, globex):
    _counted(acme.tenant, 3)
    _counted(globex.tenant, 7)
    staff = member("ann", acme.tenant, StaffRole.VIEWER)
    data = staff.get("/admin/dashboard/data/").json()
    assert data["tenant"] == "acme"
    assert sum(p["dispatched"] for p in data["series"]) == 3
    assert data["workers"] == [] and data["timers_pending"] is None
    assert data["jobs_by_status"] == {"ACTIVE": acme.tenant.jobs.count()}
    refused = staff.get("/admin/dashboard/data/", {"tenant": "globex"})
    assert refused.status_code == 404 and refused.json()["detail"] == (
        "No tenant with the slug 'globex'.")
    page = staff.get("/admin/dashboard/").content.decode()
    assert 'value="acme" readonly' in page and "globex" not in page
    platform = Client()
    platform.force_login(platform_staff_user("pat"))
    everyone = platform.get("/admin/dashboard/data/").json()
    assert everyone["tenant"] is None
    assert sum(p["dispatched"] for p in everyone["series"]) == 10
    assert platform.get("/admin/dashboard/data/", {"tenant": "globex"}).json()["tenant"] == (
        "globex")
    assert "globex" in platform.get("/admin/dashboard/").content.decode()


def test_a_tenants_kept_figures_are_served_for_that_tenant_only(acme, globex, redis_client,
                                                                 monkeypatch):
    """The figures a web process keeps in Redis for one tenant's view are found under that
    tenant's id: another tenant's staff get their own, and 404 for the first tenant's slug,
    while the first tenant's figures are kept."""
    monkeypatch.setattr(dashboard, "DASHBOARD_CACHE_MS", 60_000)  # kept for the whole test
    _counted(acme.tenant, 3)
    _counted(globex.tenant, 7)
    platform = Client()
    platform.force_login(platform_staff_user("pat"))
    kept = platform.get("/admin/dashboard/data/", {"tenant": "acme"}).json()
    assert kept["tenant"] == "acme" and kept["source"] == "live"
    assert redis_client.get(dashboard.live_key(str(acme.tenant.tenant_id))) is not None

    gus = member("gus", globex.tenant, StaffRole.ADMIN)
    own = gus.get("/admin/dashboard/data/").json()
    assert own["tenant"] == "globex" and sum(p["dispatched"] for p in own["series"]) == 7
    assert gus.get("/admin/dashboard/data/", {"tenant": "acme"}).status_code == 404

    ann = member("ann", acme.tenant, StaffRole.VIEWER)
    again = ann.get("/admin/dashboard/data/").json()
    assert again["tenant"] == "acme" and sum(p["dispatched"] for p in again["series"]) == 3
    assert again["as_of"] == kept["as_of"]  # the kept figures, with their age
    assert again["source"] == "live" and again["age_s"] >= 0
    everyone = platform.get("/admin/dashboard/data/").json()
    assert sum(p["dispatched"] for p in everyone["series"]) == 10


def test_a_staff_user_of_no_tenant_sees_no_tenants_rows(acme):
    user = User.objects.create_user("nobody", password="x", is_staff=True)
    staff = Client()
    staff.force_login(user)
    assert staff.get("/admin/scheduler/job/").status_code == 403
    assert staff.get(acme.pages()["job"]).status_code == 403
    refused = staff.get("/admin/dashboard/data/")
    assert refused.status_code == 403 and "not a member" in refused.json()["detail"]
    assert staff.get("/admin/dashboard/").status_code == 403
    assert staff.get("/admin/audit/").status_code == 403


def test_the_audit_page_searches_tenant_staffs_own_tenant(acme, globex, indexer):
    ship_all(indexer)
    staff = member("ann", acme.tenant, StaffRole.VIEWER)
    page = staff.get("/admin/audit/", {"action": "job.created"})
    assert page.status_code == 200
    assert {r["tenant"] for r in page.context["rows"]} == {"acme"}
    refused = staff.get("/admin/audit/", {"tenant": "globex"})
    assert "No tenant with the slug or id" in refused.content.decode()
    assert refused.context["rows"] == []
    refused = staff.get("/admin/audit/", {"tenant": str(globex.tenant.tenant_id)})
    assert refused.context["rows"] == []


def test_chrono_tenant_staff_adds_lists_and_removes_members(tenant, capsys):
    call_command("tenant_staff", "add", "--tenant", "acme", "--user", "alice", "--create",
                 "--role", "operator")
    alice = User.objects.get(username="alice")
    assert alice.is_staff and not alice.is_superuser and not alice.has_usable_password()
    assert TenantMembership.objects.get(user=alice, tenant=tenant).role == "operator"
    call_command("tenant_staff", "add", "--tenant", "acme", "--user", "alice", "--role", "admin")
    call_command("tenant_staff", "list", "--tenant", "acme")
    out = capsys.readouterr().out
    assert "now: alice is admin of tenant acme" in out and "alice\tadmin\t" in out
    call_command("tenant_staff", "remove", "--tenant", "acme", "--user", "alice")
    assert not TenantMembership.objects.filter(user=alice).exists()
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no user 'bob'"):
        call_command("tenant_staff", "add", "--tenant", "acme", "--user", "bob")
    with pytest.raises(CommandError, match="not staff of tenant acme"):
        call_command("tenant_staff", "remove", "--tenant", "acme", "--user", "alice")
