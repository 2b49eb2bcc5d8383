"""The retention pass: what keeps PostgreSQL's executions and audit outbox bounded.

One pass (``chrono retention``, and the reaper every ``retention_interval_ms``):

1. creates the daily partitions of ``chrono_execution`` from today to
   ``execution_partitions_ahead_days`` ahead (rows of those days waiting in the default partition
   are moved in);
2. detaches and drops each day older than ``execution_retention_days``, unless one of its
   executions is not finished, one of their audit rows is not shipped to the search engine, or
   a workflow end of one is not applied (the day is kept and tried again at the next pass; the
   report says why);
3. deletes the default partition's expired rows on the same conditions, row by row;
4. deletes the audit outbox rows shipped more than ``audit_outbox_keep_hours`` ago (the
   indexer does too);
5. deletes rows of things that ended: the Idempotency-Key records older than
   ``idempotency_ttl_s``, the dashboard's rollups older than ``rollup_retention_hours``, then
   what ended before the executions' cutoff and has nothing left in the days kept: workflow
   runs that finished (:mod:`workflows.retention`) and workers gone (:mod:`reaper.retention`),
   receivers of :data:`retention_pass` (this layer imports neither app), and last the jobs
   that ended (:mod:`scheduler.ended_jobs`); for at most :data:`DELETE_BUDGET_S` a pass, the
   rest at the next (the reaper comes back within a minute when some was left);
6. on a search engine that applies no lifecycle policy (OpenSearch without its ISM plugin),
   applies the audit and execution-log streams' policy itself: rolls them over daily and deletes
   their indices rolled over longer ago than their retention (:mod:`search.stream_lifecycle`).
   An engine that cannot be reached fails this step alone; the next pass tries again.

Execution log lines never pass through PostgreSQL (they go from the worker's spool to the
engine), so dropping an execution's row loses none of them; their own retention is the data
stream's lifecycle policy (:mod:`search.log_stream`), or step 5 where the engine runs none.

One pass at a time: a pass holds a PostgreSQL advisory lock, and a second one (another reaper)
skips its turn. ``dry_run`` changes nothing and reports what a pass would do.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connection
from django.dispatch import Signal
from django.utils import timezone

from chronocore.expiry import ExpiredRows
from scheduler import ended_jobs, partitions, rollups
from scheduler.partitions import DropOutcome
from search import outbox_retention, stream_lifecycle
from search.stream_lifecycle import StreamOutcome

if TYPE_CHECKING:
    from chronocore.config import ChronoConfig

log = logging.getLogger("chrono.retention")

_LOCK_KEY = "chrono-retention"
# The deletions of ended rows (step 5) stop after this long and go on at the next pass, so a
# backlog of them (a first pass over a year of jobs) never holds up the reaper's other work.
DELETE_BUDGET_S = 10.0
ENDED_JOBS = "ended jobs"
ROLLUP_ROWS = "dashboard rollup rows"
IDEMPOTENCY_RECORDS = "expired idempotency records"
# Idempotency-Key records past CHRONO_IDEMPOTENCY_TTL_S: the API treats them as absent
# (chronoadmin.api.idempotency; `chrono purge-idempotency-keys` deletes them by hand).
EXPIRED_KEYS = ExpiredRows.older_than("chrono_idempotency_record", "created_at", batch=10_000)

# Sent once a pass, before the ended jobs are deleted, with ``before`` (the cutoff), ``dry_run``
# and ``should_stop`` (the deletions' budget is spent); a receiver deletes (or, on a dry run,
# counts) what its app keeps of things that ended before the cutoff and returns a
# :class:`Deleted`.
retention_pass = Signal()


@dataclass(frozen=True)
class Deleted:
    """What one deletion of ended rows did: ``count`` of ``what``; ``more_left`` when it
    stopped for the budget with some left."""

    what: str
    count: int
    more_left: bool = False


@dataclass
class RetentionReport:
    """What one pass did (or, ``dry_run``, would do)."""

    dry_run: bool
    today: date
    ran: bool = True
    created: list[date] = field(default_factory=list)
    moved_from_default: int = 0
    dropped: list[DropOutcome] = field(default_factory=list)
    kept: list[DropOutcome] = field(default_factory=list)
    failed: dict[date, str] = field(default_factory=dict)
    default_rows_deleted: int = 0
    audit_rows_deleted: int = 0
    # Ended rows deleted (counted, on a dry run), by what they are: "ended jobs", and what
    # the receivers of retention_pass returned.
    deleted: dict[str, int] = field(default_factory=dict)
    # Some were left for the next pass (the budget spent).
    more_left: bool = False
    streams: list[StreamOutcome] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report for a person, one line per change (``would`` on a dry run)."""
        if not self.ran:
            return ["another retention pass is running: nothing done"]
        verb = "would " if self.dry_run else ""
        out = [f"{verb}create partition {partitions.partition_name(day)}"
               for day in self.created]
        if self.moved_from_default:
            out.append(f"moved {self.moved_from_default} rows from the default partition")
        out += [f"{verb}drop partition {partitions.partition_name(o.day)} "
                f"(~{max(o.estimated_rows, 0)} rows{_took(o)})" for o in self.dropped]
        out += [f"keep partition {partitions.partition_name(o.day)}: {o.kept_because}"
                for o in self.kept]
        out += [f"failed on partition {partitions.partition_name(day)}: {error}"
                for day, error in self.failed.items()]
        out.append(f"{verb}delete {self.default_rows_deleted} expired rows of the default "
                   "partition")
        out.append(f"{verb}delete {self.audit_rows_deleted} shipped audit outbox rows")
        out += [f"{verb}delete {count} {what}" for what, count in self.deleted.items()]
        if self.more_left:
            out.append("more ended rows are left for the next pass")
        for stream in self.streams:
            out += stream.lines(dry_run=self.dry_run)
        return out

    @property
    def streams_failed(self) -> list[StreamOutcome]:
        return [stream for stream in self.streams if stream.error is not None]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["today"] = self.today.isoformat()
        data["created"] = [partitions.partition_name(day) for day in self.created]
        data["dropped"] = [partitions.partition_name(o.day) for o in self.dropped]
        data["kept"] = {partitions.partition_name(o.day): o.kept_because for o in self.kept}
        data["failed"] = {partitions.partition_name(d): e for d, e in self.failed.items()}
        return data


def _took(outcome: DropOutcome) -> str:
    """``, 672 ms, 9 ms of them under the table's lock`` for a day dropped (the rest: its checks
    before the lock, and its files removed after)."""
    if not outcome.dropped:
        return ""
    total = sum(outcome.timings_ms.values())
    return f", {total:.0f} ms, {outcome.locked_ms:.0f} ms of them under the table's lock"


def run_retention(config: ChronoConfig, *, dry_run: bool = False,
                  today: date | None = None, streams_at_ms: int | None = None
                  ) -> RetentionReport:
    """One retention pass (see the module's docstring). ``today`` (a UTC day) and
    ``streams_at_ms`` (the data streams' clock) are for tests. Raises
    :class:`scheduler.errors.PartitioningMissing` before migration 0015."""
    report = RetentionReport(dry_run=dry_run, today=today or partitions.today_utc())
    if not _try_lock():
        report.ran = False
        return report
    try:
        _partitions(config, report)
        cutoff, _ = partitions.day_bounds(report.today
                                          - timedelta(days=config.execution_retention_days))
        report.default_rows_deleted = partitions.delete_expired_default_rows(
            cutoff, dry_run=dry_run)
        shipped_before = timezone.now() - timedelta(hours=config.audit_outbox_keep_hours)
        report.audit_rows_deleted = (
            outbox_retention.count_shipped(shipped_before) if dry_run
            else outbox_retention.delete_shipped(shipped_before))
        _ended(report, cutoff, config)
        report.streams = stream_lifecycle.run(config, dry_run=dry_run, at_ms=streams_at_ms)
    finally:
        _unlock()
    for line in report.lines():
        log.info("retention: %s", line)
    for stream in report.streams_failed:
        log.warning("retention: data stream %s not changed, tried again at the next pass: %s",
                    stream.stream, stream.error)
    return report


def _ended(report: RetentionReport, before: datetime, config: ChronoConfig) -> None:
    """Step 5: what ended before ``before`` (the rollups and idempotency records: before
    their own hours), within :data:`DELETE_BUDGET_S`."""
    deadline = time.monotonic() + DELETE_BUDGET_S

    def spent() -> bool:
        return time.monotonic() >= deadline

    def delete(what: str, rows: ExpiredRows, cutoff: datetime) -> Deleted:
        return Deleted(what, *rows.run(cutoff, dry_run=report.dry_run, should_stop=spent))

    # The kinds that stay small first, the jobs (the most rows) last, so that a backlog of
    # jobs never keeps the others from their turn.
    now = timezone.now()
    outcomes = [
        delete(IDEMPOTENCY_RECORDS, EXPIRED_KEYS,
               now - timedelta(seconds=config.idempotency_ttl_s)),
        delete(ROLLUP_ROWS, rollups.EXPIRED, now - timedelta(hours=config.rollup_retention_hours)),
        *(outcome for _, outcome in retention_pass.send(
            sender=RetentionReport, before=before, dry_run=report.dry_run, should_stop=spent)),
        delete(ENDED_JOBS, ended_jobs.EXPIRED, before),
    ]
    for outcome in outcomes:
        report.deleted[outcome.what] = report.deleted.get(outcome.what, 0) + outcome.count
        report.more_left |= outcome.more_left


def _partitions(config: ChronoConfig, report: RetentionReport) -> None:
    existing = partitions.existing_days()
    report.created = partitions.days_to_create(
        existing, today=report.today, ahead_days=config.execution_partitions_ahead_days)
    if not report.dry_run:
        for day in list(report.created):
            try:
                report.moved_from_default += partitions.create_day(day)
            except DatabaseError as exc:  # a lock not granted in time: the next pass
                report.created.remove(day)
                report.failed[day] = str(exc).strip()
    expired = partitions.expired_days(existing, today=report.today,
                                      retention_days=config.execution_retention_days)
    for day in expired:
        try:
            outcome = partitions.drop_day(day, dry_run=report.dry_run)
        except DatabaseError as exc:
            report.failed[day] = str(exc).strip()
            continue
        if outcome.kept_because is None:
            report.dropped.append(outcome)
        else:
            report.kept.append(outcome)
    for day, error in report.failed.items():
        log.warning("retention: partition %s not changed, tried again at the next pass: %s",
                    partitions.partition_name(day), error)


def _try_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def _unlock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [_LOCK_KEY])
