"""Starts and finishes of a worker's threads share statements, and keep every guarantee of a
start or finish made alone: one start per execution, fenced finishes, one audit row each."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from scheduler import api, occurrences
from scheduler.batching import Coalescer
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.executions import (
    FinishRequest,
    StartRequest,
    finish_executions,
    start_executions,
)
from scheduler.lifecycle import execution_id_for
from scheduler.models import Execution, ExecutionStatus
from search import audit
from search.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def dispatched(tenant, count: int) -> list[str]:
    ids = []
    for i in range(count):
        job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
        execution_id = execution_id_for(str(job.job_id), 1_000 + i)
        Execution.objects.create(execution_id=execution_id, job=job, tenant=tenant,
                                 scheduled_for=job.next_run_at, status="DISPATCHED")
        ids.append(str(execution_id))
    return ids


def run_together(target, threads: int) -> None:
    """``target(n)`` on ``threads`` threads at once; returns when all are done."""
    running = [threading.Thread(target=target, args=(n,)) for n in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join(120)
    assert not any(t.is_alive() for t in running)


def start(execution_id: str, worker: str = "w1") -> StartRequest:
    return StartRequest(execution_id, 1, worker, 60_000, now_ms())


def test_one_statement_starts_many_and_a_duplicate_in_the_batch_does_not_start_twice(tenant):
    a, b = dispatched(tenant, 2)
    results = start_executions([start(a, "w1"), start(b, "w1"), start(a, "w2")])
    assert results[0] is not None and results[1] is not None
    assert results[2] is None  # the second delivery of ``a``: it must not run
    assert Execution.objects.get(pk=a).worker_id == "w1"
    assert start_executions([start(a, "w3")]) == [None]  # already running
    assert AuditEvent.objects.filter(action=audit.EXECUTION_STARTED).count() == 2


def test_finishes_share_a_statement_and_a_stale_token_is_refused(tenant):
    a, b = dispatched(tenant, 2)
    started_a, started_b = start_executions([start(a), start(b)])
    stale_b = type(started_b)(started_b.execution_id, started_b.fencing_token - 1, 1)
    recorded = finish_executions([
        FinishRequest(started_a, ExecutionStatus.SUCCEEDED, result={"n": 1}, exit_code=0,
                      at_ms=now_ms()),
        FinishRequest(stale_b, ExecutionStatus.SUCCEEDED, at_ms=now_ms()),
    ])
    assert recorded == [True, False]
    assert Execution.objects.get(pk=a).status == ExecutionStatus.SUCCEEDED
    assert Execution.objects.get(pk=a).result == {"n": 1}
    assert Execution.objects.get(pk=b).status == ExecutionStatus.RUNNING
    assert list(AuditEvent.objects.filter(execution_id=a).order_by("id")
                .values_list("action", flat=True)) == [audit.EXECUTION_STARTED,
                                                       audit.EXECUTION_SUCCEEDED]
    assert not AuditEvent.objects.filter(execution_id=b,
                                         action=audit.EXECUTION_SUCCEEDED).exists()


def test_threads_delivering_the_same_executions_at_once_start_each_exactly_once(tenant):
    """Sixteen threads (a thread-pool worker) each get every execution delivered: through the
    coalescer, on their own database connections, exactly one delivery of each may run."""
    ids = dispatched(tenant, 20)
    starts = Coalescer(start_executions)
    winners: dict[str, list[int]] = {i: [] for i in ids}
    barrier = threading.Barrier(16)

    def deliver(thread: int) -> None:
        try:
            barrier.wait()
            for execution_id in ids:
                if starts.submit(start(execution_id, f"w{thread}")) is not None:
                    winners[execution_id].append(thread)
        finally:
            connection.close()

    run_together(deliver, 16)
    assert all(len(w) == 1 for w in winners.values()), winners
    assert starts.batches < 16 * 20  # deliveries did share statements
    assert AuditEvent.objects.filter(action=audit.EXECUTION_STARTED).count() == 20


def test_statements_updating_the_same_executions_in_other_orders_do_not_deadlock(tenant):
    """A worker's lease renewals, batched starts/finishes and the beat's recorder update the
    same rows at once; each locks them in id order first, so none is a deadlock victim."""
    import random

    from django.db import DatabaseError

    from scheduler.leases import renew_leases

    ids = dispatched(tenant, 60)
    held = {s.execution_id: s.fencing_token for s in start_executions([start(i) for i in ids])}
    errors: list[Exception] = []
    barrier = threading.Barrier(3)

    def renew(seed: int) -> None:
        rng = random.Random(seed)
        try:
            barrier.wait()
            for _ in range(40):
                order = list(held)
                rng.shuffle(order)
                renew_leases({i: held[i] for i in order}, ttl_ms=60_000)
        except DatabaseError as exc:
            errors.append(exc)
        finally:
            connection.close()

    run_together(renew, 3)
    assert errors == []


def test_a_worker_records_on_connections_of_its_own_and_survives_losing_them(tenant):
    """Whichever of sixteen threads leads a batch runs it on the coalescer's own connections
    (one for a row alone, one for a batch of a few: at most two PostgreSQL backends, not one
    per thread); a connection killed under it fails that statement only, and the next one
    reconnects."""
    from django.db import DatabaseError

    from scheduler import worker

    def backends() -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = "
                           "current_database() AND pid <> pg_backend_pid()")
            return {pid for (pid,) in cursor.fetchall()}

    ids = dispatched(tenant, 32)
    before = backends()
    barrier = threading.Barrier(16)

    def deliver(thread: int) -> None:
        barrier.wait()
        for execution_id in ids[thread::16]:
            assert worker._starts.submit(start(execution_id)) is not None

    run_together(deliver, 16)
    assert Execution.objects.filter(pk__in=ids, status="RUNNING").count() == 32
    opened = backends() - before
    # The starts' connections, a row's and a batch's; no thread opened its own.
    assert 1 <= len(opened) <= 2, opened

    with connection.cursor() as cursor:
        for pid in opened:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    more = dispatched(tenant, 2)
    with pytest.raises(DatabaseError):
        worker._starts.submit(start(more[0]))
    assert worker._starts.submit(start(more[1])) is not None
    worker._start_connection.close()
    worker._start_batch_connection.close()


def test_a_batch_of_a_few_rows_is_recorded_on_a_connection_with_generic_plans(tenant):
    """A worker's batch of 2-16 starts runs where prepared statements keep a generic plan;
    a start alone, and a batch too large to be prepared, where PostgreSQL plans each call for
    its values (its default): scheduler.prepared.GENERIC_PLANS."""
    from scheduler import prepared, worker

    def plan_mode(own: prepared.OwnConnection) -> str:
        with prepared.cursor(on=own) as cursor:
            cursor.execute("SELECT current_setting('plan_cache_mode')", [], rows=1)
            return cursor.fetchall()[0][0]

    used = []

    def record(items, *, on):
        used.append((len(items), on))
        return [None] * len(items)

    run = worker._on_connection_for_size(record, worker._start_connection,
                                         worker._start_batch_connection)
    for size in (1, 2, prepared.GENERIC_PLAN_MAX_ROWS, prepared.GENERIC_PLAN_MAX_ROWS + 1):
        assert run([object()] * size) == [None] * size
    assert used == [(1, worker._start_connection), (2, worker._start_batch_connection),
                    (prepared.GENERIC_PLAN_MAX_ROWS, worker._start_batch_connection),
                    (prepared.GENERIC_PLAN_MAX_ROWS + 1, worker._start_connection)]

    ids = dispatched(tenant, 3)
    assert worker._start_batch_connection.generic_plans
    try:
        assert plan_mode(worker._start_connection) == "auto"
        assert plan_mode(worker._start_batch_connection) == "force_generic_plan"
        started = worker._starts.run([start(i) for i in ids])
        assert all(s is not None for s in started)
        assert Execution.objects.filter(pk__in=ids, status="RUNNING").count() == 3
        # Again after the connection was recycled: the setting is made on the new one.
        worker._start_batch_connection.close()
        assert plan_mode(worker._start_batch_connection) == "force_generic_plan"
    finally:
        worker._start_connection.close()
        worker._start_batch_connection.close()


def test_a_forked_child_does_not_use_its_parents_connection(tenant):
    import os

    from scheduler.prepared import OwnConnection

    own = OwnConnection()
    own.connect()
    parent_socket = own.wrapper().connection
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether it got a wrapper of its own, then leave at once
        os.write(write, b"1" if own._wrapper is None else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert own.wrapper().connection is parent_socket and not parent_socket.closed
    own.close()


def test_array_literals_reach_postgresql_as_the_values_they_were(db):
    """What the hot statements send as text arrays, PostgreSQL reads back unchanged: quotes,
    backslashes, braces, commas, the word NULL, a real NULL, newlines and non-ASCII text."""
    import json
    from datetime import UTC, datetime

    from scheduler import prepared

    texts = ['say "hi"', "back\\slash", "{,}", "NULL", None, "", "line\nbreak", "żółw ✓"]
    moments = [datetime(2026, 3, 29, 1, 30, 0, 123000, tzinfo=UTC), None]
    with prepared.cursor() as cursor:
        cursor.execute("SELECT %s::text[], %s::timestamptz[], %s::jsonb[]",
                       [prepared.array(texts), prepared.array(moments),
                        prepared.array(['{"a": "q\\"uote"}'])], rows=len(texts))
        (got_texts, got_moments, got_json), = cursor.fetchall()
    assert got_texts == texts
    assert got_moments == moments
    # (Django's psycopg set-up returns jsonb as its text.)
    assert [json.loads(v) if isinstance(v, str) else v for v in got_json] == [{"a": 'q"uote'}]


def test_the_beats_record_and_a_workers_failed_attempt_take_their_locks_in_one_order(tenant):
    """Both update an execution and its job in one statement: the beat's record of a dispatch
    (a worker can start, and fail, before it) and a worker's end of a failed attempt (the job's
    retry count). Both lock the execution first. With the record's job update first, the two
    deadlocked (CI, session 17), and the worker's failure went unrecorded until the reaper.

    Here the worker's side is played in two steps on a connection of its own: the execution
    locked, the record started and waiting, then the job updated."""
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    fire_ms = datetime_to_ms(job.next_run_at)
    execution_id = str(execution_id_for(str(job.job_id), fire_ms))
    Execution.objects.create(execution_id=execution_id, job=job, tenant=tenant,
                             scheduled_for=job.next_run_at, status="RUNNING", fencing_token=1,
                             worker_id="w1")
    errors: list[BaseException] = []
    locked, recorder_pid = threading.Event(), []

    def worker_side() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("UPDATE chrono_execution SET reason = 'failing' "
                               "WHERE execution_id = %s", [execution_id])
                locked.set()
                waited = time.monotonic()
                while not _waiting_on_a_lock(cursor, recorder_pid) and \
                        time.monotonic() - waited < 10:
                    time.sleep(0.01)
                cursor.execute("UPDATE chrono_job SET retry_count = retry_count + 1 "
                               "WHERE job_id = %s", [job.job_id])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    def recorder_side() -> None:
        try:
            locked.wait(10)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                recorder_pid.append(cursor.fetchone()[0])
            occurrences.record_dispatched(
                [(execution_id, fire_ms, now_ms())],
                advances=[occurrences.JobAdvance(str(job.job_id), fire_ms, None, now_ms())])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker_side), threading.Thread(target=recorder_side)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    job.refresh_from_db()
    assert (job.retry_count, job.status) == (1, "COMPLETED")
    assert Execution.objects.get(pk=execution_id).dispatched_at is not None


def _waiting_on_a_lock(cursor, pids: list[int]) -> bool:
    if not pids:
        return False
    cursor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                   [pids[0]])
    row = cursor.fetchone()
    return bool(row and row[0])


def test_a_batch_reads_its_own_rows_not_every_row_of_its_fire_time(tenant):
    """The instances of a workflow's fan-out share one scheduled_for: a batched start of a few
    of them locks its rows by their whole key, and does not read the thousands of others
    (a join with the table hashed every row of the range: 10,000 buffers a start at 10,000)."""
    import re
    import uuid

    from scheduler import executions
    from scheduler.clock import ms_to_datetime

    job = api.schedule_once("chrono.noop", tenant=tenant, delay=60)
    fire = job.next_run_at
    ids = [uuid.uuid4() for _ in range(3_000)]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO chrono_execution (execution_id, job_id, tenant_id, attempt, "
            "scheduled_for, status, error, logs_url, fencing_token) SELECT i, %s, %s, 1, %s, "
            "'DISPATCHED', '', '', 0 FROM unnest(%s::uuid[]) i",
            [job.job_id, tenant.tenant_id, fire, [str(i) for i in ids]])
    at = now_ms()
    requests = [StartRequest(str(i), 1, "w1", 60_000, at, fire) for i in ids[:8]]
    columns = {"execution_id": ids[:8], "attempt": [1] * 8, "worker_id": ["w1"] * 8,
               "started_at": [ms_to_datetime(at)] * 8,
               "lease_expires_at": [ms_to_datetime(at + 60_000)] * 8,
               "scheduled_for": [fire] * 8}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + executions._START_SQL[True],
                       executions._parameters(columns, keyed=True))
        plan = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    read = max(int(n) for n in re.findall(r"shared hit=(\d+)", plan))
    assert read < 1_000, plan
    assert all(r is not None for r in start_executions(requests))
