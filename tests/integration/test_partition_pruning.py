"""The statements of the hot path touch one day of the partitioned executions table, however many
days it keeps: each is run as the code runs it, recorded, then run again under
``EXPLAIN (ANALYZE, FORMAT JSON)`` on the same rows, and the partitions its plan read are
counted (a partition the planner pruned is not in the plan; one pruned while it ran has
``Actual Loops`` 0). A change that drops the partition key from one of them probes every day's
index again (what doubled PostgreSQL's CPU per job in the reverted retention15 merge), and
fails here: the last test shows that the same check sees it."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from chronoadmin.celery import app
from chronocore.config import get_config
from scheduler import api, occurrences, partitions, prepared, rollups, worker
from scheduler.attempts import end_attempt, load_waiting
from scheduler.batching import Coalescer
from scheduler.cancellation import finish_cancelled, request_cancel_running
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.dispatch import Publisher
from scheduler.executions import (
    FinishRequest,
    StartRequest,
    finish_executions,
    start_execution,
    start_executions,
)
from scheduler.leases import renew_leases
from scheduler.lifecycle import RetryTimer, execution_id_for
from scheduler.models import Execution, ExecutionStatus
from scheduler.retry import RetryPolicy

pytestmark = pytest.mark.django_db

TODAY = partitions.today_utc()
DAYS_BACK = 14
ROWS_A_DAY = 200
_EXECUTIONS = re.compile(r"\bchrono_execution\b(?!_)")


@pytest.fixture
def fortnight(tenant):
    """Today's partition and the fourteen days before it (with the week ahead and the default
    partition: 23 partitions), each day holding finished executions, analysed."""
    for back in range(1, DAYS_BACK + 1):
        day = TODAY - timedelta(days=back)
        if day not in partitions.existing_days():
            partitions.create_day(day)
    with connection.cursor() as cursor:
        for back in range(DAYS_BACK + 1):
            start, _ = partitions.day_bounds(TODAY - timedelta(days=back))
            cursor.execute(
                "INSERT INTO chrono_execution (execution_id, job_id, tenant_id, attempt, "
                "scheduled_for, status, error, logs_url, fencing_token) "
                "SELECT gen_random_uuid(), gen_random_uuid(), %s, 1, "
                "%s + n * interval '1 minute', 'SUCCEEDED', '', '', 1 "
                "FROM generate_series(1, %s) AS n",
                [tenant.tenant_id, start, ROWS_A_DAY])
        cursor.execute("ANALYZE chrono_execution")
    assert len(partitions.existing_days()) >= 15
    return tenant


def occurrence(tenant, *, status: str = "DISPATCHED") -> tuple[str, int]:
    """A one-time job due now, its execution inserted as the beat inserts it (today); the
    execution's id and fire ms."""
    job = api.schedule_once("tests.integration.pruned", tenant=tenant, delay=0)
    fire_ms = datetime_to_ms(job.next_run_at)
    occurrences.load_and_insert([(str(job.job_id), fire_ms)])
    execution_id = execution_id_for(str(job.job_id), fire_ms)
    Execution.objects.filter(pk=execution_id).update(status=status)
    return str(execution_id), fire_ms


@contextmanager
def recorded() -> Iterator[list[tuple[str, object]]]:
    """The statements on chrono_execution run in the block, as ``(sql, params)``: Django's
    (their parameters bound into the text) and the prepared ones (:mod:`scheduler.prepared`)."""
    statements: list[tuple[str, object]] = []
    original = prepared.PreparedCursor.execute

    def execute(self, sql, params, *, rows):
        statements.append((sql, params))
        return original(self, sql, params, rows=rows)

    prepared.PreparedCursor.execute = execute
    try:
        with CaptureQueriesContext(connection) as django_queries:
            yield statements
    finally:
        prepared.PreparedCursor.execute = original
    statements += [(query["sql"], None) for query in django_queries.captured_queries]
    statements[:] = [(sql, params) for sql, params in statements if _EXECUTIONS.search(sql)]


def plans(action: Callable[[], object]) -> list[tuple[str, dict]]:
    """Run ``action``, then undo it and run each of its statements on chrono_execution, in
    order, under EXPLAIN (ANALYZE), which runs them: ``(sql, plan)`` of each. The rows end as
    the action left them."""
    savepoint = transaction.savepoint()
    with recorded() as statements:
        action()
    transaction.savepoint_rollback(savepoint)
    assert statements, "the action ran no statement on chrono_execution"
    connection.ensure_connection()
    explained = []
    with psycopg.Cursor(connection.connection) as cursor:
        for sql, params in statements:
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
            explained.append((sql, cursor.fetchone()[0][0]["Plan"]))
    return explained


def partitions_read(plan: dict) -> set[str]:
    """The partitions of chrono_execution a plan's nodes read or wrote while it ran: a scan
    counts when it ran at least once, an update's target tables always."""
    def partition(name: str) -> bool:
        return name.startswith(partitions.DAY_PREFIX) or name == partitions.DEFAULT_PARTITION

    found: set[str] = set()
    relation = plan.get("Relation Name", "")
    if partition(relation) and (plan.get("Node Type") == "ModifyTable"
                                or plan.get("Actual Loops", 0) > 0):
        found.add(relation)
    found |= {t["Relation Name"] for t in plan.get("Target Tables", [])
              if partition(t["Relation Name"])}
    for child in plan.get("Plans", []):
        found |= partitions_read(child)
    return found


def assert_one_day(explained: list[tuple[str, dict]]) -> None:
    today = partitions.partition_name(TODAY)
    for sql, plan in explained:
        assert partitions_read(plan) == {today}, (sql[:200], json.dumps(plan)[:2000])


@app.task(name="tests.integration.pruned", bind=True)
def pruned(self, fail: bool = False) -> str:
    if fail:
        raise ValueError("asked to fail")
    return "done"


@pytest.fixture
def in_process_worker(monkeypatch):
    """The worker's recording on this test's connection; the leases it holds, noted."""
    held: list[tuple] = []
    # Counted in memory: the process's rollup writer would write from a thread of its own.
    monkeypatch.setattr(rollups, "recorder", rollups.Accumulator)
    monkeypatch.setattr(worker, "_starts", Coalescer(start_executions))
    monkeypatch.setattr(worker, "_finishes", Coalescer(finish_executions))
    monkeypatch.setattr(worker, "lease_keeper", lambda config: type(
        "Keeper", (), {"hold": lambda self, *a: held.append(a),
                       "release": lambda self, *a: None})())
    return held


NO_RETRIES = RetryPolicy(max_attempts=1)


def beat_headers(execution_id: str, fire_ms: int, tenant,
                 policy: RetryPolicy = NO_RETRIES) -> dict[str, object]:
    """The Chrono headers of the beat's message of an occurrence (scheduler.beat)."""
    return {"chrono_execution_id": execution_id, "chrono_attempt": 1, "chrono_fire_ms": fire_ms,
            "chrono_tenant_id": str(tenant.tenant_id),
            "chrono_retry_policy": json.dumps(policy.to_json())}


def run_as_the_worker(execution_id: str, fire_ms: int, tenant, *, fail: bool = False,
                      headers: dict[str, object] | None = None) -> None:
    """Deliver the execution to ChronoTask in process, with the headers the beat sends (or
    ``headers``)."""
    pruned.push_request(**(headers or beat_headers(execution_id, fire_ms, tenant)),
                        hostname="w1@host", args=[], kwargs={"fail": fail}, delivery_info={})
    try:
        if fail:
            with pytest.raises(ValueError):
                pruned(fail=True)
        else:
            pruned()
    finally:
        pruned.pop_request()


def test_the_workers_start_and_finish_read_todays_partition_alone(fortnight, in_process_worker):
    execution_id, fire_ms = occurrence(fortnight)
    explained = plans(lambda: run_as_the_worker(execution_id, fire_ms, fortnight))
    assert len(explained) == 2  # the start, the finish
    assert_one_day(explained)
    assert in_process_worker == [(execution_id, 1, ms_to_datetime(fire_ms))]


def test_a_failed_attempt_is_recorded_in_todays_partition_alone(fortnight, in_process_worker):
    execution_id, fire_ms = occurrence(fortnight)
    explained = plans(lambda: run_as_the_worker(execution_id, fire_ms, fortnight, fail=True))
    assert len(explained) == 2  # the start, the end of the attempt
    assert_one_day(explained)
    assert Execution.objects.get(pk=execution_id).status == ExecutionStatus.FAILED


def test_batched_starts_finishes_and_lease_renewals_read_todays_partition_alone(fortnight):
    (a, a_ms), (b, b_ms) = occurrence(fortnight), occurrence(fortnight)
    requests = [StartRequest(a, 1, "w1", 60_000, now_ms(), ms_to_datetime(a_ms)),
                StartRequest(b, 1, "w1", 60_000, now_ms(), ms_to_datetime(b_ms))]
    results: list = []
    assert_one_day(plans(lambda: results.append(start_executions(requests))))
    started = results[0]
    assert [s.scheduled_for for s in started] == [ms_to_datetime(a_ms), ms_to_datetime(b_ms)]
    held = {s.execution_id: s.fencing_token for s in started}
    keys = {s.execution_id: s.scheduled_for for s in started}
    assert_one_day(plans(lambda: renew_leases(held, ttl_ms=60_000, keys=keys)))
    assert_one_day(plans(lambda: finish_executions(
        [FinishRequest(s, ExecutionStatus.SUCCEEDED, at_ms=now_ms()) for s in started])))


def test_the_beats_record_of_a_dispatch_reads_todays_partition_alone(fortnight):
    execution_id, fire_ms = occurrence(fortnight, status="SCHEDULED")
    explained = plans(lambda: occurrences.record_dispatched(
        [(uuid.UUID(execution_id), fire_ms, now_ms())], advances=[]))
    assert_one_day(explained)


def test_a_lost_attempt_and_a_cancellation_read_todays_partition_alone(fortnight):
    execution_id, fire_ms = occurrence(fortnight)
    started = start_execution(execution_id, attempt=1, worker_id="w1", lease_ttl_ms=60_000,
                              scheduled_for=ms_to_datetime(fire_ms))
    assert started.scheduled_for == ms_to_datetime(fire_ms)
    assert_one_day(plans(lambda: end_attempt(
        execution_id, scheduled_for=started.scheduled_for, fencing_token=started.fencing_token,
        from_status="RUNNING", attempt=1, policy=RetryPolicy(max_attempts=3),
        error="lost", error_type="chrono.ExecutionLost", actor="reaper")))
    again = start_execution(execution_id, attempt=2, worker_id="w1", lease_ttl_ms=60_000,
                            scheduled_for=started.scheduled_for)
    assert_one_day(plans(lambda: request_cancel_running(
        execution_id=execution_id, scheduled_for=again.scheduled_for, by="tests")))
    assert_one_day(plans(lambda: finish_cancelled(again)))
    assert Execution.objects.get(pk=execution_id).status == ExecutionStatus.CANCELLED


def test_a_start_without_the_key_reads_every_day_as_the_check_sees(fortnight):
    """The control: the same start by id alone (a message without chrono_fire_ms) probes every
    partition, and the check above counts them."""
    execution_id, _ = occurrence(fortnight)
    ((_, plan),) = plans(lambda: start_execution(execution_id, attempt=1, worker_id="w1",
                                                 lease_ttl_ms=60_000))
    assert len(partitions_read(plan)) >= DAYS_BACK + 1


class RecordingPublisher(Publisher):
    """Keeps what it is asked to publish (what a message carries is this test's subject, not
    RabbitMQ)."""

    def __init__(self) -> None:
        super().__init__(get_config().broker_url, origin="tests")
        self.sent: list = []

    def publish_batch(self, messages, *, retry_tier_ms: int = 0) -> None:
        self.sent += list(messages)


def test_every_attempts_message_carries_its_executions_scheduled_for(fortnight,
                                                                     in_process_worker,
                                                                     monkeypatch):
    """chrono_fire_ms is the partition key of every attempt: the worker's next attempt copies
    it, the reaper's and the beat's (built from the row) carry the row's, and the second
    attempt's start reads today's partition alone."""
    execution_id, fire_ms = occurrence(fortnight)
    publisher = RecordingPublisher()
    runtime = worker.WorkerRuntime(get_config())
    runtime._publisher = publisher
    monkeypatch.setattr(worker, "_runtime", runtime)
    policy = RetryPolicy(max_attempts=3, initial_delay_ms=100, max_delay_ms=100)
    run_as_the_worker(execution_id, fire_ms, fortnight, fail=True,
                      headers=beat_headers(execution_id, fire_ms, fortnight, policy))
    (second,) = publisher.sent
    assert second.chrono_headers["chrono_attempt"] == 2
    assert second.chrono_headers["chrono_fire_ms"] == fire_ms
    (row,) = load_waiting([RetryTimer(execution_id, 2, fire_ms)])
    assert row.message(3).chrono_headers["chrono_fire_ms"] == fire_ms
    explained = plans(lambda: run_as_the_worker(execution_id, fire_ms, fortnight,
                                                headers=second.chrono_headers))
    assert len(explained) == 2
    assert_one_day(explained)
    assert Execution.objects.get(pk=execution_id).status == ExecutionStatus.SUCCEEDED


def test_a_message_whose_fire_time_is_not_its_rows_still_starts_by_id(fortnight, caplog):
    execution_id, fire_ms = occurrence(fortnight)
    wrong = ms_to_datetime(fire_ms - 86_400_000)
    started = start_execution(execution_id, attempt=1, worker_id="w1", lease_ttl_ms=60_000,
                              scheduled_for=wrong)
    assert started is not None and started.scheduled_for == ms_to_datetime(fire_ms)
    assert "started by its id alone" in caplog.text
