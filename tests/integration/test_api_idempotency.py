"""Idempotency-Key on POST: the same request gets the first answer; a different one, 422."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from chronocore.models import IdempotencyRecord
from scheduler.models import Job

pytestmark = pytest.mark.django_db

BODY = {"job_type": "tests.noop", "delay_ms": 60_000}


def post(api, body=BODY, key="key-1", path="/api/v1/jobs/"):
    return api.post_json(path, body, **{"Idempotency-Key": key})


def test_the_same_key_and_body_replays_the_first_response_and_creates_one_job(tenant_api):
    first = post(tenant_api)
    second = post(tenant_api)
    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert Job.objects.count() == 1


def test_the_same_key_with_a_different_body_is_422(tenant_api):
    post(tenant_api)
    response = post(tenant_api, BODY | {"name": "other"})
    assert response.status_code == 422
    assert response.json() == {"detail": (
        "Idempotency-Key 'key-1' was used with a different request (method, path or body) in "
        "the last 24 h; use a new key for a new request.")}
    assert Job.objects.count() == 1


def test_the_same_key_on_another_endpoint_is_422(tenant_api):
    job_id = post(tenant_api).json()["job_id"]
    response = tenant_api.post(f"/api/v1/jobs/{job_id}/pause/", headers={
        "Idempotency-Key": "key-1"})
    assert response.status_code == 422


def test_a_failed_request_stores_nothing_so_the_fixed_one_goes_through(tenant_api):
    bad = post(tenant_api, {"job_type": "tests.noop", "delay_ms": -1})
    assert bad.status_code == 400
    good = post(tenant_api, {"job_type": "tests.noop", "delay_ms": 1})
    assert good.status_code == 201
    assert "Idempotent-Replayed" not in good.headers


def test_a_bulk_request_that_created_nothing_stores_nothing_so_the_fixed_one_goes_through(
    tenant_api,
):
    # The bulk endpoint answers 400 itself (no exception) when no item is valid.
    bad = post(tenant_api, [BODY | {"delay_ms": -1}], key="bulk-1", path="/api/v1/jobs/bulk/")
    assert bad.status_code == 400
    assert not IdempotencyRecord.objects.exists()
    good = post(tenant_api, [BODY], key="bulk-1", path="/api/v1/jobs/bulk/")
    assert good.status_code == 201, good.json()
    assert "Idempotent-Replayed" not in good.headers
    assert Job.objects.count() == 1
    replay = post(tenant_api, [BODY], key="bulk-1", path="/api/v1/jobs/bulk/")
    assert (replay.status_code, replay.headers["Idempotent-Replayed"]) == (201, "true")
    assert Job.objects.count() == 1


def test_an_action_refused_with_409_stores_nothing(tenant_api):
    job_id = post(tenant_api, key="create").json()["job_id"]
    tenant_api.post(f"/api/v1/jobs/{job_id}/pause/")
    path = f"/api/v1/jobs/{job_id}/trigger/"
    assert tenant_api.post(path, headers={"Idempotency-Key": "act"}).status_code == 409
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["create"]


def test_bulk_and_actions_replay_too(tenant_api):
    items = [BODY, BODY | {"delay_ms": -1}]
    first = post(tenant_api, items, path="/api/v1/jobs/bulk/")
    second = post(tenant_api, items, path="/api/v1/jobs/bulk/")
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert Job.objects.count() == 1
    job_id = first.json()["ids"][0]
    pause = tenant_api.post(f"/api/v1/jobs/{job_id}/pause/", headers={"Idempotency-Key": "p"})
    tenant_api.post(f"/api/v1/jobs/{job_id}/resume/")
    replay = tenant_api.post(f"/api/v1/jobs/{job_id}/pause/", headers={"Idempotency-Key": "p"})
    assert replay.json() == pause.json() and replay.headers["Idempotent-Replayed"] == "true"
    assert Job.objects.get(job_id=job_id).status == "ACTIVE"  # the replay did not pause again


def test_a_request_still_running_under_the_key_gets_409(tenant_api):
    first = post(tenant_api, key="k")
    IdempotencyRecord.objects.filter(key="k").update(response_status=None, response_body=None)
    response = post(tenant_api, key="k")
    assert response.status_code == 409
    assert response.json() == {"detail": (
        "A request with Idempotency-Key 'k' is still being processed; retry in a few seconds to "
        "get its response.")}
    assert first.status_code == 201


def test_a_claim_abandoned_by_a_dead_request_is_taken_over(tenant_api):
    post(tenant_api, key="k")
    IdempotencyRecord.objects.filter(key="k").update(
        response_status=None, response_body=None,
        created_at=timezone.now() - timedelta(minutes=5))
    response = post(tenant_api, key="k")
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response.headers


def test_keys_expire_after_24_hours(tenant_api):
    post(tenant_api, key="k")
    IdempotencyRecord.objects.filter(key="k").update(
        created_at=timezone.now() - timedelta(hours=25))
    response = post(tenant_api, BODY | {"name": "a new request"}, key="k")
    assert response.status_code == 201
    assert Job.objects.count() == 2


def test_an_unusable_key_is_400(tenant_api):
    response = post(tenant_api, key="x" * 201)
    assert response.status_code == 400
    assert response.json() == {"Idempotency-Key": [
        "Use 1 to 200 printable ASCII characters without spaces, e.g. a UUID."]}


def test_expired_records_are_purged(tenant_api):
    from chronoadmin.api.idempotency import purge_expired

    post(tenant_api, key="old")
    post(tenant_api, BODY | {"name": "2"}, key="new")
    IdempotencyRecord.objects.filter(key="old").update(
        created_at=timezone.now() - timedelta(hours=25))
    assert purge_expired() == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["new"]
