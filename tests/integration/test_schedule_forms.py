"""Issue 16's schedule forms through the REST API, the Python API and the bulk path, against
the real PostgreSQL and Redis: H hashed from the job id, L/W/#, interval jobs; bad forms get
errors that name their field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler import api
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.cron import parse_cron
from scheduler.errors import InvalidJob
from scheduler.models import Job
from scheduler.timers import timer_store

pytestmark = pytest.mark.django_db


def created(tenant_api, **fields) -> Job:
    response = tenant_api.post_json("/api/v1/jobs/", {"job_type": "tests.noop"} | fields)
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["job_id"])


def refused(tenant_api, path="/api/v1/jobs/", method="post", **fields) -> dict:
    send = tenant_api.post_json if method == "post" else tenant_api.patch_json
    response = send(path, ({"job_type": "tests.noop"} if method == "post" else {}) | fields)
    assert response.status_code == 400, response.json()
    return response.json()


# H


def test_a_hashed_cron_job_fires_at_the_times_its_id_hashes_to(
        tenant_api, django_capture_on_commit_callbacks):
    before = now_ms()
    with django_capture_on_commit_callbacks(execute=True):
        job = created(tenant_api, cron_expression="H H * * *", timezone="Europe/Paris")
    schedule = parse_cron("H H * * *", "Europe/Paris", str(job.job_id))
    assert job.cron_expression == "H H * * *"
    assert datetime_to_ms(job.next_run_at) == schedule.next_fire_ms(before)
    assert timer_store().fire_time_of(str(job.job_id)) == datetime_to_ms(job.next_run_at)
    shown = tenant_api.get(f"/api/v1/jobs/{job.job_id}/").json()["next_fire_times"]
    expected = schedule.fire_times_ms(datetime_to_ms(job.next_run_at) - 1, 5)
    assert [datetime.fromisoformat(t["utc"]) for t in shown] == [
        datetime.fromtimestamp(ms / 1000, UTC) for ms in expected]


def test_hashed_jobs_of_one_expression_spread_and_an_edit_of_another_field_keeps_the_minute(
        tenant_api):
    jobs = [created(tenant_api, cron_expression="H * * * *") for _ in range(12)]
    minutes = {job.next_run_at.minute for job in jobs}
    assert len(minutes) > 3  # 12 jobs at one minute would be a 1-in-60^11 hash
    job = jobs[0]
    response = tenant_api.patch_json(f"/api/v1/jobs/{job.job_id}/", {"jitter_ms": 1_000})
    assert response.status_code == 200, response.json()
    response = tenant_api.patch_json(f"/api/v1/jobs/{job.job_id}/", {"timezone": "Asia/Tokyo"})
    assert response.status_code == 200, response.json()
    job.refresh_from_db()
    assert job.next_run_at.minute == parse_cron("H * * * *", "UTC", str(job.job_id)).minutes[0]


def test_bulk_ingest_hashes_each_job_by_its_own_id(tenant_api):
    response = tenant_api.post_json("/api/v1/jobs/bulk/", [
        {"job_type": "tests.noop", "cron_expression": "H H * * *"} for _ in range(5)])
    assert response.status_code in (200, 201), response.json()
    jobs = Job.objects.filter(cron_expression="H H * * *")
    assert jobs.count() == 5
    for job in jobs:
        schedule = parse_cron("H H * * *", "UTC", str(job.job_id))
        assert (job.next_run_at.hour, job.next_run_at.minute) == (schedule.hours[0],
                                                                  schedule.minutes[0])


# L, W, #


@pytest.mark.parametrize("expression", ["0 9 L * *", "0 9 LW * *", "0 9 15W * *",
                                        "0 9 * * 5#3", "0 9 * * 5L", "0 9 L-2 * ?"])
def test_quartz_day_forms_are_accepted(tenant_api, expression):
    job = created(tenant_api, cron_expression=expression)
    local = job.next_run_at
    assert parse_cron(expression).next_fire_ms(datetime_to_ms(local) - 1) == \
        datetime_to_ms(local)


@pytest.mark.parametrize(("expression", "field", "words"), [
    ("0 0 L * 5", "cron_expression", "Quartz refuses both day fields together"),
    ("0 0 * * 5#6", "cron_expression", "at most 5 of a weekday"),
    ("0 0 1,LW * *", "cron_expression", "only on their own"),
    ("H(0-99) * * * *", "cron_expression", "use H(a-b) with 0 <= a <= b <= 59"),
    ("0 0 30W 2 *", "cron_expression", "never fires"),
])
def test_bad_forms_are_refused_naming_the_field(tenant_api, expression, field, words):
    errors = refused(tenant_api, cron_expression=expression)
    assert list(errors) == [field]
    assert words in errors[field][0]


# Intervals


def test_an_interval_job_fires_one_period_after_its_anchor_by_default(
        tenant_api, django_capture_on_commit_callbacks):
    before = now_ms()
    with django_capture_on_commit_callbacks(execute=True):
        job = created(tenant_api, interval_ms=45 * 60_000, jitter_ms=1_000,
                      misfire_policy="skip")
    assert (job.cron_expression, job.interval_ms, job.misfire_policy) == (
        None, 2_700_000, "skip")
    anchor_ms = datetime_to_ms(job.interval_anchor)
    assert before <= anchor_ms <= now_ms()
    fire_ms = datetime_to_ms(job.next_run_at)
    assert anchor_ms + 2_700_000 <= fire_ms < anchor_ms + 2_700_000 + 1_000  # jitter
    assert timer_store().fire_time_of(str(job.job_id)) == fire_ms
    body = tenant_api.get(f"/api/v1/jobs/{job.job_id}/").json()
    assert body["interval_ms"] == 2_700_000
    utc = [datetime.fromisoformat(t["utc"]) for t in body["next_fire_times"]]
    gaps = {round((b - a).total_seconds() / 60) for a, b in zip(utc, utc[1:], strict=False)}
    assert gaps == {45}


def test_an_interval_from_an_anchor_keeps_its_grid(tenant_api):
    anchor = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3, seconds=5)
    job = created(tenant_api, interval_ms=86_400_000 * 2, interval_anchor=anchor.isoformat(),
                  timezone="Europe/Berlin")
    assert job.timezone == "Europe/Berlin"
    assert job.next_run_at == anchor + timedelta(days=4)


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"interval_ms": 500}, "interval_ms", "use a period from 1000 ms"),
    ({"interval_ms": "45m"}, "interval_ms", "Must be a whole number of milliseconds"),
    ({"interval_ms": 60_000, "interval_anchor": "tomorrow"}, "interval_anchor",
     "ISO 8601 time with a UTC offset"),
    ({"delay_ms": 10, "interval_anchor": "2030-01-01T00:00:00Z"}, "interval_anchor",
     "applies to interval_ms only"),
    ({"interval_ms": 60_000, "cron_expression": "* * * * *"}, "interval_ms",
     "Give exactly one of"),
    ({"interval_ms": 60_000, "jitter_ms": 60_000}, "jitter_ms", "not below the 60000 ms"),
])
def test_bad_intervals_are_refused_naming_the_field(tenant_api, fields, field, words):
    errors = refused(tenant_api, **fields)
    assert field in errors, errors
    assert words in errors[field][0]


def test_an_interval_job_is_changed_by_patch_and_refuses_cron_fields(tenant_api):
    job = created(tenant_api, interval_ms=60_000)
    path = f"/api/v1/jobs/{job.job_id}/"
    response = tenant_api.patch_json(path, {"interval_ms": 7_000})
    assert response.status_code == 200, response.json()
    job.refresh_from_db()
    assert job.interval_ms == 7_000
    assert (datetime_to_ms(job.next_run_at) - datetime_to_ms(job.interval_anchor)) % 7_000 == 0
    errors = refused(tenant_api, path, method="patch", cron_expression="* * * * *")
    assert "This is an interval job" in errors["cron_expression"][0]
    cron_job = created(tenant_api, cron_expression="0 * * * *")
    errors = refused(tenant_api, f"/api/v1/jobs/{cron_job.job_id}/", method="patch",
                     interval_ms=60_000)
    assert "for interval jobs" in errors["interval_ms"][0]


def test_the_python_api_schedules_and_reschedules_an_interval(tenant):
    job = api.schedule_interval("tests.noop", tenant=tenant, every=timedelta(seconds=7))
    assert job.interval_ms == 7_000
    job = api.reschedule(job.job_id, tenant=tenant, every=timedelta(days=2))
    assert job.interval_ms == 172_800_000
    with pytest.raises(InvalidJob) as caught:
        api.schedule_interval("tests.noop", tenant=tenant, every=0.1)
    assert caught.value.field == "interval_ms"
    with pytest.raises(InvalidJob) as caught:
        api.schedule_interval("tests.noop", tenant=tenant, every="often")
    assert caught.value.field == "every"


def test_the_beat_reads_an_interval_and_a_hashed_cron_back_from_the_jobs_table(tenant):
    from scheduler.intervals import IntervalSchedule
    from scheduler.occurrences import load_and_insert

    interval = api.schedule_interval("tests.noop", tenant=tenant, every=timedelta(minutes=45))
    hashed = api.schedule_cron("tests.noop", tenant=tenant, cron="H H * * *")
    claimed = [(str(job.job_id), datetime_to_ms(job.next_run_at)) for job in (interval, hashed)]
    due = load_and_insert(claimed)
    interval_schedule = due[str(interval.job_id)].schedule
    assert interval_schedule == IntervalSchedule(2_700_000, datetime_to_ms(
        interval.interval_anchor))
    assert due[str(interval.job_id)].is_recurring
    fired_ms = datetime_to_ms(interval.next_run_at)
    assert interval_schedule.next_fire_ms(fired_ms) == fired_ms + 2_700_000
    assert due[str(hashed.job_id)].schedule == parse_cron("H H * * *", "UTC", str(hashed.job_id))
