"""Exclusion calendars with real PostgreSQL and Redis: the tenant's calendars through the REST
API, the Python API and the admin; jobs naming them (create, PATCH, bulk, Python API,
decorators' declarations, admin), their next fire times, and the beat's plan recording an
excluded occurrence SKIPPED with the reason ``calendar <name>``."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.test import Client

from chronocore.config import get_config
from chronocore.models import StaffRole
from chronocore.staff import add_member
from scheduler import api
from scheduler.beat import Beat
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.cron import parse_cron
from scheduler.declared_jobs import CronJobSpec, sync_cron_job
from scheduler.dispatch import Publisher
from scheduler.errors import InvalidJob
from scheduler.lifecycle import execution_id_for
from scheduler.models import Calendar, Execution, ExecutionStatus, Job
from scheduler.timers import ClaimedTimer, timer_store
from search.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)

CALENDARS = "/api/v1/calendars/"
WEEKEND = {"name": "weekend", "timezone": "America/New_York", "rules": ["* * SAT,SUN"],
           "description": "Saturdays and Sundays in New York"}


def make_calendar(client, **fields):
    response = client.post_json(CALENDARS, WEEKEND | fields)
    assert response.status_code == 201, response.json()
    return response.json()


def cron_job(client, **fields):
    return client.post_json("/api/v1/jobs/", {"job_type": "tests.noop",
                                              "cron_expression": "0 9 * * *",
                                              "timezone": "America/New_York"} | fields)


# REST: the calendars themselves


def test_a_calendar_is_created_read_listed_changed_and_deleted_by_its_name(tenant_api):
    created = make_calendar(tenant_api, dates=["2026-12-25"], ranges=["2026-12-31/2027-01-01"])
    assert {k: created[k] for k in ("name", "timezone", "dates", "ranges", "rules", "jobs")} == {
        "name": "weekend", "timezone": "America/New_York", "dates": ["2026-12-25"],
        "ranges": ["2026-12-31/2027-01-01"], "rules": ["* * SAT,SUN"], "jobs": 0}
    assert tenant_api.get(f"{CALENDARS}weekend/").json()["calendar_id"] == created["calendar_id"]
    listed = tenant_api.get(CALENDARS, {"timezone": "America/New_York"}).json()["results"]
    assert [c["name"] for c in listed] == ["weekend"]
    assert tenant_api.get(CALENDARS, {"name": "nope"}).json()["results"] == []
    changed = tenant_api.patch_json(f"{CALENDARS}weekend/", {"dates": ["2026-07-03"]})
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["dates"], changed.json()["rules"]) == (["2026-07-03"], ["* * SAT,SUN"])
    assert tenant_api.delete(f"{CALENDARS}weekend/").status_code == 204
    assert not Calendar.objects.exists()
    events = list(AuditEvent.objects.filter(action__startswith="calendar.").order_by("id"))
    assert [e.action for e in events] == ["calendar.created", "calendar.changed",
                                          "calendar.deleted"]
    assert all(e.actor.startswith("api-key:") and e.tenant_id == tenant_api.tenant.tenant_id
               for e in events)
    assert events[1].data["dates"] == ["2026-07-03"]
    assert events[0].message.startswith("Calendar weekend created by api-key:")


@pytest.mark.parametrize(("body", "field", "words"), [
    (WEEKEND | {"timezone": "America/Nowhere"}, "timezone", "time zone"),
    (WEEKEND | {"dates": ["2026-12-25", "Dec 26"]}, "dates[1]", "YYYY-MM-DD"),
    (WEEKEND | {"rules": ["0 0 * * SAT"]}, "rules[0]", "three cron fields"),
    (WEEKEND | {"ranges": ["2027-01-02/2026-12-24"]}, "ranges[0]", "before it starts"),
    ({"timezone": "UTC"}, "name", "Required"),
    (WEEKEND | {"colour": "red"}, "colour", "Unknown field"),
    (["weekend"], "non_field_errors", "JSON object"),
])
def test_a_bad_calendar_answers_400_naming_the_field(tenant_api, body, field, words):
    response = tenant_api.post_json(CALENDARS, body)
    assert response.status_code == 400, response.content
    assert words in response.json()[field][0]
    assert not Calendar.objects.exists()


def test_a_name_is_unique_per_tenant_only(tenant_api, other_api):
    make_calendar(tenant_api)
    again = tenant_api.post_json(CALENDARS, WEEKEND)
    assert again.status_code == 400 and "already" in again.json()["name"][0]
    make_calendar(other_api)  # another tenant's own "weekend"
    assert Calendar.objects.count() == 2


def test_another_tenants_calendar_is_a_404_and_unknown_to_this_tenants_jobs(tenant_api,
                                                                             other_api):
    make_calendar(other_api, name="globex-days")
    for answer in (tenant_api.get(f"{CALENDARS}globex-days/"),
                   tenant_api.patch_json(f"{CALENDARS}globex-days/", {"dates": []}),
                   tenant_api.delete(f"{CALENDARS}globex-days/")):
        assert answer.status_code == 404
    assert tenant_api.get(CALENDARS).json()["results"] == []
    refused = cron_job(tenant_api, calendars=["globex-days"])
    assert refused.status_code == 400
    assert "No calendar 'globex-days' for this tenant" in refused.json()["calendars"][0]
    assert Calendar.objects.get().dates == []  # untouched


# REST: jobs naming calendars


def test_a_job_names_calendars_when_created_patched_and_in_bulk(
        tenant_api, django_capture_on_commit_callbacks):
    make_calendar(tenant_api)
    make_calendar(tenant_api, name="christmas", rules=["25 DEC *"], timezone="Asia/Tokyo")
    created = cron_job(tenant_api, calendars=["weekend"])
    assert created.status_code == 201, created.json()
    job_id = created.json()["job_id"]
    assert created.json()["calendars"] == ["weekend"]
    patched = tenant_api.patch_json(f"/api/v1/jobs/{job_id}/",
                                    {"calendars": ["christmas", "weekend"]})
    assert patched.status_code == 200, patched.json()
    assert Job.objects.get(job_id=job_id).calendars == ["christmas", "weekend"]
    assert tenant_api.get(f"{CALENDARS}christmas/").json()["jobs"] == 1
    unknown = tenant_api.patch_json(f"/api/v1/jobs/{job_id}/", {"calendars": ["holidays"]})
    assert unknown.status_code == 400 and "holidays" in unknown.json()["calendars"][0]
    cleared = tenant_api.patch_json(f"/api/v1/jobs/{job_id}/", {"calendars": []})
    assert cleared.status_code == 200 and Job.objects.get(job_id=job_id).calendars == []

    with django_capture_on_commit_callbacks(execute=True):
        bulk = tenant_api.post_json("/api/v1/jobs/bulk/", [
            {"job_type": "tests.noop", "cron_expression": "0 9 * * *", "calendars": ["weekend"]},
            {"job_type": "tests.noop", "cron_expression": "0 9 * * *", "calendars": ["nope"]},
            {"job_type": "tests.noop", "interval_ms": 3_600_000,
             "calendars": ["christmas", "weekend"]},
            {"job_type": "tests.noop", "delay_ms": 5_000, "calendars": ["weekend"]},
        ])
    body = bulk.json()
    assert bulk.status_code == 200, body  # some items failed
    assert (body["created"], body["failed"]) == (2, 2)
    assert [(e["index"], e["field"]) for e in body["errors"]] == [(1, "calendars"),
                                                                  (3, "calendars")]
    first, _, third, _ = body["ids"]
    assert Job.objects.get(job_id=first).calendars == ["weekend"]
    assert Job.objects.get(job_id=third).calendars == ["christmas", "weekend"]
    assert Job.objects.exclude(job_id__in=[job_id, first, third]).count() == 0


@pytest.mark.parametrize(("fields", "words"), [
    ({"calendars": "weekend"}, "list of calendar names"),
    ({"calendars": ["weekend", "weekend"]}, "twice"),
    ({"delay_ms": 1_000, "cron_expression": None, "timezone": "UTC",
      "calendars": ["weekend"]}, "cron and interval jobs only"),
])
def test_bad_calendars_of_a_job_answer_400_on_calendars(tenant_api, fields, words):
    make_calendar(tenant_api)
    body = {"job_type": "tests.noop", "cron_expression": "0 9 * * *"} | fields
    body = {key: value for key, value in body.items() if value is not None}
    response = tenant_api.post_json("/api/v1/jobs/", body)
    assert response.status_code == 400, response.json()
    assert words in response.json()["calendars"][0]


def test_calendars_that_leave_a_job_no_occurrence_are_refused_whichever_side_changes(
        tenant_api):
    make_calendar(tenant_api, name="weekdays", rules=["* * MON-FRI"])
    weekday_job = cron_job(tenant_api, cron_expression="0 9 * * 1-5", calendars=["weekdays"])
    assert weekday_job.status_code == 400
    assert "would never fire" in weekday_job.json()["calendars"][0]

    daily = cron_job(tenant_api, calendars=["weekdays"]).json()  # fires at weekends
    to_weekdays = tenant_api.patch_json(f"/api/v1/jobs/{daily['job_id']}/",
                                        {"cron_expression": "0 9 * * MON-FRI"})
    assert to_weekdays.status_code == 400 and "never fire" in to_weekdays.json()["calendars"][0]
    everything = tenant_api.patch_json(f"{CALENDARS}weekdays/", {"rules": ["* * *"]})
    assert everything.status_code == 400, everything.json()
    assert daily["job_id"] in everything.json()["rules"][0]
    assert Calendar.objects.get().rules == ["* * MON-FRI"]


def test_a_calendar_jobs_name_is_neither_deleted_nor_renamed(tenant_api):
    make_calendar(tenant_api)
    for _ in range(2):
        assert cron_job(tenant_api, calendars=["weekend"]).status_code == 201
    deleted = tenant_api.delete(f"{CALENDARS}weekend/")
    assert deleted.status_code == 409
    assert "2 job(s) name the calendar 'weekend'" in deleted.json()["detail"]
    renamed = tenant_api.patch_json(f"{CALENDARS}weekend/", {"name": "saturdays"})
    assert renamed.status_code == 409 and "2 job(s)" in renamed.json()["detail"]
    assert Calendar.objects.get().name == "weekend"
    Job.objects.update(calendars=[])
    assert tenant_api.delete(f"{CALENDARS}weekend/").status_code == 204


def test_next_fire_times_leave_out_the_excluded_days(tenant_api):
    make_calendar(tenant_api)
    job = cron_job(tenant_api, calendars=["weekend"]).json()
    local = [datetime.fromisoformat(t["local"]) for t in job["next_fire_times"]]
    assert len(local) == 5 and all(t.weekday() < 5 and t.hour == 9 for t in local)
    plain = [datetime.fromisoformat(t["local"])
             for t in cron_job(tenant_api).json()["next_fire_times"]]
    weekdays = [t for t in plain if t.weekday() < 5]
    assert local[:len(weekdays)] == weekdays  # the same times, the weekend's left out


# Python API and declarations


def test_the_python_api_names_calendars_and_refuses_unknown_ones_on_calendars(tenant):
    Calendar.objects.create(tenant=tenant, name="weekend", rules=["* * SAT,SUN"],
                            timezone="Europe/London")
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="0 9 * * *",
                            calendars=["weekend"])
    assert job.calendars == ["weekend"]
    interval = api.schedule_interval("tests.noop", tenant=tenant, every=timedelta(hours=2),
                                     calendars=("weekend",))
    assert Job.objects.get(pk=interval.pk).calendars == ["weekend"]
    with pytest.raises(InvalidJob) as unknown:
        api.schedule_cron("tests.noop", tenant=tenant, cron="0 9 * * *", calendars=["nope"])
    assert unknown.value.field == "calendars" and "nope" in str(unknown.value)
    with pytest.raises(InvalidJob) as text:
        api.schedule_cron("tests.noop", tenant=tenant, cron="0 9 * * *", calendars="weekend")
    assert text.value.field == "calendars"
    assert api.configure(job.job_id, tenant=tenant, calendars=[]).calendars == []
    assert Job.objects.get(pk=job.pk).calendars == []


def test_a_declared_job_syncs_its_calendars_checked_against_the_tenants(tenant):
    Calendar.objects.create(tenant=tenant, name="weekend", rules=["* * SAT,SUN"])
    spec = CronJobSpec(idempotency_key="decl:x", task_name="tests.noop", cron="0 9 * * *",
                       calendars=("weekend",))
    created = sync_cron_job(spec, tenant=tenant).job
    assert created.calendars == ["weekend"]
    other = CronJobSpec(idempotency_key="decl:x", task_name="tests.noop", cron="0 9 * * *",
                        calendars=("nope",))
    with pytest.raises(InvalidJob) as refused:
        sync_cron_job(other, tenant=tenant)
    assert refused.value.field == "calendars"
    assert Job.objects.get(pk=created.pk).calendars == ["weekend"]


# Admin


@pytest.fixture
def superuser_client(db):
    client = Client()
    client.force_login(User.objects.create_superuser("ops", password="x"))
    return client


def admin_form(tenant, **fields) -> dict[str, str]:
    return {"tenant": str(tenant.tenant_id), "name": "holidays", "timezone": "Europe/Paris",
            "description": "", "dates": '["2026-07-14"]', "ranges": "[]",
            "rules": '["* * SUN"]'} | fields


def test_the_admin_adds_and_changes_calendars_by_the_apis_rules(superuser_client, tenant,
                                                                 redis_client):
    added = superuser_client.post("/admin/scheduler/calendar/add/", admin_form(tenant))
    assert added.status_code == 302, added.content.decode()[:3000]
    calendar = Calendar.objects.get()
    assert (calendar.dates, calendar.rules, calendar.tenant_id) == (
        ["2026-07-14"], ["* * SUN"], tenant.tenant_id)
    assert AuditEvent.objects.get(action="calendar.created").actor == "user:ops"
    bad = superuser_client.post(f"/admin/scheduler/calendar/{calendar.pk}/change/",
                                admin_form(tenant, timezone="Paris", dates='["14/07"]'))
    assert bad.status_code == 200
    errors = bad.context["adminform"].form.errors
    assert "timezone" in errors and "dates[0]" in errors["dates"][0]
    assert Calendar.objects.get().timezone == "Europe/Paris"


def test_the_admin_refuses_to_delete_a_calendar_jobs_name(superuser_client, tenant,
                                                          redis_client):
    calendar = Calendar.objects.create(tenant=tenant, name="weekend", rules=["* * SAT,SUN"])
    api.schedule_cron("tests.noop", tenant=tenant, cron="0 9 * * *", calendars=["weekend"])
    page = superuser_client.get(f"/admin/scheduler/calendar/{calendar.pk}/delete/")
    assert "1 job(s) name the calendar" in page.content.decode()
    superuser_client.post(f"/admin/scheduler/calendar/{calendar.pk}/delete/", {"post": "yes"})
    assert Calendar.objects.filter(pk=calendar.pk).exists()


def test_a_tenants_staff_see_and_change_their_tenants_calendars_only(tenant, other_tenant,
                                                                    redis_client):
    ours = Calendar.objects.create(tenant=tenant, name="ours")
    theirs = Calendar.objects.create(tenant=other_tenant, name="theirs")
    user = User.objects.create_user("acme-ops", password="x")
    add_member(user, tenant, StaffRole.OPERATOR)
    client = Client()
    client.force_login(user)
    listing = client.get("/admin/scheduler/calendar/").content.decode()
    assert "ours" in listing and "theirs" not in listing
    assert client.get(f"/admin/scheduler/calendar/{theirs.pk}/change/").status_code == 404
    assert client.get(f"/admin/scheduler/calendar/{ours.pk}/change/").status_code == 200
    crafted = client.post("/admin/scheduler/calendar/add/",
                          admin_form(other_tenant, name="sneaky"))
    assert crafted.status_code == 200  # the form refuses another tenant
    assert not Calendar.objects.filter(name="sneaky").exists()
    pinned = client.post("/admin/scheduler/calendar/add/", admin_form(tenant, name="mine"))
    assert pinned.status_code == 302
    assert Calendar.objects.get(name="mine").tenant_id == tenant.tenant_id


def test_the_job_page_sets_calendars_through_the_api(superuser_client, tenant, redis_client):
    Calendar.objects.create(tenant=tenant, name="weekend", rules=["* * SAT,SUN"])
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="0 9 * * *")
    url = f"/admin/scheduler/job/{job.job_id}/change/"
    saved = superuser_client.post(url, {"name": "nightly", "calendars": "weekend"})
    assert saved.status_code == 302, saved.content.decode()[:3000]
    job.refresh_from_db()
    assert (job.name, job.calendars) == ("nightly", ["weekend"])
    refused = superuser_client.post(url, {"name": "nightly", "calendars": "weekend,nope"})
    assert refused.status_code == 200
    assert "nope" in str(refused.context["adminform"].form.errors["calendars"])
    job.refresh_from_db()
    assert job.calendars == ["weekend"]


# The beat's plan


def _beat(clock_ms: int) -> Beat:
    config = get_config()
    return Beat(replica_id="cal-test", config=config, store=timer_store(),
                publisher=Publisher(config.broker_url), clock=lambda: clock_ms)


def _claimed(job: Job, fire_ms: int) -> ClaimedTimer:
    return ClaimedTimer(str(job.job_id), fire_ms, timer_store().shard_of(str(job.job_id)), False)


def test_the_beat_records_an_excluded_occurrence_skipped_with_the_calendars_name(tenant):
    hourly = parse_cron("0 * * * *", "UTC")
    fire_ms = hourly.next_fire_ms(now_ms())
    fire_day = datetime.fromtimestamp(fire_ms / 1000, ZoneInfo("Asia/Tokyo")).date()
    Calendar.objects.create(tenant=tenant, name="tokyo-day", timezone="Asia/Tokyo",
                            dates=[fire_day.isoformat()])
    excluded = api.schedule_cron("tests.noop", tenant=tenant, cron="0 * * * *",
                                 calendars=["tokyo-day"])
    plain = api.schedule_cron("tests.noop", tenant=tenant, cron="0 * * * *")
    assert datetime_to_ms(excluded.next_run_at) == datetime_to_ms(plain.next_run_at) == fire_ms

    beat = _beat(fire_ms)
    beat.ownership.leases = {timer_store().shard_of(str(j.job_id)): "cal-test|1"
                             for j in (excluded, plain)}
    beat.dispatch([_claimed(excluded, fire_ms), _claimed(plain, fire_ms)])

    skipped = Execution.objects.get(execution_id=execution_id_for(excluded.job_id, fire_ms))
    assert (skipped.status, skipped.reason) == (ExecutionStatus.SKIPPED, "calendar tokyo-day")
    fired = Execution.objects.get(execution_id=execution_id_for(plain.job_id, fire_ms))
    assert fired.status == ExecutionStatus.SCHEDULED
    prepared = {p.fired.job.job_id: p.fired for p in beat.firer._due}
    assert prepared[str(excluded.job_id)].fire_ms == []
    assert prepared[str(excluded.job_id)].next_ms == fire_ms + 3_600_000  # its next occurrence
    assert prepared[str(plain.job_id)].fire_ms == [fire_ms]
    assert beat.counters.misfired == 1


def test_late_occurrences_on_excluded_days_are_recorded_for_their_calendar(tenant):
    daily = parse_cron("0 12 * * *", "UTC")
    first_ms = daily.next_fire_ms(now_ms())
    first_day = datetime.fromtimestamp(first_ms / 1000, UTC).date()
    Calendar.objects.create(tenant=tenant, name="second-day",
                            dates=[(first_day + timedelta(days=1)).isoformat()])
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="0 12 * * *",
                            calendars=["second-day"], misfire="fire_all")
    now = first_ms + 2 * 86_400_000 + 1_000  # three occurrences due, all within fire_all's 10
    beat = _beat(now)
    beat.ownership.leases = {timer_store().shard_of(str(job.job_id)): "cal-test|1"}
    beat.dispatch([_claimed(job, first_ms)])

    rows = {datetime_to_ms(e.scheduled_for): (e.status, e.reason)
            for e in Execution.objects.filter(job=job)}
    day = 86_400_000
    assert rows == {first_ms: (ExecutionStatus.SCHEDULED, ""),
                    first_ms + day: (ExecutionStatus.SKIPPED, "calendar second-day"),
                    first_ms + 2 * day: (ExecutionStatus.SCHEDULED, "")}
    prepared, = beat.firer._due
    assert prepared.fired.fire_ms == [first_ms, first_ms + 2 * day]
    assert prepared.fired.next_ms == first_ms + 3 * day


def test_a_trigger_fires_whatever_the_calendars_say(tenant):
    today = date.today()
    Calendar.objects.create(tenant=tenant, name="now", ranges=[
        f"{(today - timedelta(days=1)).isoformat()}/{(today + timedelta(days=1)).isoformat()}"])
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="0 12 * * *", calendars=["now"])
    api.trigger(job.job_id, tenant=tenant)
    job.refresh_from_db()
    trigger_ms = datetime_to_ms(job.next_run_at)
    beat = _beat(trigger_ms)
    beat.ownership.leases = {timer_store().shard_of(str(job.job_id)): "cal-test|1"}
    beat.dispatch([_claimed(job, trigger_ms)])
    prepared, = beat.firer._due
    assert prepared.fired.fire_ms == [trigger_ms]
