"""No execution outlives its job, without a foreign key to check each inserted row.

``chrono_execution.job_id`` has no constraint in PostgreSQL (its per-row check halved the beat's
ceiling); the beat's insert locks the jobs it reads ``FOR KEY SHARE`` and ``api.delete`` locks
the job ``FOR UPDATE`` before collecting its executions. These tests run both orders of a
deletion racing an insert, on two real connections.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from scheduler import api, occurrences
from scheduler.clock import datetime_to_ms
from scheduler.models import Execution, Job

pytestmark = pytest.mark.django_db(transaction=True)


def on_thread(target) -> threading.Thread:
    def run() -> None:
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_the_schema_has_no_job_foreign_key_on_executions_but_keeps_the_tenant_one():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT confrelid::regclass::text FROM pg_constraint "
            "WHERE conrelid = 'chrono_execution'::regclass AND contype = 'f'"
        )
        assert {row[0] for row in cursor.fetchall()} == {"chrono_tenant"}


def test_an_insert_that_waits_for_a_deletion_inserts_nothing(tenant):
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    fire_ms = datetime_to_ms(job.next_run_at)
    locked, inserted = threading.Event(), {}

    def delete_slowly() -> None:
        with transaction.atomic():
            list(Job.objects.filter(pk=job.pk).select_for_update().values_list("pk"))
            locked.set()
            time.sleep(0.5)  # the beat's insert arrives meanwhile and must wait
            Job.objects.filter(pk=job.pk).delete()

    deleter = on_thread(delete_slowly)
    assert locked.wait(5)
    inserter = on_thread(lambda: inserted.update(
        occurrences.load_and_insert([(str(job.job_id), fire_ms)])))
    deleter.join(10)
    inserter.join(10)

    assert inserted == {}, "a deleted job was loaded for publishing"
    assert not Execution.objects.filter(job_id=job.job_id).exists()


def test_a_deletion_that_waits_for_an_insert_deletes_its_execution_too(tenant):
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    fire_ms = datetime_to_ms(job.next_run_at)
    inserted = threading.Event()

    def insert_slowly() -> None:
        with transaction.atomic():
            assert occurrences.load_and_insert([(str(job.job_id), fire_ms)])
            inserted.set()
            time.sleep(0.5)  # the deletion arrives meanwhile and must wait for this commit

    inserter = on_thread(insert_slowly)
    assert inserted.wait(5)
    deleter = on_thread(lambda: api.delete(job.job_id, tenant=tenant, by="test"))
    inserter.join(10)
    deleter.join(10)

    assert not Job.objects.filter(pk=job.pk).exists()
    assert not Execution.objects.filter(job_id=job.job_id).exists(), "an orphan execution"
