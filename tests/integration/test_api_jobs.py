"""Jobs over the REST API: create (one-time and cron), read, list, change, delete, act."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.clock import datetime_to_ms, now_ms
from scheduler.models import Job, JobStatus
from scheduler.timers import timer_store

pytestmark = pytest.mark.django_db


def in_minutes(minutes: float) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()


def test_a_one_time_job_created_with_run_at_gets_its_timer_after_commit(
    tenant_api, django_capture_on_commit_callbacks
):
    run_at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post_json("/api/v1/jobs/", {
            "job_type": "billing.tasks.send_invoice", "run_at": run_at.isoformat(),
            "args": [1, "two"], "kwargs": {"invoice": 7}, "queue": "billing", "name": "invoice 7",
            "max_retries": 3,
        })
    assert response.status_code == 201, response.json()
    body = response.json()
    job = Job.objects.get(job_id=body["job_id"])
    assert (job.tenant_id, job.job_type, job.queue, job.max_retries) == (
        tenant_api.tenant.tenant_id, "billing.tasks.send_invoice", "billing", 3)
    assert (job.args, job.kwargs, job.name) == ([1, "two"], {"invoice": 7}, "invoice 7")
    assert job.next_run_at == run_at
    assert timer_store().fire_time_of(body["job_id"]) == datetime_to_ms(run_at)
    assert body["next_fire_times"] == [
        {"utc": run_at.isoformat().replace("+00:00", "Z"), "local": run_at.isoformat()}
    ]


def test_a_job_created_with_delay_ms_fires_that_long_after_now(tenant_api):
    before = now_ms()
    body = tenant_api.create_job(delay_ms=90_000)
    fire_ms = datetime_to_ms(Job.objects.get(job_id=body["job_id"]).next_run_at)
    assert before + 90_000 <= fire_ms <= now_ms() + 90_000


def test_a_cron_job_shows_its_next_five_fire_times_in_utc_and_local_time(tenant_api):
    response = tenant_api.post_json("/api/v1/jobs/", {
        "job_type": "reports.daily", "cron_expression": "30 9 * * *",
        "timezone": "America/New_York",
    })
    assert response.status_code == 201, response.json()
    body = tenant_api.get(f"/api/v1/jobs/{response.json()['job_id']}/").json()
    fire_times = body["next_fire_times"]
    assert len(fire_times) == 5
    for fire_time in fire_times:
        local = datetime.fromisoformat(fire_time["local"])
        utc = datetime.fromisoformat(fire_time["utc"].replace("Z", "+00:00"))
        assert (local.hour, local.minute) == (9, 30)
        assert local == utc
        assert local.utcoffset() in (timedelta(hours=-5), timedelta(hours=-4))
    assert body["cron_expression"] == "30 9 * * *"
    assert body["timezone"] == "America/New_York"


def test_list_filters_by_status_job_type_queue_and_time_ranges(tenant_api):
    early = tenant_api.create_job(job_type="a.early", delay_ms=60_000, queue="q1")
    late = tenant_api.create_job(job_type="b.late", delay_ms=3_600_000, queue="q2")
    paused = tenant_api.create_job(job_type="a.early", delay_ms=120_000, queue="q1")
    assert tenant_api.post(f"/api/v1/jobs/{paused['job_id']}/pause/").status_code == 200

    def ids(query: str) -> set[str]:
        response = tenant_api.get(f"/api/v1/jobs/{query}")
        assert response.status_code == 200, response.json()
        return {job["job_id"] for job in response.json()["results"]}

    assert ids("") == {early["job_id"], late["job_id"], paused["job_id"]}
    assert ids("?status=PAUSED") == {paused["job_id"]}
    assert ids("?job_type=a.early&status=ACTIVE") == {early["job_id"]}
    assert ids("?queue=q2") == {late["job_id"]}
    cutoff = in_minutes(30).replace("+00:00", "Z")
    assert ids(f"?next_run_at_before={cutoff}") == {early["job_id"], paused["job_id"]}
    assert ids(f"?next_run_at_after={cutoff}") == {late["job_id"]}
    assert ids(f"?created_after={in_minutes(-1).replace('+00:00', 'Z')}") == {
        early["job_id"], late["job_id"], paused["job_id"]}
    assert ids(f"?created_before={in_minutes(-1).replace('+00:00', 'Z')}") == set()


def test_cursor_pages_walk_every_job_once_in_order(tenant_api):
    created = [tenant_api.create_job(name=f"job {i}")["job_id"] for i in range(7)]
    seen: list[str] = []
    url = "/api/v1/jobs/?page_size=3&ordering=created_at"
    while url:
        page = tenant_api.get(url).json()
        assert len(page["results"]) <= 3
        seen += [job["job_id"] for job in page["results"]]
        url = page["next"]
    assert seen == created


def test_jobs_created_in_one_bulk_request_page_without_gaps_or_repeats(tenant_api):
    items = [{"job_type": "tests.noop", "delay_ms": 60_000, "name": str(i)} for i in range(25)]
    ids = tenant_api.post_json("/api/v1/jobs/bulk/", items).json()["ids"]
    seen: list[str] = []
    url = "/api/v1/jobs/?page_size=4"
    while url:
        page = tenant_api.get(url).json()
        seen += [job["job_id"] for job in page["results"]]
        url = page["next"]
    assert sorted(seen) == sorted(ids) and len(seen) == 25  # one created_at for all of them


def test_patch_moves_a_one_time_job_and_its_timer(
    tenant_api, django_capture_on_commit_callbacks
):
    job = tenant_api.create_job(delay_ms=60_000)
    run_at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.patch_json(f"/api/v1/jobs/{job['job_id']}/",
                                         {"run_at": run_at.isoformat()})
    assert response.status_code == 200, response.json()
    assert response.json()["next_run_at"] == run_at.isoformat().replace("+00:00", "Z")
    assert timer_store().fire_time_of(job["job_id"]) == datetime_to_ms(run_at)


def test_patch_changes_a_cron_jobs_expression_and_time_zone(tenant_api):
    response = tenant_api.post_json("/api/v1/jobs/", {
        "job_type": "reports.daily", "cron_expression": "0 9 * * *"})
    job_id = response.json()["job_id"]
    response = tenant_api.patch_json(f"/api/v1/jobs/{job_id}/", {
        "cron_expression": "15 7 * * mon-fri", "timezone": "Europe/Paris"})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["cron_expression"], body["timezone"]) == ("15 7 * * mon-fri", "Europe/Paris")
    for fire_time in body["next_fire_times"]:
        local = datetime.fromisoformat(fire_time["local"])
        assert (local.hour, local.minute) == (7, 15) and local.weekday() < 5


def test_put_is_not_offered_only_patch(tenant_api):
    job = tenant_api.create_job()
    response = tenant_api.put(f"/api/v1/jobs/{job['job_id']}/", {"run_at": in_minutes(5)},
                              format="json")
    assert response.status_code == 405


def test_delete_removes_the_job_and_its_timer(tenant_api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = tenant_api.create_job()
    assert timer_store().fire_time_of(job["job_id"]) is not None
    with django_capture_on_commit_callbacks(execute=True):
        assert tenant_api.delete(f"/api/v1/jobs/{job['job_id']}/").status_code == 204
    assert not Job.objects.filter(job_id=job["job_id"]).exists()
    assert timer_store().fire_time_of(job["job_id"]) is None
    assert tenant_api.get(f"/api/v1/jobs/{job['job_id']}/").status_code == 404


def test_pause_and_resume_take_the_timer_out_and_put_it_back(
    tenant_api, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        job_id = tenant_api.create_job(delay_ms=600_000)["job_id"]
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post(f"/api/v1/jobs/{job_id}/pause/")
    assert response.status_code == 200 and response.json()["status"] == "PAUSED"
    assert timer_store().fire_time_of(job_id) is None
    # Repeating an action that already took effect is fine.
    assert tenant_api.post(f"/api/v1/jobs/{job_id}/pause/").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post(f"/api/v1/jobs/{job_id}/resume/")
    assert response.status_code == 200 and response.json()["status"] == "ACTIVE"
    assert timer_store().fire_time_of(job_id) is not None


def test_trigger_fires_an_active_job_now(tenant_api, django_capture_on_commit_callbacks):
    job_id = tenant_api.create_job(delay_ms=3_600_000)["job_id"]
    before = now_ms()
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post(f"/api/v1/jobs/{job_id}/trigger/")
    assert response.status_code == 200
    assert before <= timer_store().fire_time_of(job_id) <= now_ms()


def test_trigger_of_a_paused_job_is_refused_with_what_to_do(tenant_api):
    job_id = tenant_api.create_job()["job_id"]
    tenant_api.post(f"/api/v1/jobs/{job_id}/pause/")
    response = tenant_api.post(f"/api/v1/jobs/{job_id}/trigger/")
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "The job is PAUSED; only an ACTIVE job can be triggered (resume a PAUSED job first).")


def test_cancel_stops_the_job_and_records_the_key_that_did_it(tenant_api):
    job_id = tenant_api.create_job()["job_id"]
    response = tenant_api.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 200
    assert response.json()["status"] == "CANCELLED"
    assert response.json()["next_fire_times"] == []
    job = Job.objects.get(job_id=job_id)
    assert job.status == JobStatus.CANCELLED
    assert job.cancelled_by == f"api-key:{tenant_api.full_key.split('_')[1]}"
    assert tenant_api.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
    response = tenant_api.post(f"/api/v1/jobs/{job_id}/resume/")
    assert response.status_code == 409
    assert response.json()["detail"] == "The job is CANCELLED; only a PAUSED job can be resumed."
    response = tenant_api.patch_json(f"/api/v1/jobs/{job_id}/", {"run_at": in_minutes(5)})
    assert response.status_code == 409
    assert response.json()["detail"] == "The job is CANCELLED; create a new job instead."


def test_an_action_with_a_body_is_refused(tenant_api):
    job_id = tenant_api.create_job()["job_id"]
    response = tenant_api.post_json(f"/api/v1/jobs/{job_id}/pause/", {"force": True})
    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["This action takes no body; send none or {}."]}
