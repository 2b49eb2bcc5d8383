"""``api.schedule_many``: many one-time and cron jobs from Python, each with its own arguments,
idempotency key and options, by the job writer's COPY, with per-item errors; against the real
PostgreSQL and Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chronocore import grants
from scheduler import api, job_writer
from scheduler.clock import datetime_to_ms
from scheduler.errors import InvalidJob
from scheduler.misfire import MisfirePolicy, MisfireRule
from scheduler.models import Calendar, Job
from scheduler.retry import RetryPolicy
from scheduler.timers import timer_store
from search.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.no_default_grants]

# Each refused kind of item, the argument its error names, and a word of the message.
BAD_ITEMS = [
    ({"task_name": "tests.noop", "cron": "61 * * * *"}, "cron", "61"),
    ({"task_name": "tests.noop", "cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone",
     "Mars/Olympus"),
    ({"task_name": "tests.noop", "delay": -5}, "delay", "negative"),
    ({"task_name": "tests.noop", "delay": 60, "jitter_ms": 10}, "jitter_ms",
     "cron and interval jobs only"),
    ({"task_name": "tests.noop", "delay": 60, "idempotency_key": ""}, "idempotency_key",
     "characters long"),
    ({"task_name": "tests.noop", "delay": 60, "kwargs": {"when": datetime.now(UTC)}}, "kwargs",
     "JSON"),
    ({"task_name": "tests.noop", "delay": 60, "retries": 3}, "retries", "did you mean"),
    ({"task_name": "billing.charge", "delay": 60}, "task_name", "billing.charge"),
    ({"task_name": "tests.noop", "cron": "* * * * *", "delay": 5}, "cron", "not delay and cron"),
    ({"task_name": "tests.noop", "every": 60, "cron": "* * * * *"}, "every",
     "not cron and every"),
    ({"task_name": "tests.noop", "every": "often"}, "every", "seconds or a timedelta"),
    ({"task_name": "tests.noop", "every": 0.5}, "interval_ms", "second"),
    ({"task_name": "tests.noop", "delay": 60, "anchor": datetime.now(UTC)}, "anchor",
     "interval jobs"),
    ({"task_name": "tests.noop", "cron": "0 9 * * *", "calendars": ["holidays"]}, "calendars",
     "holidays"),
    ({"task_name": "tests.noop", "every": 3_600, "calendars": "weekend"}, "calendars",
     "list of calendar names"),
    ({"task_name": "tests.noop", "cron": "0 9 * * SAT,SUN", "calendars": ["weekend"]},
     "calendars", "never fire"),
    ({"task_name": "tests.noop", "delay": 60, "calendars": ["weekend"]}, "calendars",
     "cron and interval jobs only"),
    ({"task_name": "tests.noop", "delay": 60, "soft_timeout_ms": 5_000,
      "hard_timeout_ms": 1_000}, "soft_timeout_ms", "below hard_timeout_ms"),
]


def good_item(i: int, now: datetime) -> dict:
    """A valid item of one of six kinds, with its own payload."""
    kind = i % 6
    if kind == 0:
        return {"task_name": "tests.noop", "delay": 600 + i % 7, "args": [i],
                "kwargs": {"n": i}}
    if kind == 1:
        return {"task_name": "tests.noop", "at": now + timedelta(hours=1, milliseconds=i),
                "args": [i, "at"], "idempotency_key": f"key-{i}", "name": f"job {i}",
                "retry": RetryPolicy(max_attempts=3), "soft_timeout_ms": 1_000,
                "hard_timeout_ms": 2_000}
    if kind == 2:
        return {"task_name": "tests.other", "cron": "*/5 * * * *", "timezone": "Europe/Paris",
                "kwargs": {"i": i}, "jitter_ms": 1_000, "overlap": "allow",
                "misfire": MisfireRule(MisfirePolicy.FIRE_ALL, 4), "queue": "reports"}
    if kind == 3:
        return {"task_name": "tests.noop", "cron": "0 9 * * 1", "args": [i],
                "misfire": MisfirePolicy.SKIP}
    if kind == 4:
        return {"task_name": "tests.noop", "every": timedelta(minutes=10), "args": [i],
                "anchor": now - timedelta(seconds=i), "timezone": "Asia/Tokyo",
                "calendars": ["weekend"], "jitter_ms": 500}
    return {"task_name": "tests.noop", "cron": "0 9 * * *", "kwargs": {"i": i},
            "calendars": ("weekend", "christmas"), "idempotency_key": f"cal-{i}"}


def test_ten_thousand_mixed_jobs_with_per_item_errors(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    grants.grant(tenant, "tests.*", "*")
    Calendar.objects.create(tenant=tenant, name="weekend", rules=["* * SAT,SUN"])
    Calendar.objects.create(tenant=tenant, name="christmas", rules=["25 DEC *"])
    now = datetime.now(UTC)
    items: list[dict] = []
    expected_errors: dict[int, tuple[str, str]] = {}
    for i in range(10_000):
        if i % 100 == 99:
            bad, field, word = BAD_ITEMS[(i // 100) % len(BAD_ITEMS)]
            expected_errors[i] = (field, word)
            items.append(bad)
        else:
            items.append(good_item(i, now))
    with django_capture_on_commit_callbacks(execute=True):
        result = api.schedule_many(items, tenant=tenant, by="user:erin")

    assert result.failed == len(expected_errors) == 100
    assert result.created == 9_900 and result.existing == []
    assert {e.index for e in result.errors} == set(expected_errors)
    for error in result.errors:
        field, word = expected_errors[error.index]
        assert error.field == field, error
        assert word in error.message, error
    assert all((job_id is None) == (i in expected_errors) for i, job_id in enumerate(result.ids))

    jobs = {str(job.job_id): job for job in Job.objects.filter(tenant=tenant)}
    assert len(jobs) == 9_900 and set(jobs) == {i for i in result.ids if i is not None}
    for i in range(12):
        job = jobs[result.ids[i]]
        item = items[i]
        if i % 6 == 0:
            assert (job.args, job.kwargs, job.cron_expression) == ([i], {"n": i}, None)
        elif i % 6 == 1:
            assert (job.args, job.name, job.idempotency_key) == ([i, "at"], f"job {i}",
                                                                 f"key-{i}")
            assert datetime_to_ms(job.next_run_at) == datetime_to_ms(item["at"])
            assert (job.max_retries, job.soft_timeout_ms, job.hard_timeout_ms) == (2, 1_000,
                                                                                   2_000)
            assert job.retry_policy["max_attempts"] == 3
        elif i % 6 == 2:
            assert (job.cron_expression, job.timezone, job.queue) == (
                "*/5 * * * *", "Europe/Paris", "reports")
            assert (job.jitter_ms, job.overlap_policy, job.misfire_policy,
                    job.misfire_fire_all_limit) == (1_000, "allow", "fire_all", 4)
            assert job.kwargs == {"i": i}
        elif i % 6 == 3:
            assert (job.cron_expression, job.misfire_policy) == ("0 9 * * 1", "skip")
        elif i % 6 == 4:
            assert (job.cron_expression, job.interval_ms, job.timezone) == (
                None, 600_000, "Asia/Tokyo")
            assert datetime_to_ms(job.interval_anchor) == datetime_to_ms(item["anchor"])
            assert (job.calendars, job.jitter_ms, job.args) == (["weekend"], 500, [i])
        else:
            assert (job.cron_expression, job.calendars, job.idempotency_key) == (
                "0 9 * * *", ["weekend", "christmas"], f"cal-{i}")
            assert job.next_run_at.weekday() < 5  # the weekend calendar skips Sat and Sun
    assert timer_store().pending_count() == 9_900
    sample = result.ids[2]
    assert timer_store().fire_time_of(sample) == datetime_to_ms(jobs[sample].next_run_at)
    events = AuditEvent.objects.filter(action="job.created", tenant_id=tenant.tenant_id)
    assert events.count() == 9_900
    assert {(e.actor, e.data["via"]) for e in events} == {("user:erin", "schedule_many")}


def test_an_idempotency_key_already_used_gives_that_job_and_writes_nothing(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    grants.grant(tenant, "tests.*", "*")
    first = api.schedule_once("tests.noop", tenant=tenant, delay=60, idempotency_key="k1")
    items = [
        {"task_name": "tests.noop", "delay": 60, "idempotency_key": "k1"},  # existing
        {"task_name": "tests.noop", "delay": 60, "idempotency_key": "k2"},  # new
        {"task_name": "tests.noop", "delay": 90, "idempotency_key": "k2"},  # as item 1
        {"task_name": "tests.noop", "delay": 60},
    ]
    with django_capture_on_commit_callbacks(execute=True):
        result = api.schedule_many(items, tenant=tenant)
    assert result.ids[0] == str(first.job_id)
    assert result.ids[2] == result.ids[1] != result.ids[0]
    assert result.existing == [0, 2] and result.created == 2 and not result.errors
    assert Job.objects.filter(tenant=tenant).count() == 3
    again = api.schedule_many(items[:3], tenant=tenant)
    assert again.ids == result.ids[:3] and again.created == 0
    assert Job.objects.filter(tenant=tenant).count() == 3


def test_a_key_written_by_another_writer_after_the_look_up_is_found_on_the_next_try(
    tenant, redis_client, monkeypatch
):
    """The COPY meets the unique index (a job written with the key between the look-up and
    the COPY): it is tried again and the key found."""
    grants.grant(tenant, "tests.*", "*")
    other = api.schedule_once("tests.noop", tenant=tenant, delay=60, idempotency_key="raced")
    real_look_up = job_writer._jobs_with_keys
    calls = []

    def look_up_that_misses_it_once(tenant_id, keys):
        calls.append(keys)
        return {} if len(calls) == 1 else real_look_up(tenant_id, keys)

    monkeypatch.setattr(job_writer, "_jobs_with_keys", look_up_that_misses_it_once)
    result = api.schedule_many([{"task_name": "tests.noop", "delay": 5,
                                 "idempotency_key": "raced"},
                                {"task_name": "tests.noop", "delay": 5}], tenant=tenant)
    assert len(calls) == 2
    assert result.ids[0] == str(other.job_id) and result.existing == [0]
    assert Job.objects.filter(tenant=tenant).count() == 2


def test_defaults_fill_what_an_item_leaves_out(tenant, redis_client):
    grants.grant(tenant, "tests.*", "*")
    result = api.schedule_many([{"delay": 1}, {"delay": 2, "queue": "q2"}], tenant=tenant,
                               defaults={"task_name": "tests.noop", "queue": "q1"})
    assert not result.errors
    queues = dict(Job.objects.filter(tenant=tenant).values_list("job_id", "queue"))
    assert [queues[__import__("uuid").UUID(i)] for i in result.ids] == ["q1", "q2"]


def test_a_disabled_tenant_is_refused_whole(tenant, redis_client):
    tenant.is_active = False
    tenant.save()
    with pytest.raises(InvalidJob) as refused:
        api.schedule_many([{"task_name": "tests.noop", "delay": 1}], tenant=tenant)
    assert refused.value.field == "tenant"
    assert not Job.objects.exists()


def test_an_item_that_is_not_a_dict_is_refused_alone(tenant, redis_client):
    grants.grant(tenant, "tests.*", "*")
    result = api.schedule_many([["tests.noop"], {"task_name": "tests.noop", "delay": 1}],
                               tenant=tenant)
    assert [e.index for e in result.errors] == [0] and "dict" in result.errors[0].message
    assert result.ids[0] is None and result.ids[1] is not None
