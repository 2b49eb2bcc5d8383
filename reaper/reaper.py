"""The reaper: finds what dead workers left behind and sends it again.

Every ``reaper_interval_ms``:

1. workers whose heartbeats stopped (``worker_dead_after_missed_heartbeats`` intervals) are marked
   unhealthy;
2. running executions whose lease expired, or whose worker is unhealthy, are declared lost: the
   attempt ends through the job's retry policy (another attempt after a backoff, or dead-lettered
   after its last one: a poison job that kills every worker ends there too), with the fencing
   token bumped so the lost run's late result is refused;
3. attempts waiting to be retried whose retry time passed long ago (the process that should have
   sent them died) are sent again;
4. every ``undelivered_check_interval_ms``, executions waiting longer than
   ``undelivered_flag_after_ms`` on a queue without consumers are flagged
   (:mod:`reaper.undelivered`);
5. every ``job_counts.FOLD_INTERVAL_MS``, the jobs-by-status counts the triggers appended are
   folded (:mod:`scheduler.job_counts`);
6. every ``retention_interval_ms`` (and at its start), the retention pass
   (:mod:`scheduler.retention`: the executions' partitions ahead, expired days dropped once
   shipped, shipped audit rows deleted, then the rows of things that ended (jobs, workflow
   runs, workers gone, old dashboard rollups, expired idempotency records): within a minute
   again while some of those are left), followed by one scan of steps 2 and 3 over every
   partition.

The scans of steps 2 and 3 read only executions scheduled within the last
``reaper_scan_window_days`` (the partitions of those days: ``scheduled_for`` is the partition
key), so a pass touches a few small partitions however many days the table keeps; an execution
running or waiting for its retry since an older occurrence is found by the scan over every
partition that follows each retention pass, at most ``retention_interval_ms`` late.

Every change is a conditional update and the rows are taken with ``FOR UPDATE SKIP LOCKED``, so
several reapers can run at once; each attempt is sent by the one that changed it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import redis
from django.db import DatabaseError, close_old_connections, connection, transaction

from chronocore.config import ChronoConfig
from chronocore.probe import Progress
from reaper.undelivered import check_undelivered
from scheduler import job_counts
from scheduler.attempts import ATTEMPT_COLUMNS, AttemptRow, Outcome, end_attempt, send_attempt
from scheduler.cancellation import settle_cancelled_lost
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.dispatch import DispatchError, Publisher
from scheduler.errors import PartitioningMissing
from scheduler.lifecycle import key_range
from scheduler.queue_stats import BrokerUnavailable, QueueInspector
from scheduler.retention import RetentionReport, run_retention
from scheduler.retry import effective_policy
from scheduler.timers import TimerStore
from search import audit

BATCH = 500
MAX_BACKOFF_S = 10.0
DAY_MS = 86_400_000
# A retention pass that failed is tried again this soon, not a whole interval later.
RETENTION_RETRY_MS = 60_000

log = logging.getLogger("chrono.reaper")


@dataclass
class ReaperCounters:
    workers_down: int = 0
    lost: int = 0
    retried: int = 0
    dead_lettered: int = 0
    resent: int = 0
    cancelled: int = 0
    failed_iterations: int = 0
    retention_passes: int = 0
    partitions_dropped: int = 0
    # Expired days the last retention pass kept (a gauge).
    partitions_kept: int = 0
    # Backing indices of the audit and execution-log streams the passes deleted (on an engine
    # without a lifecycle of its own), and the streams the last pass could not change (a gauge).
    stream_indices_deleted: int = 0
    streams_failed: int = 0
    # Rows of things that ended the passes deleted, by what they are ("ended jobs", ...).
    retention_deleted: Counter[str] = field(default_factory=Counter)
    # Per queue: executions flagged as undelivered, and flags taken off (a consumer came).
    undelivered_flagged: Counter[str] = field(default_factory=Counter)
    undelivered_cleared: Counter[str] = field(default_factory=Counter)


class Reaper:
    """``run()`` blocks until ``stop()``."""

    def __init__(self, *, config: ChronoConfig, publisher: Publisher, store: TimerStore,
                 inspector: QueueInspector | None = None) -> None:
        self.config = config
        self.publisher = publisher
        self.store = store
        self.inspector = inspector or QueueInspector(config.broker_url)
        self.counters = ReaperCounters()
        # Marked after every pass that went through: the probe's /health.
        self.progress = Progress("pass", stale_after_ms=stale_after_ms(config))
        self._next_undelivered_check_ms = 0
        self._next_fold_ms = 0
        self._next_retention_ms = 0
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        backoff_s = 0.5
        log.info("reaper started")
        while not self._stopping.is_set():
            try:
                self.run_once()
                self.progress.mark()
                backoff_s = 0.5
                self._stopping.wait(self.config.reaper_interval_ms / 1000)
            except (DatabaseError, redis.RedisError, DispatchError, BrokerUnavailable,
                    OSError) as exc:
                self.counters.failed_iterations += 1
                log.error("reaper iteration failed, retrying in %.1f s: %r", backoff_s, exc)
                close_old_connections()
                self._stopping.wait(backoff_s)
                backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)
        self.publisher.close()
        self.inspector.close()

    def run_once(self) -> None:
        self.mark_dead_workers()
        since = self._scan_since()
        while self.reap_lost(since=since) == BATCH:
            pass
        self.resend_overdue_retries(since=since)
        if now_ms() >= self._next_undelivered_check_ms:
            self.check_undelivered()
        if now_ms() >= self._next_fold_ms:
            self._next_fold_ms = now_ms() + job_counts.FOLD_INTERVAL_MS
            job_counts.fold()
        if self.config.retention_interval_ms and now_ms() >= self._next_retention_ms:
            self.retention_pass()

    def _scan_since(self) -> datetime:
        """The oldest ``scheduled_for`` the every-pass scans read."""
        return ms_to_datetime(now_ms() - self.config.reaper_scan_window_days * DAY_MS)

    def retention_pass(self) -> RetentionReport | None:
        """The retention pass, then the scans of lost and overdue executions over every
        partition (what the bounded scans of each pass leave out)."""
        self._next_retention_ms = now_ms() + min(RETENTION_RETRY_MS,
                                                 self.config.retention_interval_ms)
        try:
            report = run_retention(self.config)
        except PartitioningMissing as exc:  # an unmigrated database: say so, reap on
            log.error("retention pass skipped: %s", exc)
            report = None
        while self.reap_lost(since=None) == BATCH:
            pass
        self.resend_overdue_retries(since=None)
        # Ended rows left for want of time are deleted at a pass within the minute.
        self._next_retention_ms = now_ms() + (
            min(RETENTION_RETRY_MS, self.config.retention_interval_ms)
            if report is not None and report.more_left else self.config.retention_interval_ms)
        if report is not None:
            self.counters.retention_passes += 1
            self.counters.partitions_dropped += len(report.dropped)
            self.counters.partitions_kept = len(report.kept) + len(report.failed)
            if not report.dry_run:
                self.counters.stream_indices_deleted += sum(
                    len(stream.deleted) for stream in report.streams)
                self.counters.retention_deleted.update(report.deleted)
            self.counters.streams_failed = len(report.streams_failed)
        return report

    def check_undelivered(self) -> None:
        """Flag the executions that wait too long on queues without consumers."""
        now = now_ms()
        self._next_undelivered_check_ms = now + self.config.undelivered_check_interval_ms
        report = check_undelivered(inspector=self.inspector, now_ms=now,
                                   flag_after_ms=self.config.undelivered_flag_after_ms)
        self.counters.undelivered_flagged.update(report.flagged)
        self.counters.undelivered_cleared.update(report.cleared)

    def mark_dead_workers(self) -> list[str]:
        silence_ms = (self.config.worker_heartbeat_interval_ms
                      * self.config.worker_dead_after_missed_heartbeats)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE chrono_worker SET is_healthy = false WHERE is_healthy "
                "AND last_heartbeat_at < %s RETURNING worker_id",
                [ms_to_datetime(now_ms() - silence_ms)],
            )
            dead = [row[0] for row in cursor.fetchall()]
        for worker_id in dead:
            log.warning("worker %s stopped heartbeating: marked down", worker_id)
        self.counters.workers_down += len(dead)
        return dead

    def reap_lost(self, *, since: datetime | None = None) -> int:
        """Declare lost the running executions (scheduled since ``since``; None: all) whose
        lease expired or whose worker is down, then send the attempts that follow. Returns how
        many were examined."""
        outcomes: list[tuple[AttemptRow, Outcome]] = []
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM chrono_execution e "
                # nosec B608 # ATTEMPT_COLUMNS is a module constant; every value is a parameter
                "JOIN chrono_job j ON j.job_id = e.job_id "
                "LEFT JOIN chrono_worker w ON w.worker_id = e.worker_id "
                "WHERE e.status = 'RUNNING' AND (e.lease_expires_at < %s OR w.is_healthy = false) "
                "AND (%s::timestamptz IS NULL OR e.scheduled_for >= %s) "
                "ORDER BY e.lease_expires_at LIMIT %s FOR UPDATE OF e SKIP LOCKED",
                [ms_to_datetime(now_ms()), since, since, BATCH],
            )
            rows = [AttemptRow.from_db(row) for row in cursor.fetchall()]
            cancelled = [(row.execution_id, row.scheduled_for) for row in rows
                         if row.cancel_requested]
            self.counters.cancelled += settle_cancelled_lost(cancelled)
            for row in rows:
                if row.cancel_requested:
                    continue
                outcome = end_attempt(
                    row.execution_id,
                    scheduled_for=row.scheduled_for,
                    fencing_token=row.fencing_token,
                    from_status="RUNNING",
                    attempt=row.attempt,
                    policy=effective_policy(row.retry_policy, row.max_retries),
                    error=f"lost: attempt {row.attempt} on worker {row.worker_id} stopped "
                          "renewing its lease",
                    error_type="chrono.ExecutionLost",
                    reason_prefix=f"lost on {row.worker_id}; ",
                    audit_action=audit.EXECUTION_LOST,
                    actor="reaper",
                )
                if outcome is not None:
                    outcomes.append((row, outcome))
        for row, outcome in outcomes:
            self._count(outcome)
            log.warning("execution %s attempt %d lost on %s: %s", row.execution_id, row.attempt,
                        row.worker_id, outcome.status)
            if outcome.status == "RETRY_WAIT":
                send_attempt(row.message(outcome.attempt), outcome, publisher=self.publisher,
                             store=self.store)
        return len(rows)

    def _count(self, outcome: Outcome) -> None:
        self.counters.lost += 1
        if outcome.status == "RETRY_WAIT":
            self.counters.retried += 1
        else:
            self.counters.dead_lettered += 1

    def resend_overdue_retries(self, *, since: datetime | None = None) -> int:
        """Send again attempts (of executions scheduled since ``since``; None: all) that should
        have started ``retry_overdue_grace_ms`` ago."""
        now = now_ms()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "WITH due AS (SELECT execution_id, scheduled_for FROM chrono_execution "
                "WHERE status = 'RETRY_WAIT' AND retry_at < %s "
                "AND (%s::timestamptz IS NULL OR scheduled_for >= %s) "
                "ORDER BY retry_at LIMIT %s FOR UPDATE SKIP LOCKED) "
                "UPDATE chrono_execution e SET retry_at = %s FROM due "
                "WHERE e.execution_id = due.execution_id "
                "AND e.scheduled_for = due.scheduled_for "
                "RETURNING e.execution_id, e.scheduled_for",
                [ms_to_datetime(now - self.config.retry_overdue_grace_ms), since, since, BATCH,
                 ms_to_datetime(now)],
            )
            keys = cursor.fetchall()
            if not keys:
                return 0
            times = [scheduled_for for _, scheduled_for in keys]
            cursor.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM chrono_execution e "
                # nosec B608 # ATTEMPT_COLUMNS is a module constant; every value is a parameter
                "JOIN chrono_job j ON j.job_id = e.job_id "
                "JOIN unnest(%s::uuid[], %s::timestamptz[]) AS k(execution_id, scheduled_for) "
                "ON k.execution_id = e.execution_id AND k.scheduled_for = e.scheduled_for "
                "WHERE e.scheduled_for BETWEEN %s AND %s",
                [[execution_id for execution_id, _ in keys], times, *key_range(times)],
            )
            rows = [AttemptRow.from_db(row) for row in cursor.fetchall()]
        self.publisher.publish_batch([row.message(row.attempt) for row in rows])
        self.counters.resent += len(rows)
        log.warning("re-sent %d attempts whose sender never did", len(rows))
        return len(rows)


def stale_after_ms(config: ChronoConfig) -> int:
    """How long a reaper may go without a pass before its /health says 503: five intervals,
    and at least the longest back-off after failures (a failed pass or two is not yet ill)."""
    return max(5 * config.reaper_interval_ms, int(MAX_BACKOFF_S * 1000) + config.reaper_interval_ms)
