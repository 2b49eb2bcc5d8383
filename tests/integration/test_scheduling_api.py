"""The Python scheduling API against real PostgreSQL and Redis."""

from __future__ import annotations

import uuid

import pytest

from scheduler import api, occurrences
from scheduler.clock import datetime_to_ms
from scheduler.errors import InvalidJob, JobNotFound, PayloadTooLarge
from scheduler.executions import start_execution
from scheduler.models import Execution, ExecutionStatus, Job
from scheduler.retry import RetryPolicy
from scheduler.timers import timer_store
from search.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_same_idempotency_key_twice_yields_one_job(tenant, redis_client):
    first = api.schedule_once("chrono.noop", tenant=tenant, delay=60, idempotency_key="order-7")
    again = api.schedule_once("chrono.noop", tenant=tenant, delay=60, idempotency_key="order-7")
    assert again.job_id == first.job_id
    assert Job.objects.filter(tenant=tenant).count() == 1
    assert timer_store().pending_count() == 1


def test_idempotency_keys_are_scoped_per_tenant(tenant, other_tenant, redis_client):
    a = api.schedule_once("chrono.noop", tenant=tenant, delay=60, idempotency_key="k")
    b = api.schedule_once("chrono.noop", tenant=other_tenant, delay=60, idempotency_key="k")
    assert a.job_id != b.job_id


def test_another_tenants_job_cannot_be_cancelled_or_seen(tenant, other_tenant, redis_client):
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    with pytest.raises(JobNotFound):
        api.cancel(job.job_id, tenant=other_tenant)
    with pytest.raises(JobNotFound):
        api.pause(job.job_id, tenant=other_tenant)
    job.refresh_from_db()
    assert job.status == "ACTIVE"


def test_a_retry_policy_and_timeouts_are_stored_with_the_job(tenant, redis_client):
    policy = RetryPolicy(max_attempts=4, initial_delay_ms=500, non_retryable=("ValueError",))
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60, retry=policy,
                            soft_timeout_ms=1_000, hard_timeout_ms=2_000)
    job.refresh_from_db()
    assert job.max_retries == 3
    assert RetryPolicy.from_json(job.retry_policy) == policy
    assert (job.soft_timeout_ms, job.hard_timeout_ms) == (1_000, 2_000)


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"delay": -1}, "delay", "negative"),
        ({"delay": 1, "soft_timeout_ms": 2_000, "hard_timeout_ms": 1_000}, "soft_timeout_ms",
         "below hard_timeout_ms"),
        ({"delay": 1, "max_retries": -1}, "max_retries", "negative"),
    ],
)
def test_bad_one_time_jobs_are_refused_with_the_field_and_what_to_change(
    tenant, redis_client, kwargs, field, message
):
    with pytest.raises(InvalidJob) as error:
        api.schedule_once("chrono.noop", tenant=tenant, **kwargs)
    assert error.value.field == field and message in error.value.message
    assert not Job.objects.exists()


def test_a_payload_over_the_limit_is_refused_and_nothing_is_written(tenant, redis_client):
    with pytest.raises(PayloadTooLarge, match="limit is"):
        api.schedule_once("chrono.noop", tenant=tenant, delay=1, args=["x" * 300_000])
    assert not Job.objects.exists()
    assert timer_store().pending_count() == 0


def test_an_unknown_overlap_policy_is_refused(tenant, redis_client):
    with pytest.raises(InvalidJob, match="allow, skip, buffer_one, cancel_previous"):
        api.schedule_cron("chrono.noop", tenant=tenant, cron="* * * * *", overlap="sometimes")


def test_configure_changes_how_occurrences_run_and_keeps_max_retries_in_step(
    tenant, redis_client
):
    from scheduler.misfire import MisfirePolicy, MisfireRule

    job = api.schedule_cron("chrono.noop", tenant=tenant, cron="*/10 * * * *", max_retries=1)
    policy = RetryPolicy(max_attempts=6, initial_delay_ms=10)
    api.configure(job.job_id, tenant=tenant, retry=policy, timeouts_ms=(1_000, None),
                  overlap="allow", misfire=MisfireRule(MisfirePolicy.FIRE_ALL, 2), jitter_ms=5_000)
    job.refresh_from_db()
    assert (job.max_retries, RetryPolicy.from_json(job.retry_policy)) == (5, policy)
    assert (job.soft_timeout_ms, job.hard_timeout_ms, job.overlap_policy) == (1_000, None, "allow")
    assert (job.misfire_policy, job.misfire_fire_all_limit, job.jitter_ms) == ("fire_all", 2, 5_000)
    assert timer_store().fire_time_of(str(job.job_id)) == datetime_to_ms(job.next_run_at)


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"jitter_ms": 5}, "jitter_ms", "applies to cron and interval jobs only"),
        ({"overlap": "allow"}, "overlap", "applies to cron and interval jobs only"),
        ({"timeouts_ms": (2_000, 2_000)}, "soft_timeout_ms", "below hard_timeout_ms"),
    ],
)
def test_configure_refuses_what_does_not_fit_the_job(tenant, redis_client, kwargs, field,
                                                     message):
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    with pytest.raises(InvalidJob) as error:
        api.configure(job.job_id, tenant=tenant, **kwargs)
    assert error.value.field == field and message in error.value.message


def test_a_jitter_is_held_to_the_shortest_gap_of_an_irregular_schedule(tenant, redis_client):
    # 9:00 and 10:00 every day: an hour apart, then 23 hours. Two hours of spread would let a
    # 9:00 occurrence fire after the 10:00 one, whatever the time of day the job is created
    # at (the REST API refuses it too, with the same rule).
    with pytest.raises(InvalidJob) as error:
        api.schedule_cron("chrono.noop", tenant=tenant, cron="0 9,10 * * *",
                          jitter_ms=7_200_000)
    assert error.value.field == "jitter_ms" and "3600000 ms" in error.value.message
    job = api.schedule_cron("chrono.noop", tenant=tenant, cron="0 9,10 * * *",
                            jitter_ms=3_599_999)
    with pytest.raises(InvalidJob, match="not below the 3600000 ms between occurrences"):
        api.configure(job.job_id, tenant=tenant, jitter_ms=3_600_000)


def _paused_every_second(tenant, policy):
    """A per-second cron job paused 2.5 s before the current second began: exactly three of its
    occurrences (the last three whole seconds) fell while paused."""
    import time

    from scheduler.clock import ms_to_datetime, now_ms
    from scheduler.misfire import MisfireRule

    while now_ms() % 1000 > 400:  # keep clear of a second boundary
        time.sleep(0.05)
    job = api.schedule_cron("chrono.noop", tenant=tenant, cron="* * * * * *",
                            misfire=MisfireRule(policy, 2))
    api.pause(job.job_id, tenant=tenant)
    second = now_ms() // 1000 * 1000
    Job.objects.filter(pk=job.pk).update(paused_at=ms_to_datetime(second - 2_500))
    return job


@pytest.mark.parametrize(("policy", "fired", "skipped"),
                         [("fire_once", 1, 2), ("fire_all", 2, 1), ("skip", 0, 3)])
def test_occurrences_missed_while_paused_follow_the_misfire_policy_with_no_grace(
    tenant, redis_client, policy, fired, skipped
):
    from scheduler.clock import now_ms
    from scheduler.misfire import MisfirePolicy
    from scheduler.models import Execution

    job = _paused_every_second(tenant, MisfirePolicy(policy))
    assert api.resume(job.job_id, tenant=tenant)
    job.refresh_from_db()
    ledger = list(Execution.objects.filter(job=job, status="SKIPPED"))
    assert len(ledger) == skipped
    assert all("while paused" in e.reason for e in ledger)
    next_ms = datetime_to_ms(job.next_run_at)
    if fired:  # the first occurrence to fire is already due: the beat fires it at once
        assert next_ms <= now_ms()
    else:
        assert next_ms > now_ms()
    assert timer_store().fire_time_of(str(job.job_id)) == next_ms


@pytest.mark.parametrize(("schedule", "kwargs", "field", "message"), [
    (api.schedule_once, {"delay": 1, "name": "a\x00b"}, "name",
     "name contains a control character (U+0000, NUL) at position 1; remove it."),
    (api.schedule_once, {"delay": 1, "queue": "q\n"}, "queue",
     "queue contains a control character (U+000A, line feed) at position 1; remove it."),
    (api.schedule_once, {"delay": 1, "idempotency_key": "k\x00"}, "idempotency_key",
     "idempotency_key contains a control character (U+0000, NUL) at position 1; remove it."),
    (api.schedule_once, {"delay": 1, "retry": RetryPolicy(non_retryable=("Value\x00Error",))},
     "retry", "non_retryable contains a control character (U+0000, NUL) at position 5; "
     "remove it."),
    (api.schedule_cron, {"cron": "0\t* * * *"}, "cron",
     "cron contains a control character (U+0009, tab) at position 1; remove it."),
    (api.schedule_cron, {"cron": "0 * * * *", "timezone": "UTC\x00"}, "timezone",
     "timezone contains a control character (U+0000, NUL) at position 3; remove it."),
])
def test_a_control_character_in_a_text_argument_is_refused(tenant, redis_client, schedule,
                                                            kwargs, field, message):
    with pytest.raises(InvalidJob) as error:
        schedule("chrono.noop", tenant=tenant, **kwargs)
    assert (error.value.field, error.value.message) == (field, message)
    assert not Job.objects.exists()


def test_a_control_character_in_the_task_name_or_a_new_schedule_is_refused(tenant, redis_client):
    with pytest.raises(InvalidJob) as error:
        api.schedule_once("chrono.noop\x1b", tenant=tenant, delay=1)
    assert error.value.field == "task_name"
    with pytest.raises(InvalidJob) as error:
        api.schedule_once_many("chrono.noop", tenant=tenant, fire_times=[], name="\x00")
    assert error.value.field == "name"
    job = api.schedule_cron("chrono.noop", tenant=tenant, cron="0 * * * *")
    with pytest.raises(InvalidJob) as error:
        api.reschedule(job.job_id, tenant=tenant, cron="5\x00 * * * *")
    assert error.value.field == "cron"
    job.refresh_from_db()
    assert job.cron_expression == "0 * * * *"


def test_the_payload_limit_is_the_rest_apis(tenant, redis_client):
    from tests.integration.test_api_validation import LIMIT, payload_of

    api.schedule_once("chrono.noop", tenant=tenant, delay=1, kwargs=payload_of(LIMIT))
    with pytest.raises(PayloadTooLarge) as error:
        api.schedule_once("chrono.noop", tenant=tenant, delay=1, kwargs=payload_of(LIMIT + 1))
    assert error.value.message == (
        f"args and kwargs are {LIMIT + 1} bytes as JSON; the limit is {LIMIT} bytes. Pass a "
        "reference (an id, a URL) instead of the data itself.")
    assert Job.objects.count() == 1


def test_an_integer_outside_64_bits_is_refused_naming_its_path(tenant, redis_client):
    with pytest.raises(InvalidJob) as error:
        api.schedule_once("chrono.noop", tenant=tenant, delay=1, kwargs={"ids": [1, 2**64]})
    assert (error.value.field, error.value.message) == ("kwargs", (
        "kwargs.ids[1] is 18446744073709551616, outside the signed 64-bit integer range "
        "(-9223372036854775808 to 9223372036854775807); send it as a string."))
    with pytest.raises(InvalidJob, match=r"args\[0\] is an integer of 1506 digits, outside"):
        api.schedule_once("chrono.noop", tenant=tenant, delay=1, args=[-(10**1505)])
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=1, args=[2**63 - 1, -(2**63)])
    job.refresh_from_db()
    assert job.args == [2**63 - 1, -(2**63)]


def test_cancel_many_cancels_a_tenants_jobs_and_their_executions_in_three_statements(
    tenant, other_tenant, redis_client, django_assert_num_queries
):
    """What a workflow run stopping a fan-out does: every job of the list cancelled, audited and
    taken out of the timer store, its queued execution cancelled and its running one asked to
    stop, with three statements for the lot; another tenant's id and an unknown one are named,
    not cancelled."""
    waiting = [api.schedule_once("chrono.noop", tenant=tenant, delay=60) for _ in range(50)]
    paused = api.schedule_cron("chrono.noop", tenant=tenant, cron="0 3 * * *")
    api.pause(paused.job_id, tenant=tenant)
    queued = api.schedule_cron("chrono.noop", tenant=tenant, cron="* * * * *")
    running = api.schedule_cron("chrono.noop", tenant=tenant, cron="* * * * *")
    occurrences.load_and_insert([(str(job.job_id), datetime_to_ms(job.next_run_at))
                                 for job in (queued, running)])
    running_execution = Execution.objects.get(job=running)
    assert start_execution(str(running_execution.execution_id), attempt=1, worker_id="w1",
                           lease_ttl_ms=60_000, scheduled_for=running_execution.scheduled_for)
    done = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    Job.objects.filter(pk=done.pk).update(status="COMPLETED")  # fired, its execution gone
    timer_store().remove([str(done.job_id)])
    theirs = api.schedule_once("chrono.noop", tenant=other_tenant, delay=60)
    unknown = uuid.uuid4()
    ours = [job.job_id for job in [*waiting, paused, queued, running, done]]

    with django_assert_num_queries(5):  # BEGIN, three statements, COMMIT
        outcome = api.cancel_many([*ours, theirs.job_id, unknown, waiting[0].job_id],
                                  tenant=tenant, by="user:ops")

    assert outcome == api.CancelledMany(jobs=53, executions=2,
                                        not_found=(str(theirs.job_id), str(unknown)))
    assert set(Job.objects.filter(job_id__in=ours[:-1]).values_list("status", "cancelled_by")) \
        == {("CANCELLED", "user:ops")}
    assert Job.objects.get(pk=done.pk).status == "COMPLETED"
    assert Job.objects.get(pk=theirs.pk).status == "ACTIVE"
    assert AuditEvent.objects.filter(action="job.cancelled").count() == 53
    assert not any(timer_store().fire_time_of(str(job_id)) for job_id in ours)
    assert timer_store().fire_time_of(str(theirs.job_id)) is not None
    assert Execution.objects.get(job=queued).status == ExecutionStatus.CANCELLED
    running_execution.refresh_from_db()
    assert running_execution.status == ExecutionStatus.RUNNING
    assert running_execution.cancel_requested_at is not None
    assert api.cancel_many(ours, tenant=tenant) == api.CancelledMany(0, 0, ())  # nothing left
    with pytest.raises(JobNotFound):
        api.cancel(theirs.job_id, tenant=tenant)
