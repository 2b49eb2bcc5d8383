"""The job writer's streamed COPY (``job_writer.copy_streamed``, what ``api.schedule_many``
writes with): batches taken while the COPY is open, checked item by item, in one transaction;
against the real PostgreSQL and Redis."""

from __future__ import annotations

import pytest
from django.db import connection
from psycopg.pq import TransactionStatus

from chronocore import grants
from scheduler import api, job_writer, specs
from scheduler.models import Calendar, Job
from scheduler.timers import timer_store
from search.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.no_default_grants]


def spec(**fields) -> specs.JobSpec:
    when = {} if "cron_expression" in fields else {"delay_ms": 60_000}
    return specs.checked_spec({"job_type": "tests.noop"} | when | fields,
                              job_writer.current_limits())


def unkeyed(*batch: specs.JobSpec) -> tuple[list[specs.JobSpec], list[None]]:
    return list(batch), [None] * len(batch)


def test_the_next_batch_is_made_while_the_copy_of_the_one_before_is_open(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    grants.grant(tenant, "tests.*", "*")
    seen: list[TransactionStatus] = []

    def batches():
        for n in range(3):
            seen.append(connection.connection.info.transaction_status)
            yield unkeyed(*(spec(args=[n, i]) for i in range(50)))

    with django_capture_on_commit_callbacks(execute=True):
        copied = job_writer.copy_streamed(tenant.tenant_id, batches(),
                                          job_writer.ItemChecks(tenant.tenant_id))
    # The first batch is asked for before the COPY (its checks may query); the others while
    # the COPY is in progress on the connection.
    assert seen[1:] == [TransactionStatus.ACTIVE, TransactionStatus.ACTIVE]
    assert len(copied.ids) == 150 and None not in copied.ids and not copied.refused
    assert Job.objects.filter(tenant=tenant).count() == 150
    assert timer_store().pending_count() == 150
    assert AuditEvent.objects.filter(action="job.created").count() == 150


def test_a_batch_whose_checks_need_a_query_is_checked_between_two_copies(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    """A task, queue or calendars the checks have not answered yet, in a later batch: the
    COPY ends, the batch is checked (a query), a new COPY goes on; each refused spec alone."""
    grants.grant(tenant, "tests.noop", "*")
    Calendar.objects.create(tenant=tenant, name="weekend", rules=["* * SAT,SUN"])
    batches = [
        unkeyed(spec(), spec()),
        unkeyed(spec(job_type="billing.charge"), spec()),  # not granted: refused alone
        unkeyed(spec(cron_expression="0 9 * * *", calendars=["weekend"]),
                spec(cron_expression="0 9 * * SAT", calendars=["weekend"])),  # never fires
    ]
    with django_capture_on_commit_callbacks(execute=True):
        copied = job_writer.copy_streamed(tenant.tenant_id, iter(batches),
                                          job_writer.ItemChecks(tenant.tenant_id))
    assert [position for position, _, _ in copied.refused] == [2, 5]
    assert [field for _, field, _ in copied.refused] == ["job_type", "calendars"]
    assert "billing.charge" in copied.refused[0][2]
    assert [job_id is None for job_id in copied.ids] == [False, False, True, False, False, True]
    jobs = Job.objects.filter(tenant=tenant)
    assert sorted(str(job.job_id) for job in jobs) == sorted(i for i in copied.ids if i)
    assert jobs.get(job_id=copied.ids[4]).calendars == ["weekend"]
    assert timer_store().pending_count() == 4


def test_a_key_repeated_in_a_later_batch_gives_the_first_job(tenant, redis_client):
    grants.grant(tenant, "tests.*", "*")
    items = [{"task_name": "tests.noop", "delay": 60, "args": [i]} for i in range(2_500)]
    items[10]["idempotency_key"] = items[2_400]["idempotency_key"] = "same"
    result = api.schedule_many(items, tenant=tenant)
    assert result.existing == [2_400] and result.ids[2_400] == result.ids[10]
    assert result.created == 2_499 and not result.errors
    assert Job.objects.filter(tenant=tenant).count() == 2_499


def test_a_key_missing_from_the_look_up_is_found_by_the_retry(tenant, redis_client):
    """A spec's key that ``known_keys`` did not hold, which a job already has: the COPY fails on
    the unique index, nothing of it stays, and every batch is written again by copy_keyed."""
    grants.grant(tenant, "tests.*", "*")
    first = api.schedule_once("tests.noop", tenant=tenant, delay=60, idempotency_key="old")
    batches = iter([([spec(), spec()], [None, "new"]), ([spec()], ["old"]), unkeyed(spec())])
    copied = job_writer.copy_streamed(tenant.tenant_id, batches,
                                      job_writer.ItemChecks(tenant.tenant_id),
                                      known_keys={"new"})
    assert copied.ids[2] == str(first.job_id) and copied.existing == [2]
    assert Job.objects.filter(tenant=tenant).count() == 1 + 3
    assert set(Job.objects.filter(tenant=tenant).values_list("idempotency_key", flat=True)) == {
        "old", "new", None}


def test_a_failure_in_a_later_batch_writes_nothing_of_the_earlier_ones(tenant, redis_client):
    grants.grant(tenant, "tests.*", "*")

    def batches():
        yield unkeyed(spec(), spec())
        yield unkeyed(spec())
        raise RuntimeError("the caller's items failed")

    with pytest.raises(RuntimeError, match="caller's items"):
        job_writer.copy_streamed(tenant.tenant_id, batches(),
                                 job_writer.ItemChecks(tenant.tenant_id))
    assert not Job.objects.filter(tenant=tenant).exists()
    assert not AuditEvent.objects.filter(action="job.created").exists()
    assert timer_store().pending_count() == 0


def test_a_key_without_known_keys_is_refused_rather_than_dropped(tenant, redis_client):
    grants.grant(tenant, "tests.*", "*")
    with pytest.raises(ValueError, match="known_keys"):
        job_writer.copy_streamed(tenant.tenant_id, iter([([spec()], ["k"])]),
                                 job_writer.ItemChecks(tenant.tenant_id))
    assert not Job.objects.filter(tenant=tenant).exists()
