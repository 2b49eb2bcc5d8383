"""Per-tenant limits: request rate and pending-job quota (429 with Retry-After), sizes (413)."""

from __future__ import annotations

import pytest

from scheduler.models import Job

pytestmark = pytest.mark.django_db

BODY = {"job_type": "tests.noop", "delay_ms": 60_000}


def test_over_the_rate_a_tenant_gets_429_with_retry_after(tenant_api, chrono_config):
    chrono_config(api_rate_per_minute=3)
    statuses = [tenant_api.get("/api/v1/jobs/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = tenant_api.get("/api/v1/jobs/")
    assert response.status_code == 429
    retry_after = int(response.headers["Retry-After"])
    assert 1 <= retry_after <= 20  # one request per 20 s comes back
    assert response.json() == {"detail": (
        f"Rate limit of 3 requests a minute reached. Expected available in {retry_after} "
        "seconds.")}


def test_writes_count_against_the_rate_too(tenant_api, chrono_config):
    chrono_config(api_rate_per_minute=1)
    assert tenant_api.post_json("/api/v1/jobs/", BODY).status_code == 201
    response = tenant_api.post_json("/api/v1/jobs/", BODY)
    assert response.status_code == 429 and int(response.headers["Retry-After"]) >= 1
    assert Job.objects.count() == 1


def test_over_the_pending_job_quota_a_create_gets_429_with_retry_after(
    tenant_api, chrono_config
):
    chrono_config(pending_jobs_quota=2, pending_jobs_recount_s=7)
    assert tenant_api.post_json("/api/v1/jobs/", BODY).status_code == 201
    assert tenant_api.post_json("/api/v1/jobs/", BODY).status_code == 201
    response = tenant_api.post_json("/api/v1/jobs/", BODY)
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "7"
    assert response.json() == {"detail": (
        "This tenant has 2 pending jobs and the quota is 2; 1 more would pass it. Cancel or "
        "delete jobs that are no longer needed, or wait for some to run.")}
    assert Job.objects.count() == 2


def test_the_quota_counts_only_pending_jobs_and_bulk_is_refused_whole(
    tenant_api, other_api, chrono_config, redis_client
):
    chrono_config(pending_jobs_quota=3)
    job_id = tenant_api.post_json("/api/v1/jobs/", BODY).json()["job_id"]
    response = tenant_api.post_json("/api/v1/jobs/bulk/", [BODY, BODY, BODY])
    assert response.status_code == 429
    assert Job.objects.count() == 1
    tenant_api.post(f"/api/v1/jobs/{job_id}/cancel/")
    redis_client.flushdb()  # the cached count is recounted (as every few seconds in production)
    assert tenant_api.post_json("/api/v1/jobs/bulk/", [BODY, BODY, BODY]).status_code == 201
    assert other_api.post_json("/api/v1/jobs/bulk/", [BODY, BODY, BODY]).status_code == 201


def test_a_bulk_request_over_the_item_limit_is_413(tenant_api, chrono_config):
    chrono_config(bulk_max_items=3)
    response = tenant_api.post_json("/api/v1/jobs/bulk/", [BODY] * 4)
    assert response.status_code == 413
    assert response.json() == {"detail": (
        "The request holds 4 jobs; at most 3 are accepted per request. Split it into several "
        "requests.")}


def test_a_bulk_body_over_its_byte_limit_is_413(tenant_api, chrono_config):
    chrono_config(bulk_max_request_bytes=4096, api_max_request_bytes=1024)
    small_enough = [BODY] * 40  # ~1.6 kB: over the single-request limit, under bulk's
    assert tenant_api.post_json("/api/v1/jobs/bulk/", small_enough).status_code == 201
    response = tenant_api.post_json("/api/v1/jobs/bulk/", [BODY] * 200)
    assert response.status_code == 413
    assert response.json()["detail"].startswith("The request body is ")
    assert "this endpoint accepts at most 4096 bytes" in response.json()["detail"]


def test_page_size_is_capped(tenant_api, chrono_config):
    chrono_config(api_max_page_size=5, api_default_page_size=2)
    for _ in range(6):
        tenant_api.post_json("/api/v1/jobs/", BODY)
    assert len(tenant_api.get("/api/v1/jobs/").json()["results"]) == 2
    assert len(tenant_api.get("/api/v1/jobs/?page_size=5").json()["results"]) == 5
    response = tenant_api.get("/api/v1/jobs/?page_size=6")
    assert response.status_code == 400
    assert response.json() == {"page_size": [
        "'6' is not allowed; use a whole number from 1 to 5."]}
