"""Jobs by status per tenant, kept by the triggers on chrono_job: every way a job is created,
changed or deleted is counted, for its tenant and the platform; folds keep the sums; many
writers and folds at once leave the counts equal to a count of the table; and the migration
counted the jobs that were there before it."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count

from chronocore.models import Tenant
from scheduler import api, job_counts, occurrences
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.errors import SchedulerError
from scheduler.lifecycle import execution_id_for
from scheduler.models import Job, JobCount, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)


def counted_in_table(tenant_id=None) -> dict[str, int]:
    jobs = Job.objects.all() if tenant_id is None else Job.objects.filter(tenant_id=tenant_id)
    return dict(jobs.values_list("status").annotate(n=Count("job_id")).order_by())


def assert_counts_match(*tenants) -> None:
    for tenant in tenants:
        assert job_counts.jobs_by_status(str(tenant.tenant_id)) == counted_in_table(
            tenant.tenant_id), tenant.slug
    assert job_counts.jobs_by_status(None) == counted_in_table()


def test_every_way_a_job_changes_is_counted(tenant, other_tenant, tenant_api, redis_client):
    cron = api.schedule_cron("tests.noop", tenant=tenant, cron="*/5 * * * *")
    once = api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(seconds=60))
    api.schedule_once_many("tests.noop", tenant=other_tenant, fire_times=[
        once.next_run_at + timedelta(seconds=i) for i in range(5)])
    bulk = tenant_api.post_json("/api/v1/jobs/bulk",  # the bulk API's COPY
                                [{"job_type": "tests.noop", "delay_ms": 60_000}] * 7)
    assert bulk.status_code in (200, 201), bulk.content
    assert job_counts.jobs_by_status(str(tenant.tenant_id)) == {"ACTIVE": 9}
    assert job_counts.jobs_by_status(None) == {"ACTIVE": 14}

    api.pause(cron.job_id, tenant=tenant)
    assert_counts_match(tenant, other_tenant)
    api.resume(cron.job_id, tenant=tenant)
    api.cancel(cron.job_id, tenant=tenant)
    assert job_counts.jobs_by_status(str(tenant.tenant_id)) == {"ACTIVE": 8, "CANCELLED": 1}

    # The beat's recorder completes a one-time job when its occurrence is confirmed.
    fire_ms = datetime_to_ms(once.next_run_at)
    occurrences.load_and_insert([(str(once.job_id), fire_ms)])
    occurrences.record_dispatched(
        [(execution_id_for(str(once.job_id), fire_ms), fire_ms, now_ms())],
        advances=[occurrences.JobAdvance(str(once.job_id), fire_ms, None, now_ms())])
    assert Job.objects.get(job_id=once.job_id).status == JobStatus.COMPLETED
    assert_counts_match(tenant, other_tenant)

    api.delete(cron.job_id, tenant=tenant)
    assert job_counts.jobs_by_status(str(tenant.tenant_id)) == {"ACTIVE": 7, "COMPLETED": 1}
    other_id = str(other_tenant.tenant_id)
    other_tenant.delete()  # its jobs go with it
    assert job_counts.jobs_by_status(other_id) == {}
    assert_counts_match(tenant)


def test_an_update_that_changes_no_status_appends_nothing(tenant, redis_client):
    api.schedule_cron("tests.noop", tenant=tenant, cron="*/5 * * * *")
    rows = JobCount.objects.count()
    Job.objects.filter(tenant=tenant).update(next_run_at=None, name="renamed")
    assert JobCount.objects.count() == rows


def test_a_fold_sums_each_tenants_rows_into_one_per_status(tenant, other_tenant, redis_client):
    for _ in range(3):
        api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(seconds=60))
    job = api.schedule_once("tests.noop", tenant=other_tenant, delay=timedelta(seconds=60))
    api.pause(job.job_id, tenant=other_tenant)
    before = (job_counts.jobs_by_status(str(tenant.tenant_id)),
              job_counts.jobs_by_status(str(other_tenant.tenant_id)),
              job_counts.jobs_by_status(None))
    assert job_counts.fold() > 0
    after = (job_counts.jobs_by_status(str(tenant.tenant_id)),
             job_counts.jobs_by_status(str(other_tenant.tenant_id)),
             job_counts.jobs_by_status(None))
    assert after == before
    # One row per tenant and status with jobs (ACTIVE went to zero for the other tenant).
    assert JobCount.objects.filter(tenant_id=other_tenant.tenant_id).count() == 1
    assert JobCount.objects.filter(folded=False).count() == 0
    assert job_counts.fold() == 0


def test_a_second_fold_while_one_runs_does_nothing(tenant, redis_client):
    api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(seconds=60))
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [job_counts.FOLD_LOCK_KEY])
            assert job_counts.fold() is None
            cursor.execute("ROLLBACK")
    finally:
        other.close()
    assert job_counts.fold() > 0


def _writer(tenants: list[Tenant], seed: int, errors: list[BaseException],
            stop: threading.Event) -> None:
    """Random creations, pauses, resumes, cancels, deletions and raw multi-row updates (two
    statuses touched in either order within one transaction), until ``stop``."""
    rng = random.Random(seed)
    try:
        while not stop.is_set():
            tenant = rng.choice(tenants)
            mine = list(Job.objects.filter(tenant=tenant).values_list("job_id", flat=True)[:50])
            op = rng.randrange(7)
            if op == 0 or not mine:
                api.schedule_once_many("tests.noop", tenant=tenant, fire_times=[
                    ms_to_datetime(now_ms() + 600_000 + i) for i in range(rng.randrange(1, 20))])
            elif op <= 4:
                change = (api.pause, api.resume, api.cancel, api.delete)[op - 1]
                try:
                    change(rng.choice(mine), tenant=tenant)
                except SchedulerError:
                    pass  # deleted or finished by another writer meanwhile: not this test's
            else:
                first, second = rng.sample(["PAUSED", "ACTIVE", "COMPLETED"], 2)
                some, others = (rng.sample(mine, min(5, len(mine))) for _ in range(2))
                with transaction.atomic():
                    # Job rows locked in id order first, as Chrono's own multi-row writers do
                    # (two writers updating the same jobs in other orders deadlock on the jobs).
                    list(Job.objects.select_for_update().filter(job_id__in=some + others)
                         .order_by("job_id").values_list("job_id"))
                    Job.objects.filter(job_id__in=some).update(status=first)
                    Job.objects.filter(job_id__in=others).update(status=second)
                    if rng.random() < 0.2:
                        transaction.set_rollback(True)  # rolled back: counted nowhere
    except BaseException as exc:  # reported by the test
        errors.append(exc)
    finally:
        connection.close()


def _folder(errors: list[BaseException], stop: threading.Event) -> None:
    try:
        while not stop.is_set():
            job_counts.fold(keys=3)  # small folds, so they interleave with the writers
    except BaseException as exc:
        errors.append(exc)
    finally:
        connection.close()


def test_concurrent_writers_and_folds_keep_the_counts_exact(tenant, other_tenant, redis_client):
    tenants = [tenant, other_tenant]
    errors: list[BaseException] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_writer, args=(tenants, seed, errors, stop))
               for seed in range(4)]
    threads += [threading.Thread(target=_folder, args=(errors, stop)) for _ in range(2)]
    for thread in threads:
        thread.start()
    threading.Event().wait(8)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []  # no deadlock, no serialization failure, nothing else
    assert Job.objects.count() > 20
    assert len(counted_in_table()) >= 3  # the writers reached several statuses
    assert_counts_match(tenant, other_tenant)
    job_counts.fold()
    assert_counts_match(tenant, other_tenant)


def _copy_job_as_the_schema_stands(job_id, *, status: str) -> None:
    """A new job row like ``job_id``'s, with the columns the table has at the migration it is
    at (the models, and so the API, may have more)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT column_name FROM information_schema.columns "
                       "WHERE table_name = 'chrono_job' AND is_generated = 'NEVER' "
                       "AND column_name NOT IN "
                       "('job_id', 'status', 'idempotency_key')")
        columns = ", ".join(f'"{name}"' for (name,) in cursor.fetchall())
        cursor.execute(
            f"INSERT INTO chrono_job (job_id, status, {columns}) "  # noqa: S608 - the catalog's
            f"SELECT gen_random_uuid(), %s, {columns} FROM chrono_job WHERE job_id = %s",
            [status, job_id])


def test_the_migration_counts_the_jobs_already_there_and_rebuild_counts_again(tenant,
                                                                              redis_client):
    api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(seconds=60))
    paused = api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(seconds=60))
    api.pause(paused.job_id, tenant=tenant)
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        MigrationExecutor(connection).migrate([("scheduler", "0011_tenant_moved_to_chronocore")])
        _copy_job_as_the_schema_stands(paused.job_id, status="ACTIVE")  # uncounted
    finally:
        MigrationExecutor(connection).migrate(leaves)
    assert job_counts.jobs_by_status(str(tenant.tenant_id)) == {"ACTIVE": 2, "PAUSED": 1}
    with connection.cursor() as cursor:  # a path that bypasses the triggers
        cursor.execute("ALTER TABLE chrono_job DISABLE TRIGGER chrono_job_count_updated")
        cursor.execute("UPDATE chrono_job SET status = 'CANCELLED' WHERE job_id = %s",
                       [paused.job_id])
        cursor.execute("ALTER TABLE chrono_job ENABLE TRIGGER chrono_job_count_updated")
    assert job_counts.jobs_by_status(str(tenant.tenant_id)) != counted_in_table(tenant.tenant_id)
    assert job_counts.rebuild() == 4  # two statuses, for the tenant and for all
    assert_counts_match(tenant)
