"""The operator commands (``chrono tenants``, ``api-keys``, ``jobs``, ``executions``) through
``call_command`` against the real PostgreSQL and Redis: every action's ``--json`` output, its
change made through the owning layer, and the error (and exit code) of each refusal."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from chronoadmin.operator_cli import Conflict, ExitCode, Invalid, NotFound, PartlyDone
from chronocore.models import ApiKey, Tenant
from scheduler import api
from scheduler.models import Execution, ExecutionStatus, Job, JobStatus
from scheduler.timers import timer_store
from search.models import AuditEvent

pytestmark = pytest.mark.django_db


def chrono(*args: str) -> object:
    """Run ``chrono ARGS --json`` in-process; its JSON output."""
    out = io.StringIO()
    call_command(args[0].replace("-", "_"), *args[1:], "--json", stdout=out)
    return json.loads(out.getvalue())


def chrono_text(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def refused(error: type, *args: str) -> dict:
    """Run ``chrono ARGS --json`` expecting ``error``; the JSON error it printed."""
    out = io.StringIO()
    with pytest.raises(error) as raised:
        call_command(args[0].replace("-", "_"), *args[1:], "--json", stdout=out)
    assert raised.value.returncode == int(error.exit_code)
    printed = json.loads(out.getvalue())["error"]
    assert printed["exit_code"] == int(error.exit_code) and printed["code"] == error.code
    assert printed["message"] == raised.value.message
    return printed


def test_the_exit_codes_are_the_documented_ones():
    assert [int(code) for code in ExitCode] == [0, 1, 2, 3, 4, 5]
    assert (Invalid.exit_code, NotFound.exit_code, Conflict.exit_code,
            PartlyDone.exit_code) == (2, 3, 4, 5)


# ------------------------------------------------------------------------------- tenants


def test_tenants_create_list_disable_and_enable():
    created = chrono("tenants", "create", "initech", "--name", "Initech")
    assert (created["slug"], created["name"], created["is_active"]) == ("initech", "Initech",
                                                                        True)
    tenant = Tenant.objects.get(slug="initech")
    assert created["tenant_id"] == str(tenant.tenant_id)
    assert refused(Conflict, "tenants", "create", "initech")["message"].endswith(
        "already exists")
    assert "not valid" in refused(Invalid, "tenants", "create", "no spaces")["message"]
    chrono("tenants", "create", "hooli")
    assert [t["slug"] for t in chrono("tenants", "list")] == ["hooli", "initech"]

    disabled = chrono("tenants", "disable", "initech")
    assert disabled["is_active"] is False
    assert not Tenant.objects.get(slug="initech").is_active
    assert "already disabled" in refused(Conflict, "tenants", "disable", "initech")["message"]
    assert chrono("tenants", "enable", "initech")["is_active"] is True
    refused(NotFound, "tenants", "disable", "nobody")


def test_a_disabled_tenants_keys_are_refused(tenant, redis_client):
    key = chrono("api-keys", "issue", "--tenant", "acme")["key"]
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/jobs/").status_code == 200
    chrono("tenants", "disable", "acme")
    assert client.get("/api/v1/jobs/").status_code in (401, 403)


def test_tenants_list_prints_a_table_by_default(tenant):
    table = chrono_text("tenants", "list")
    header, _, row = table.splitlines()[:3]
    assert header.split() == ["slug", "name", "is_active", "tenant_id", "created_at"]
    assert row.split()[:3] == ["acme", "Acme", "True"]


# ------------------------------------------------------------------------------ api keys


def test_api_keys_issue_list_and_revoke_by_slug(tenant, other_tenant, redis_client):
    issued = chrono("api-keys", "issue", "--tenant", "acme", "--name", "ci")
    assert issued["key"].startswith(f"chrono_{issued['prefix']}_")
    assert (issued["tenant"], issued["name"]) == (str(tenant.tenant_id), "ci")
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued['key']}")
    assert client.get("/api/v1/jobs/").status_code == 200

    listed = chrono("api-keys", "list", "--tenant", "acme")
    assert [k["prefix"] for k in listed] == [issued["prefix"]]
    assert "key" not in listed[0]  # shown once, when issued
    assert chrono("api-keys", "list", "--tenant", "globex") == []

    refused(NotFound, "api-keys", "revoke", "--tenant", "globex", issued["prefix"])
    revoked = chrono("api-keys", "revoke", "--tenant", "acme", issued["key"])
    assert revoked["revoked_at"] is not None
    assert client.get("/api/v1/jobs/").status_code == 401
    assert "already revoked" in refused(Conflict, "api-keys", "revoke", "--tenant", "acme",
                                        issued["key_id"])["message"]
    assert chrono("api-keys", "list", "--tenant", "acme") == []
    assert [k["prefix"] for k in chrono("api-keys", "list", "--tenant", "acme", "--all")] == [
        issued["prefix"]]
    refused(NotFound, "api-keys", "issue", "--tenant", "nobody")


# ---------------------------------------------------------------------------------- jobs


def test_jobs_list_filters_and_shows(tenant, other_tenant, redis_client):
    cron = api.schedule_cron("tests.report", tenant=tenant, cron="0 9 * * *",
                             timezone="Europe/Paris", name="morning")
    once = api.schedule_once("tests.noop", tenant=tenant, delay=600, queue="slow")
    api.schedule_once("tests.noop", tenant=other_tenant, delay=600)
    api.pause(once.job_id, tenant=tenant)

    listed = chrono("jobs", "list", "--tenant", "acme")
    assert {j["job_id"] for j in listed} == {str(cron.job_id), str(once.job_id)}
    assert [j["job_id"] for j in chrono("jobs", "list", "--tenant", "acme", "--status",
                                        "paused")] == [str(once.job_id)]
    assert [j["job_id"] for j in chrono("jobs", "list", "--tenant", "acme", "--task",
                                        "tests.report")] == [str(cron.job_id)]
    assert [j["job_id"] for j in chrono("jobs", "list", "--tenant", "acme", "--queue",
                                        "slow")] == [str(once.job_id)]
    assert len(chrono("jobs", "list", "--tenant", "acme", "--limit", "1")) == 1

    shown = chrono("jobs", "show", "--tenant", "acme", str(cron.job_id))
    assert (shown["name"], shown["cron_expression"], len(shown["next_fire_times"])) == (
        "morning", "0 9 * * *", 5)
    assert shown["next_fire_times"][0]["local"].endswith(("+01:00", "+02:00"))
    refused(NotFound, "jobs", "show", "--tenant", "globex", str(cron.job_id))


def test_jobs_pause_resume_trigger_and_cancel_through_the_api(
    tenant, other_tenant, redis_client, django_capture_on_commit_callbacks
):
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="0 9 * * *")
    job_id = str(job.job_id)
    store = timer_store()
    with django_capture_on_commit_callbacks(execute=True):
        paused = chrono("jobs", "pause", "--tenant", "acme", job_id)
    assert (paused["result"], paused["status"]) == ("paused", "PAUSED")
    assert store.fire_time_of(job_id) is None
    printed = refused(Conflict, "jobs", "pause", "--tenant", "acme", job_id)
    assert "is PAUSED" in printed["message"] and "nothing changed" in printed["message"]
    refused(Conflict, "jobs", "trigger", "--tenant", "acme", job_id)

    with django_capture_on_commit_callbacks(execute=True):
        resumed = chrono("jobs", "resume", "--tenant", "acme", job_id)
    assert resumed["status"] == "ACTIVE" and store.fire_time_of(job_id) is not None
    refused(Conflict, "jobs", "resume", "--tenant", "acme", job_id)

    before = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        triggered = chrono("jobs", "trigger", "--tenant", "acme", job_id)
    assert triggered["result"] == "triggered"
    next_run = Job.objects.get(job_id=job_id).next_run_at
    assert before - timedelta(seconds=1) <= next_run <= timezone.now()

    refused(NotFound, "jobs", "cancel", "--tenant", "globex", job_id)
    with django_capture_on_commit_callbacks(execute=True):
        cancelled = chrono("jobs", "cancel", "--tenant", "acme", job_id)
    assert cancelled["status"] == JobStatus.CANCELLED and cancelled["cancelled_at"]
    assert store.fire_time_of(job_id) is None
    refused(Conflict, "jobs", "cancel", "--tenant", "acme", job_id)

    actions = AuditEvent.objects.filter(job_id=job_id).exclude(action="job.created")
    assert sorted(actions.values_list("action", flat=True)) == [
        "job.cancelled", "job.paused", "job.resumed", "job.triggered"]
    assert {actor.split(":")[0] for actor in actions.values_list("actor", flat=True)} == {"cli"}
    refused(NotFound, "jobs", "pause", "--tenant", "acme", str(uuid.uuid4()))


def test_a_job_id_that_is_not_a_uuid_is_a_usage_error(tenant):
    with pytest.raises(CommandError, match="invalid UUID"):
        call_command("jobs", "pause", "--tenant", "acme", "not-a-uuid")


def test_jobs_load_writes_the_valid_lines_by_the_bulk_path_and_reports_the_others(
    tenant, redis_client, tmp_path, django_capture_on_commit_callbacks
):
    lines = [
        {"job_type": "tests.noop", "delay_ms": 60_000, "args": [1]},
        "not json",
        {"job_type": "tests.noop", "cron_expression": "*/5 * * * *", "timezone": "UTC"},
        {"job_type": "tests.noop", "delay_ms": -1},
        {"job_type": "tests.noop", "run_at": "2099-01-01T00:00:00Z", "name": "far"},
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line)
                              for line in lines) + "\n\n")
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(PartlyDone) as partly:
        call_command("jobs", "load", str(path), "--tenant", "acme", "--batch", "2", "--json",
                     stdout=out)
    assert partly.value.returncode == 5
    report = json.loads(out.getvalue())
    assert (report["created"], report["failed"]) == (3, 2)
    assert [(e["line"], e["field"]) for e in report["errors"]] == [
        (2, "non_field_errors"), (4, "delay_ms")]
    assert report["ids"][1] is None and report["ids"][3] is None
    written = {str(j.job_id): j for j in Job.objects.filter(tenant=tenant)}
    assert set(written) == {i for i in report["ids"] if i}
    assert written[report["ids"][4]].name == "far"
    assert timer_store().pending_count() == 3


def test_jobs_load_of_valid_lines_exits_zero_and_refuses_a_bad_batch(tenant, redis_client,
                                                                     tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text(json.dumps({"job_type": "tests.noop", "delay_ms": 1_000}) + "\n")
    report = chrono("jobs", "load", str(path), "--tenant", "acme")
    assert (report["created"], report["failed"], report["errors"]) == (1, 0, [])
    assert "--batch 0" in refused(Invalid, "jobs", "load", str(path), "--tenant", "acme",
                                  "--batch", "0")["message"]
    refused(NotFound, "jobs", "load", str(tmp_path / "missing.jsonl"), "--tenant", "acme")


# ---------------------------------------------------------------------------- executions


def _execution(job: Job, status: str, **fields) -> Execution:
    return Execution.objects.create(job=job, tenant_id=job.tenant_id, status=status,
                                    scheduled_for=timezone.now(), **fields)


def test_executions_list_and_show(tenant, other_tenant, redis_client):
    job = api.schedule_once("tests.noop", tenant=tenant, delay=600)
    other_job = api.schedule_once("tests.noop", tenant=tenant, delay=600)
    failed = _execution(job, ExecutionStatus.FAILED, error="ValueError: boom",
                        traceback="Traceback (most recent call last): ...", attempt=2)
    ok = _execution(other_job, ExecutionStatus.SUCCEEDED, result={"n": 1})
    foreign = _execution(api.schedule_once("tests.noop", tenant=other_tenant, delay=600),
                         ExecutionStatus.SUCCEEDED)

    listed = chrono("executions", "list", "--tenant", "acme")
    assert {e["execution_id"] for e in listed} == {str(failed.execution_id),
                                                  str(ok.execution_id)}
    assert [e["execution_id"] for e in chrono("executions", "list", "--tenant", "acme",
                                              "--job", str(job.job_id))] == [
        str(failed.execution_id)]
    assert [e["execution_id"] for e in chrono("executions", "list", "--tenant", "acme",
                                              "--status", "succeeded")] == [
        str(ok.execution_id)]

    shown = chrono("executions", "show", "--tenant", "acme", str(failed.execution_id))
    assert (shown["status"], shown["attempt"], shown["error"]) == ("FAILED", 2,
                                                                   "ValueError: boom")
    assert shown["traceback"].startswith("Traceback")
    refused(NotFound, "executions", "show", "--tenant", "acme", str(foreign.execution_id))
    table = chrono_text("executions", "list", "--tenant", "acme")
    assert str(failed.execution_id) in table and "FAILED" in table


def test_every_operator_command_answers_json_for_an_unknown_tenant():
    for args in (("api-keys", "list"), ("jobs", "list"), ("executions", "list")):
        refused(NotFound, *args, "--tenant", "nobody")
    assert ApiKey.objects.count() == 0
