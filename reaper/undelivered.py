"""Executions nobody consumes: flagged, so that a job on a queue without workers is not silent.

An execution stays ``DISPATCHED`` while its message waits in RabbitMQ. When that lasts longer
than ``undelivered_flag_after_ms`` and the queue has no consumer, the reaper flags it: its reason
becomes ``no consumer on queue `billing` for 60 s`` (in front of any reason it had), which the
job's owner reads on the execution in the REST API and the admin, and the reaper's
``chrono_reaper_undelivered_flagged_total`` and the web's ``chrono_undelivered_executions``
count it. Nothing else changes: the message stays in its queue, and when a worker consumes it
the run starts as usual and its start takes the flag off
(:func:`scheduler.lifecycle.unflagged_reason_sql`). A queue that has a consumer again has the
flags of its waiting executions taken off at the next check.

The check costs one query and one round trip per queue, every
``undelivered_check_interval_ms``:

1. the ``DISPATCHED`` executions dispatched before the threshold, counted by their job's queue.
   ``execution_job_active_idx`` (partial, on the executions not yet finished) serves it: no new
   index, which every execution would pay for on its way to ``DISPATCHED``; what it reads is the
   executions in flight, and of those only the ``DISPATCHED`` ones reach the heap;
2. a passive ``queue.declare`` of each queue found, for its consumer count
   (:mod:`scheduler.queue_stats`);
3. only for a queue without consumers (or absent from RabbitMQ): the flag, in batches locked
   ``SKIP LOCKED`` (a worker starting one of them is not waited for) and conditional on the
   status and on the flag's absence, so that several reapers flag each execution once. The
   update joins the rows it locked on ``(execution_id, scheduled_for)``, the partition key
   with the id, so each row is looked up in its own day's partition.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import connection, transaction

from scheduler.clock import ms_to_datetime
from scheduler.lifecycle import UNDELIVERED_REASON_PREFIX, unflagged_reason_sql
from scheduler.queue_stats import QueueInspector, QueueStats

FLAG_BATCH = 1_000
REASON_LIMIT = 300

log = logging.getLogger("chrono.reaper")

# Flagged executions are counted whatever their age: a reader (the web's /metrics) may have a
# threshold of its own.
_WAITING_SQL = (
    "SELECT j.queue, count(*) FILTER (WHERE e.dispatched_at < %(before)s), "
    "count(*) FILTER (WHERE starts_with(e.reason, %(prefix)s)), "
    "count(*) FILTER (WHERE e.dispatched_at < %(before)s "
    "AND NOT starts_with(e.reason, %(prefix)s)) "
    "FROM chrono_execution e JOIN chrono_job j ON j.job_id = e.job_id "
    "WHERE e.status = 'DISPATCHED' "
    "AND (e.dispatched_at < %(before)s OR starts_with(e.reason, %(prefix)s)) GROUP BY j.queue"
)
_FLAG_SQL = (
    "WITH f AS (SELECT e.execution_id, e.scheduled_for FROM chrono_execution e "
    "  JOIN chrono_job j ON j.job_id = e.job_id "
    "  WHERE e.status = 'DISPATCHED' AND e.dispatched_at < %(before)s AND j.queue = %(queue)s "
    "  AND NOT starts_with(e.reason, %(prefix)s) "
    "  LIMIT %(limit)s FOR UPDATE OF e SKIP LOCKED) "
    "UPDATE chrono_execution e SET reason = left(%(flag)s || CASE WHEN e.reason = '' THEN '' "
    "  ELSE '; ' || e.reason END, %(reason_limit)s) FROM f "
    "WHERE e.execution_id = f.execution_id AND e.scheduled_for = f.scheduled_for "
    "AND e.status = 'DISPATCHED' "
    "AND NOT starts_with(e.reason, %(prefix)s)"
)
_CLEAR_SQL = (
    "WITH f AS (SELECT e.execution_id, e.scheduled_for FROM chrono_execution e "
    # nosec B608 # unflagged_reason_sql() of a column name; values are parameters
    "  JOIN chrono_job j ON j.job_id = e.job_id "
    "  WHERE e.status = 'DISPATCHED' AND j.queue = %(queue)s AND starts_with(e.reason, %(prefix)s) "
    "  LIMIT %(limit)s FOR UPDATE OF e SKIP LOCKED) "
    f"UPDATE chrono_execution e SET reason = {unflagged_reason_sql('e.reason')} FROM f "
    "WHERE e.execution_id = f.execution_id AND e.scheduled_for = f.scheduled_for "
    "AND starts_with(e.reason, %(prefix)s)"
)


def undelivered_reason(queue: str, flag_after_ms: int) -> str:
    """The flag: ``no consumer on queue `billing` for 60 s``."""
    return f"{UNDELIVERED_REASON_PREFIX}`{queue}` for {flag_after_ms / 1000:g} s"


@dataclass(frozen=True, slots=True)
class WaitingQueue:
    """The ``DISPATCHED`` executions of one queue: how many were dispatched before the
    threshold, how many are flagged, and how many of the former are not."""

    queue: str
    waiting: int
    flagged: int
    unflagged: int


@dataclass
class UndeliveredReport:
    """What one check found and did, per queue."""

    waiting: dict[str, WaitingQueue] = field(default_factory=dict)
    broker: dict[str, QueueStats] = field(default_factory=dict)
    flagged: dict[str, int] = field(default_factory=dict)
    cleared: dict[str, int] = field(default_factory=dict)

    def undelivered(self) -> dict[str, int]:
        """Executions flagged now, per queue (after this check's changes)."""
        return {queue: w.flagged + self.flagged.get(queue, 0) - self.cleared.get(queue, 0)
                for queue, w in self.waiting.items()}


def waiting_queues(*, before_ms: int) -> dict[str, WaitingQueue]:
    """Queues with executions ``DISPATCHED`` before ``before_ms`` or flagged."""
    with connection.cursor() as cursor:
        cursor.execute(_WAITING_SQL, {"before": ms_to_datetime(before_ms),
                                      "prefix": UNDELIVERED_REASON_PREFIX})
        return {queue: WaitingQueue(queue, *map(int, counts))
                for queue, *counts in cursor.fetchall()}


def flag(queue: str, *, before_ms: int, flag_after_ms: int) -> int:
    """Flag the executions of ``queue`` dispatched before ``before_ms``; how many."""
    return _in_batches(_FLAG_SQL, {
        "before": ms_to_datetime(before_ms), "queue": queue,
        "prefix": UNDELIVERED_REASON_PREFIX, "flag": undelivered_reason(queue, flag_after_ms),
        "reason_limit": REASON_LIMIT,
    })


def clear(queue: str) -> int:
    """Take the flag off the waiting executions of ``queue`` (it has a consumer); how many."""
    return _in_batches(_CLEAR_SQL, {"queue": queue, "prefix": UNDELIVERED_REASON_PREFIX})


def _in_batches(sql: str, params: dict[str, object]) -> int:
    total = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, {**params, "limit": FLAG_BATCH})
            changed = cursor.rowcount
        total += changed
        if changed < FLAG_BATCH:
            return total


def check_undelivered(*, inspector: QueueInspector, now_ms: int,
                      flag_after_ms: int) -> UndeliveredReport:
    """One check: flag what waits too long on queues without consumers, unflag what waits on
    queues that have one again. Raises :class:`scheduler.queue_stats.BrokerUnavailable` (then
    nothing changed) and Django's ``DatabaseError``."""
    before_ms = now_ms - flag_after_ms
    report = UndeliveredReport(waiting=waiting_queues(before_ms=before_ms))
    if not report.waiting:
        return report
    report.broker = inspector.stats(report.waiting)
    for queue, waiting in report.waiting.items():
        stats = report.broker[queue]
        if stats.consumers == 0 and waiting.unflagged:
            flagged = flag(queue, before_ms=before_ms, flag_after_ms=flag_after_ms)
            if flagged:
                report.flagged[queue] = flagged
                log.warning("%d executions waited over %g s on queue %r, which %s: flagged",
                            flagged, flag_after_ms / 1000, queue,
                            "has no consumer" if stats.exists else "does not exist in RabbitMQ")
        elif stats.consumers > 0 and waiting.flagged:
            cleared = clear(queue)
            if cleared:
                report.cleared[queue] = cleared
                log.info("queue %r has %d consumers again: %d executions unflagged", queue,
                         stats.consumers, cleared)
    return report
