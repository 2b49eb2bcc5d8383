"""The retention pass against real PostgreSQL: the executions table is partitioned by day with
days created ahead, an expired day is dropped once its executions are finished and their audit
rows shipped (and kept otherwise), today is never touched, and shipped audit rows go."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from chronocore.config import get_config
from reaper.metrics import ReaperCollector
from reaper.reaper import Reaper
from scheduler import api, partitions
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.dispatch import Publisher
from scheduler.models import Execution, ExecutionEnd
from scheduler.retention import run_retention
from scheduler.timers import timer_store
from search.models import AuditEvent

pytestmark = pytest.mark.django_db

TODAY = partitions.today_utc()


def config(**values):
    return dataclasses.replace(get_config(), **values)


def execution(job, day, *, status="SUCCEEDED", hour=12) -> Execution:
    start, _ = partitions.day_bounds(day)
    return Execution.objects.create(
        execution_id=uuid.uuid4(), job=job, tenant=job.tenant,
        scheduled_for=start + timedelta(hours=hour), status=status)


def partition_of(execution_id) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM chrono_execution "
                       "WHERE execution_id = %s", [execution_id])
        row = cursor.fetchone()
    return row[0] if row else ""


def audit_row(execution_id, *, shipped_at: datetime | None) -> AuditEvent:
    return AuditEvent.objects.create(occurred_at=timezone.now(), action="execution.succeeded",
                                     outcome="success", execution_id=execution_id,
                                     shipped_at=shipped_at)


@pytest.fixture
def job(tenant):
    return api.schedule_once("tests.noop", tenant=tenant, delay=3600)


def test_the_table_is_partitioned_by_day_with_the_week_ahead_and_a_default_partition():
    with connection.cursor() as cursor:
        cursor.execute("SELECT partstrat, a.attname FROM pg_partitioned_table p "
                       "JOIN pg_attribute a ON a.attrelid = p.partrelid "
                       "AND a.attnum = p.partattrs[0] "
                       "WHERE p.partrelid = 'chrono_execution'::regclass")
        assert cursor.fetchone() == ("r", "scheduled_for")
        cursor.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                       "WHERE conrelid = 'chrono_execution'::regclass AND contype = 'p'")
        assert cursor.fetchone() == ("PRIMARY KEY (execution_id, scheduled_for)",)
        cursor.execute("SELECT partition_default FROM (SELECT to_regclass(%s) IS NOT NULL "
                       "AS partition_default) d", [partitions.DEFAULT_PARTITION])
        assert cursor.fetchone() == (True,)
    days = partitions.existing_days()
    assert {TODAY + timedelta(days=n) for n in range(8)} <= days


def test_every_index_and_the_end_trigger_reach_each_partition(job):
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s",
                       [partitions.partition_name(TODAY)])
        names = {row[0] for row in cursor.fetchall()}
        cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'chrono_execution_ended' "
                       "AND tgrelid = to_regclass(%s)", [partitions.partition_name(TODAY)])
        assert cursor.fetchone() == (1,)
    prefix = partitions.partition_name(TODAY) + "_"
    assert {prefix + "chrono_execution_pkey", prefix + "execution_job_active_idx",
            prefix + "execution_running_lease_idx"} <= names
    # A watched job's end is written by the trigger, from a partition as from the table.
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO chrono_job_watch (job_id, watcher) VALUES (%s, 'test')",
                       [job.job_id])
    running = execution(job, TODAY, status="RUNNING")
    Execution.objects.filter(pk=running.pk).update(status="SUCCEEDED")
    assert ExecutionEnd.objects.filter(execution_id=running.pk, status="SUCCEEDED").exists()


def test_a_pass_creates_the_days_ahead_and_moves_their_rows_out_of_the_default_partition(job):
    later = TODAY + timedelta(days=30)
    waiting = execution(job, later + timedelta(days=1))
    assert partition_of(waiting.pk) == partitions.DEFAULT_PARTITION

    report = run_retention(config(execution_partitions_ahead_days=2), today=later)

    assert report.created == [later, later + timedelta(days=1), later + timedelta(days=2)]
    assert report.moved_from_default == 1
    assert partition_of(waiting.pk) == partitions.partition_name(later + timedelta(days=1))
    assert {later, later + timedelta(days=2)} <= partitions.existing_days()
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s",
                       [partitions.partition_name(later)])
        names = {row[0] for row in cursor.fetchall()}
    assert partitions.partition_name(later) + "_execution_job_active_idx" in names
    assert run_retention(config(execution_partitions_ahead_days=2), today=later).created == []


def test_an_expired_day_is_dropped_and_today_is_not_touched(job):
    old_day = TODAY - timedelta(days=10)
    partitions.create_day(old_day)
    old = [execution(job, old_day, hour=h) for h in (1, 12, 23)]
    audit_row(old[0].pk, shipped_at=timezone.now() - timedelta(minutes=5))
    current = execution(job, TODAY, status="RUNNING")

    report = run_retention(config(execution_retention_days=7))

    assert [o.day for o in report.dropped] == [old_day]
    assert report.failed == {}
    assert old_day not in partitions.existing_days()
    assert not Execution.objects.filter(pk__in=[e.pk for e in old]).exists()
    assert Execution.objects.get(pk=current.pk).status == "RUNNING"
    assert TODAY in partitions.existing_days()
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [partitions.partition_name(old_day)])
        assert cursor.fetchone() == (None,)  # dropped, not only detached


def test_a_dropped_day_reports_how_long_each_step_and_the_lock_took(job):
    """The detach, the checks on the detached table and the drop are what the parent's lock is
    held for; the checks before and the commit (the files' removal) are not."""
    old_day, kept_day = TODAY - timedelta(days=14), TODAY - timedelta(days=15)
    partitions.create_day(old_day)
    partitions.create_day(kept_day)
    execution(job, old_day)
    execution(job, kept_day, status="RUNNING")

    report = run_retention(config(execution_retention_days=7))

    (dropped,) = report.dropped
    assert list(dropped.timings_ms) == list(partitions.DROP_PHASES)
    assert all(took >= 0 for took in dropped.timings_ms.values())
    assert dropped.locked_ms == pytest.approx(
        sum(dropped.timings_ms[phase] for phase in ("detach", "locked_checks", "drop")))
    assert dropped.locked_ms < sum(dropped.timings_ms.values())
    (kept,) = report.kept
    assert list(kept.timings_ms) == ["checks"]  # kept before the lock was taken
    assert kept.locked_ms == 0
    line = next(line for line in report.lines()
                if line.startswith(f"drop partition {partitions.partition_name(old_day)}"))
    assert f"{dropped.locked_ms:.0f} ms of them under the table's lock" in line


def test_a_day_is_kept_while_an_audit_row_of_it_is_unshipped_or_an_execution_unfinished(job):
    unshipped_day, running_day = TODAY - timedelta(days=12), TODAY - timedelta(days=11)
    partitions.create_day(unshipped_day)
    partitions.create_day(running_day)
    finished = execution(job, unshipped_day)
    unshipped = audit_row(finished.pk, shipped_at=None)
    execution(job, running_day, status="RETRY_WAIT")

    report = run_retention(config(execution_retention_days=7))

    assert {o.day: o.kept_because for o in report.kept} == {
        unshipped_day: "audit rows not shipped", running_day: "executions not finished"}
    assert {unshipped_day, running_day} <= partitions.existing_days()  # attached again
    assert Execution.objects.filter(pk=finished.pk).exists()

    AuditEvent.objects.filter(pk=unshipped.pk).update(shipped_at=timezone.now())
    report = run_retention(config(execution_retention_days=7))
    assert [o.day for o in report.dropped] == [unshipped_day]
    assert running_day in partitions.existing_days()


def test_a_day_is_kept_while_a_workflow_end_of_it_is_not_applied(job):
    day = TODAY - timedelta(days=13)
    partitions.create_day(day)
    ended = execution(job, day)
    ExecutionEnd.objects.create(watcher="workflow", job_id=job.job_id, execution_id=ended.pk,
                                status="SUCCEEDED")
    report = run_retention(config(execution_retention_days=7))
    assert {o.day: o.kept_because for o in report.kept} == {day: "workflow ends not applied"}


def test_a_dry_run_reports_what_a_pass_would_do_and_changes_nothing(job, capsys):
    old_day = TODAY - timedelta(days=10)
    partitions.create_day(old_day)
    kept = execution(job, old_day)
    shipped = audit_row(kept.pk, shipped_at=timezone.now() - timedelta(days=3))

    report = run_retention(config(execution_retention_days=7), dry_run=True,
                           today=TODAY + timedelta(days=1))

    assert [o.day for o in report.dropped] == [old_day]
    assert report.created == [TODAY + timedelta(days=8)]
    assert report.audit_rows_deleted >= 1
    assert old_day in partitions.existing_days()
    assert TODAY + timedelta(days=8) not in partitions.existing_days()
    assert Execution.objects.filter(pk=kept.pk).exists()
    assert AuditEvent.objects.filter(pk=shipped.pk).exists()
    lines = "\n".join(report.lines())
    assert f"would drop partition {partitions.partition_name(old_day)}" in lines

    call_command("retention", "--dry-run")
    out = capsys.readouterr().out
    assert "would delete" in out and "shipped audit outbox rows" in out
    assert old_day in partitions.existing_days()


def test_expired_rows_of_the_default_partition_go_once_shipped_and_others_stay(job):
    gone_day = TODAY - timedelta(days=40)  # no partition: the row lands in the default one
    gone, waiting, running = (execution(job, gone_day), execution(job, gone_day),
                              execution(job, gone_day, status="RUNNING"))
    assert partition_of(gone.pk) == partitions.DEFAULT_PARTITION
    audit_row(waiting.pk, shipped_at=None)

    report = run_retention(config(execution_retention_days=7))

    assert report.default_rows_deleted == 1
    assert not Execution.objects.filter(pk=gone.pk).exists()
    assert Execution.objects.filter(pk__in=[waiting.pk, running.pk]).count() == 2


def test_shipped_audit_rows_go_after_the_keep_period_and_unshipped_ones_never():
    old_shipped = audit_row(uuid.uuid4(), shipped_at=timezone.now() - timedelta(hours=30))
    new_shipped = audit_row(uuid.uuid4(), shipped_at=timezone.now() - timedelta(hours=1))
    unshipped = audit_row(uuid.uuid4(), shipped_at=None)
    AuditEvent.objects.filter(pk=unshipped.pk).update(
        occurred_at=timezone.now() - timedelta(days=30))

    report = run_retention(config(audit_outbox_keep_hours=24))

    assert report.audit_rows_deleted >= 1
    remaining = set(AuditEvent.objects.values_list("pk", flat=True))
    assert old_shipped.pk not in remaining
    assert {new_shipped.pk, unshipped.pk} <= remaining


def test_a_second_pass_while_one_runs_skips_its_turn():
    from django.db import connections

    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(hashtextextended('chrono-retention', 0))")
        report = run_retention(get_config())
        assert not report.ran
        assert report.lines() == ["another retention pass is running: nothing done"]
    finally:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended('chrono-retention', 0))")
        other.close()
    assert run_retention(get_config()).ran


@pytest.mark.django_db(transaction=True)
def test_the_reaper_scans_recent_days_each_pass_and_every_day_after_a_retention_pass(
        tenant, queue, redis_client):
    job = api.schedule_once("tests.noop", tenant=tenant, queue=queue, delay=3600)
    expired_lease = ms_to_datetime(now_ms() - 60_000)
    recent, old = (
        Execution.objects.create(execution_id=uuid.uuid4(), job=job, tenant=tenant,
                                 scheduled_for=ms_to_datetime(now_ms() - age_ms),
                                 status="RUNNING", worker_id="gone@host", fencing_token=1,
                                 lease_expires_at=expired_lease, started_at=expired_lease)
        for age_ms in (60_000, 5 * 86_400_000))
    cfg = config(reaper_scan_window_days=2, retention_interval_ms=3_600_000)
    reaper = Reaper(config=cfg, publisher=Publisher(cfg.broker_url), store=timer_store())
    try:
        reaper._next_retention_ms = now_ms() + 3_600_000  # not this pass
        reaper.run_once()
        assert Execution.objects.get(pk=recent.pk).status != "RUNNING"
        assert Execution.objects.get(pk=old.pk).status == "RUNNING"  # outside the window

        reaper._next_retention_ms = 0
        reaper.run_once()
        assert Execution.objects.get(pk=old.pk).status != "RUNNING"
        assert reaper.counters.retention_passes == 1
        series = {family.name: family.samples[0].value
                  for family in ReaperCollector(reaper).collect() if family.samples}
        assert series["chrono_reaper_retention_passes"] == 1
        assert series["chrono_reaper_expired_partitions_kept"] == 0
        assert series["chrono_reaper_streams_failed"] == 0  # the suite's engine answered
    finally:
        reaper.publisher.close()
        reaper.inspector.close()


def test_the_checks_that_keep_a_day_probe_indexes_and_never_scan_the_day(job):
    """They run while the parent's exclusive lock is held: a scan of a day of 100 M rows there
    would stop the beat for minutes."""
    day = TODAY - timedelta(days=20)
    partitions.create_day(day)
    start, _ = partitions.day_bounds(day)
    table = partitions.partition_name(day)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO chrono_execution (execution_id, job_id, tenant_id, attempt, "
            "scheduled_for, status, error, logs_url, fencing_token) SELECT gen_random_uuid(), "
            "%s, %s, 1, %s + n * interval '1 second', 'SUCCEEDED', '', '', 1 "
            "FROM generate_series(1, 20000) AS n", [job.job_id, job.tenant_id, start])
        cursor.execute(f"ANALYZE {table}")
        cursor.execute("ANALYZE search_auditevent")
        cursor.execute("ANALYZE chrono_execution_end")
        for _, check in partitions._KEEP_CHECKS:
            cursor.execute("EXPLAIN " + check.format(executions=table))
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert f"Seq Scan on {table}" not in plan, plan
    assert partitions.keep_reason(table) is None


@pytest.mark.django_db(transaction=True)
def test_a_day_whose_lock_is_not_granted_in_time_is_left_for_the_next_pass(tenant, capsys):
    """A long transaction reading the table holds its lock: the pass waits at most
    LOCK_TIMEOUT_MS for it (the writers queued behind it wait no longer), leaves the day
    attached, says so and exits 1; once the reader is gone, the next pass drops it."""
    from django.core.management.base import CommandError
    from django.db import connections

    day = TODAY - timedelta(days=25)
    partitions.create_day(day)
    reader = connections.create_connection("default")
    try:
        with reader.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT count(*) FROM chrono_execution")
        started = now_ms()
        with pytest.raises(CommandError, match="1 partitions could not be changed"):
            call_command("retention")
        waited_ms = now_ms() - started
        assert partitions.LOCK_TIMEOUT_MS <= waited_ms < partitions.LOCK_TIMEOUT_MS + 10_000
        assert "lock timeout" in capsys.readouterr().out
        assert day in partitions.existing_days()
        with reader.cursor() as cursor:
            cursor.execute("ROLLBACK")
        report = run_retention(get_config())
        assert [o.day for o in report.dropped] == [day]
    finally:
        reader.close()
        if day in partitions.existing_days():
            partitions.drop_day(day)
