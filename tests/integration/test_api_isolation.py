"""Two tenants never see or change each other's data: another tenant's id answers 404, exactly
as an id that does not exist, and nothing about the object leaks."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from scheduler.models import Execution, ExecutionStatus, Job, JobStatus

pytestmark = pytest.mark.django_db

NOT_FOUND = {"detail": "No job with this id."}


@pytest.fixture
def their_job(other_api):
    return other_api.create_job(name="globex secret", delay_ms=600_000)


def execution_of(job_id: str, **fields) -> Execution:
    job = Job.objects.get(job_id=job_id)
    return Execution.objects.create(
        job=job, tenant_id=job.tenant_id, scheduled_for=timezone.now(), **fields)


def test_list_shows_only_the_callers_jobs(tenant_api, other_api, their_job):
    mine = tenant_api.create_job(name="acme job")
    assert [j["job_id"] for j in tenant_api.get("/api/v1/jobs/").json()["results"]] == [
        mine["job_id"]]
    assert [j["job_id"] for j in other_api.get("/api/v1/jobs/").json()["results"]] == [
        their_job["job_id"]]
    response = tenant_api.get("/api/v1/jobs/?name=globex%20secret")
    assert response.json()["results"] == []


def test_retrieve_of_another_tenants_job_is_404_like_a_missing_one(tenant_api, their_job):
    theirs = tenant_api.get(f"/api/v1/jobs/{their_job['job_id']}/")
    missing = tenant_api.get(f"/api/v1/jobs/{uuid.uuid4()}/")
    assert (theirs.status_code, theirs.json()) == (404, NOT_FOUND)
    assert (missing.status_code, missing.json()) == (404, NOT_FOUND)


def test_update_of_another_tenants_job_is_404_and_changes_nothing(tenant_api, their_job):
    response = tenant_api.patch_json(f"/api/v1/jobs/{their_job['job_id']}/",
                                     {"run_at": "2099-01-01T00:00:00Z"})
    assert (response.status_code, response.json()) == (404, NOT_FOUND)
    assert Job.objects.get(job_id=their_job["job_id"]).next_run_at.year != 2099


def test_delete_of_another_tenants_job_is_404_and_deletes_nothing(tenant_api, their_job):
    response = tenant_api.delete(f"/api/v1/jobs/{their_job['job_id']}/")
    assert (response.status_code, response.json()) == (404, NOT_FOUND)
    assert Job.objects.filter(job_id=their_job["job_id"]).exists()


@pytest.mark.parametrize("action", ["pause", "resume", "trigger", "cancel"])
def test_actions_on_another_tenants_job_are_404_and_change_nothing(
    tenant_api, their_job, action
):
    before = Job.objects.get(job_id=their_job["job_id"])
    response = tenant_api.post(f"/api/v1/jobs/{their_job['job_id']}/{action}/")
    assert (response.status_code, response.json()) == (404, NOT_FOUND)
    after = Job.objects.get(job_id=their_job["job_id"])
    assert (after.status, after.next_run_at) == (before.status, before.next_run_at)
    assert after.status == JobStatus.ACTIVE


def test_executions_list_and_retrieve_are_scoped_to_the_caller(
    tenant_api, other_api, their_job
):
    mine = tenant_api.create_job()
    my_execution = execution_of(mine["job_id"], status=ExecutionStatus.SUCCEEDED,
                                worker_id="w-1", started_at=timezone.now())
    their_execution = execution_of(their_job["job_id"], status=ExecutionStatus.SUCCEEDED,
                                   worker_id="w-1", started_at=timezone.now())

    def listed(api, query: str = "") -> list[str]:
        response = api.get(f"/api/v1/executions/{query}")
        assert response.status_code == 200, response.json()
        return [e["execution_id"] for e in response.json()["results"]]

    assert listed(tenant_api) == [str(my_execution.execution_id)]
    assert listed(other_api) == [str(their_execution.execution_id)]
    assert listed(tenant_api, f"?job={their_job['job_id']}") == []
    assert listed(tenant_api, "?worker=w-1") == [str(my_execution.execution_id)]
    response = tenant_api.get(f"/api/v1/executions/{their_execution.execution_id}/")
    assert (response.status_code, response.json()) == (404, {
        "detail": "No execution with this id."})
    response = tenant_api.get(f"/api/v1/executions/{my_execution.execution_id}/")
    assert response.status_code == 200 and response.json()["job_id"] == mine["job_id"]


def test_executions_filter_by_status_and_started_range(tenant_api):
    job_id = tenant_api.create_job()["job_id"]
    started = timezone.now()
    ran = execution_of(job_id, status=ExecutionStatus.SUCCEEDED, started_at=started)
    failed = execution_of(job_id, status=ExecutionStatus.FAILED,
                          started_at=started - timezone.timedelta(hours=2), attempt=2)

    def listed(query: str) -> set[str]:
        return {e["execution_id"] for e in
                tenant_api.get(f"/api/v1/executions/{query}").json()["results"]}

    assert listed("?status=FAILED") == {str(failed.execution_id)}
    hour_ago = (started - timezone.timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert listed(f"?started_after={hour_ago}") == {str(ran.execution_id)}
    assert listed(f"?started_before={hour_ago}") == {str(failed.execution_id)}
    assert listed(f"?job={job_id}&ordering=scheduled_for") == {
        str(ran.execution_id), str(failed.execution_id)}


def test_bulk_creates_jobs_only_for_the_caller(tenant_api, other_api):
    response = tenant_api.post_json("/api/v1/jobs/bulk/", [
        {"job_type": "tests.noop", "delay_ms": 1000} for _ in range(3)])
    assert response.status_code == 201
    ids = response.json()["ids"]
    assert set(Job.objects.filter(job_id__in=ids).values_list("tenant_id", flat=True)) == {
        tenant_api.tenant.tenant_id}
    assert other_api.get("/api/v1/jobs/").json()["results"] == []
    for job_id in ids:
        assert other_api.get(f"/api/v1/jobs/{job_id}/").status_code == 404


def test_bulk_cannot_name_another_tenant(tenant_api, other_api):
    response = tenant_api.post_json("/api/v1/jobs/bulk/", [
        {"job_type": "tests.noop", "delay_ms": 1000, "tenant": str(other_api.tenant.tenant_id)}])
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "tenant"
    assert not Job.objects.exists()


def test_idempotency_keys_are_per_tenant(tenant_api, other_api):
    body = {"job_type": "tests.noop", "delay_ms": 1000}
    mine = tenant_api.post_json("/api/v1/jobs/", body, **{"Idempotency-Key": "k-1"})
    theirs = other_api.post_json("/api/v1/jobs/", body | {"name": "x"},
                                 **{"Idempotency-Key": "k-1"})
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["job_id"] != theirs.json()["job_id"]
    assert "Idempotent-Replayed" not in theirs.headers


def test_rate_limits_are_per_tenant(tenant_api, other_api, chrono_config):
    chrono_config(api_rate_per_minute=2)
    assert [tenant_api.get("/api/v1/jobs/").status_code for _ in range(3)] == [200, 200, 429]
    assert other_api.get("/api/v1/jobs/").status_code == 200
