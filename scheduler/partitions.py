"""The daily partitions of ``chrono_execution``: their names and days, the catalog's list of them,
and the statements that add a day ahead and take an expired one away.

The table is partitioned by range of ``scheduled_for``, one partition per UTC day named
``chrono_execution_pYYYYMMDD``, and a default partition (``chrono_execution_default``) holding
what no day partition covers, so an insert never fails for want of one (migration 0015;
docs/architecture.md, "Executions partitioned by day"). The decisions (which days to add, which
may go) are pure functions of the days that exist and today; :mod:`scheduler.retention` runs them.

Locks. A day is added as a table of its own, then attached (``ATTACH PARTITION`` takes only a
SHARE UPDATE EXCLUSIVE lock on the parent, so the beat and the workers go on writing; the default
partition is locked while it is checked for rows of that day, which are moved first). A day is
taken away by ``DETACH PARTITION``, which holds the parent's ACCESS EXCLUSIVE lock for the
milliseconds of the detach, the checks on the detached table and the ``DROP`` (``DETACH …
CONCURRENTLY`` is refused while a default partition exists); the table's files are removed at
the commit, after PostgreSQL released the locks (the one step whose time grows with the day's
size: the file system frees every block; :func:`drop_day` times each step). Both wait at most
:data:`LOCK_TIMEOUT_MS` for their locks, so a long query never has every writer queue behind
the retention pass: the pass fails that day and tries again at its next run.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from scheduler.errors import PartitioningMissing
from scheduler.models import FINISHED_EXECUTION_STATUSES
from search.outbox_retention import UNSHIPPED_OF_EXECUTIONS

PARENT = "chrono_execution"
DEFAULT_PARTITION = "chrono_execution_default"
DAY_PREFIX = "chrono_execution_p"
LOCK_TIMEOUT_MS = 2_000
_DAY_NAME = re.compile(r"chrono_execution_p(\d{8})")
_LIKE = "INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS"
_FINISHED = ", ".join(f"'{status}'" for status in FINISHED_EXECUTION_STATUSES)
# Why a day is kept although it expired: the first check that finds something, by name. Each
# is an index probe, never a scan of the day: the unfinished executions are those of the partial
# indexes execution_job_active_idx (SCHEDULED, DISPATCHED, RUNNING) and execution_retry_wait_idx
# (RETRY_WAIT; LOST is never written any more), the unshipped audit rows those of
# auditevent_unshipped_idx, and the workflow ends are a small table the engine empties. Each
# unshipped audit row and each workflow end costs one probe of the day's primary key, so those
# two grow with the outbox's backlog (~7 µs a row: 0.7 s for 100,000 unshipped rows against a
# day of 10 M), never with the day.
_KEEP_CHECKS: tuple[tuple[str, str], ...] = (
    ("executions not finished",
     "SELECT EXISTS (SELECT 1 FROM {executions} WHERE status IN "
     "('SCHEDULED', 'DISPATCHED', 'RUNNING')) "
     "OR EXISTS (SELECT 1 FROM {executions} WHERE status = 'RETRY_WAIT')"),
    ("audit rows not shipped", UNSHIPPED_OF_EXECUTIONS),
    ("workflow ends not applied",
     "SELECT EXISTS (SELECT 1 FROM chrono_execution_end x JOIN {executions} e "  # nosec B608 # constants
     "ON e.execution_id = x.execution_id)"),
)


def partition_name(day: date) -> str:
    """The name of ``day``'s partition."""
    return f"{DAY_PREFIX}{day:%Y%m%d}"


def day_of(name: str) -> date | None:
    """The day a partition named ``name`` holds; None for the default partition or any other
    table."""
    match = _DAY_NAME.fullmatch(name)
    return datetime.strptime(match.group(1), "%Y%m%d").date() if match else None


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """``[start, end)`` of the UTC day ``day``."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def days_to_create(existing: set[date], *, today: date, ahead_days: int) -> list[date]:
    """The days from today to ``ahead_days`` after it that have no partition yet."""
    wanted = (today + timedelta(days=n) for n in range(ahead_days + 1))
    return [day for day in wanted if day not in existing]


def expired_days(existing: set[date], *, today: date, retention_days: int) -> list[date]:
    """The days older than ``retention_days`` before today, oldest first: today and the
    ``retention_days`` before it are kept (``retention_days`` is at least 1)."""
    if retention_days < 1:
        raise ValueError(f"retention_days must be at least 1, not {retention_days}")
    cutoff = today - timedelta(days=retention_days)
    return sorted(day for day in existing if day < cutoff)


def today_utc() -> date:
    return datetime.now(UTC).date()


# -- the catalog -------------------------------------------------------------------------------


def existing_days() -> set[date]:
    """The days that have a partition now. Raises :class:`PartitioningMissing` when the table is
    not partitioned."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [PARENT])
        row = cursor.fetchone()
        if row is None or row[0] != "p":
            raise PartitioningMissing(f"{PARENT} is not a partitioned table: run chrono migrate")
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s)",
            [PARENT],
        )
        return {day for (name,) in cursor.fetchall() if (day := day_of(name)) is not None}


def rows_in(table: str) -> int:
    """An estimate of ``table``'s rows (the planner's, as of its last ANALYZE: a count of a
    partition of 100 M rows would take minutes), -1 if never analysed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                       [table])
        row = cursor.fetchone()
        return int(row[0]) if row else 0


def keep_reason(table: str) -> str | None:
    """Why the executions of ``table`` (a partition, attached or detached) may not be dropped
    yet, or None: one is not finished, an audit row of one is not shipped, or a workflow end of
    one is not applied."""
    executions = connection.ops.quote_name(table)
    with connection.cursor() as cursor:
        for reason, check in _KEEP_CHECKS:
            cursor.execute(check.format(executions=executions))
            if cursor.fetchone()[0]:
                return reason
    return None


# -- the statements ----------------------------------------------------------------------------


def _lock_timeout(cursor: Any) -> None:
    cursor.execute(f"SET LOCAL lock_timeout = {int(LOCK_TIMEOUT_MS)}")


def create_day(day: date) -> int:
    """Add ``day``'s partition (one transaction); the rows of that day moved into it from the
    default partition."""
    name = connection.ops.quote_name(partition_name(day))
    start, end = day_bounds(day)
    with transaction.atomic(), connection.cursor() as cursor:
        _lock_timeout(cursor)
        cursor.execute(f"CREATE TABLE {name} (LIKE {PARENT} {_LIKE})")
        cursor.execute(
            f"WITH m AS (DELETE FROM {DEFAULT_PARTITION} WHERE scheduled_for >= %s "  # nosec B608 # constants
            f"AND scheduled_for < %s RETURNING *) INSERT INTO {name} SELECT * FROM m",
            [start, end],
        )
        moved = cursor.rowcount
        cursor.execute(
            f"ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)",
            [start, end],
        )
        _name_indexes(cursor, partition_name(day))
    return moved


def _name_indexes(cursor: Any, table: str) -> None:
    """Name ``table``'s indexes ``<table>_<parent index>``, as migration 0015 named those of
    the partitions it made (PostgreSQL's own names list the columns): a plan then names the
    model's index."""
    cursor.execute(
        "SELECT ci.relname, pi.relname FROM pg_index x JOIN pg_class ci ON ci.oid = x.indexrelid "
        "JOIN pg_inherits ih ON ih.inhrelid = ci.oid JOIN pg_class pi ON pi.oid = ih.inhparent "
        "WHERE x.indrelid = to_regclass(%s)",
        [table],
    )
    for index_name, parent_name in cursor.fetchall():
        wanted = f"{table}_{parent_name}"[:63]
        if index_name != wanted:
            cursor.execute(f"ALTER INDEX {connection.ops.quote_name(index_name)} RENAME TO "
                           f"{connection.ops.quote_name(wanted)}")


@dataclass(frozen=True)
class DropOutcome:
    """What became of an expired day: dropped, or kept for ``kept_because``; ``timings_ms``,
    how long each step of :func:`drop_day` took (those it ran, by :data:`DROP_PHASES`)."""

    day: date
    dropped: bool
    kept_because: str | None = None
    estimated_rows: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def locked_ms(self) -> float:
        """How long the parent's exclusive lock was held (the detach, the checks on the detached
        table and the drop): what the beat's and the workers' statements waited at most."""
        return sum(self.timings_ms.get(phase, 0.0) for phase in LOCKED_PHASES)


# The steps of drop_day, in order. "checks": keep_reason without the lock; "detach": the lock
# waited for and the DETACH; "locked_checks": keep_reason on the detached table; "drop": the
# DROP TABLE statement; "commit": the commit, where PostgreSQL removes the table's files, after
# it released the locks (their removal is the only step that grows with the day's size: the
# file system frees every block; docs/architecture.md, "Executions partitioned by day").
DROP_PHASES = ("checks", "detach", "locked_checks", "drop", "commit")
LOCKED_PHASES = ("detach", "locked_checks", "drop")


def drop_day(day: date, *, dry_run: bool = False) -> DropOutcome:
    """Detach and drop ``day``'s partition unless :func:`keep_reason` finds a reason to keep
    it. The checks run before, and again on the detached table inside the transaction that
    drops it, so nothing can change the day between the check and the drop (a day kept then is
    attached again by the rollback). ``dry_run`` only checks: its outcome's ``dropped`` is
    False and ``kept_because`` None for a day a pass would drop."""
    table = partition_name(day)
    estimated = rows_in(table)
    timings: dict[str, float] = {}
    clock = _PhaseClock(timings)
    # Checked first without the parent's exclusive lock, so a day that stays never takes it.
    reason = keep_reason(table)
    clock.lap("checks")
    if dry_run or reason is not None:
        return DropOutcome(day, dropped=False, kept_because=reason, estimated_rows=estimated,
                           timings_ms=timings)
    name = connection.ops.quote_name(table)
    with transaction.atomic(), connection.cursor() as cursor:
        _lock_timeout(cursor)
        # The tenant foreign key is checked at commit: a row written in the caller's
        # transaction leaves a pending check that DROP refuses to outlive; run them now.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        clock.lap(None)
        cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {name}")
        clock.lap("detach")
        reason = keep_reason(table)
        clock.lap("locked_checks")
        if reason is not None:
            transaction.set_rollback(True)  # attached again, as it was
            return DropOutcome(day, dropped=False, kept_because=reason,
                               estimated_rows=estimated, timings_ms=timings)
        cursor.execute(f"DROP TABLE {name}")
        clock.lap("drop")
    clock.lap("commit")
    return DropOutcome(day, dropped=True, estimated_rows=estimated, timings_ms=timings)


class _PhaseClock:
    """Milliseconds since the previous lap, stored under each lap's name (None: not stored)."""

    def __init__(self, into: dict[str, float]) -> None:
        self.into = into
        self.last = time.perf_counter()

    def lap(self, phase: str | None) -> None:
        now = time.perf_counter()
        if phase is not None:
            self.into[phase] = round((now - self.last) * 1000, 2)
        self.last = now


def delete_expired_default_rows(before: datetime, *, dry_run: bool = False,
                                batch: int = 10_000) -> int:
    """The default partition's rows scheduled before ``before`` (it holds what no day covered:
    a misfire row of a dropped day) go by row, on the same conditions as a day: finished, audit
    rows shipped, workflow ends applied; how many (would) go."""
    where = (
        f"e.scheduled_for < %s AND e.status IN ({_FINISHED}) "  # nosec B608 # a constant
        "AND NOT EXISTS (SELECT 1 FROM search_auditevent a WHERE a.execution_id = e.execution_id "
        "AND a.shipped_at IS NULL) "
        "AND NOT EXISTS (SELECT 1 FROM chrono_execution_end x "
        "WHERE x.execution_id = e.execution_id)"
    )
    with connection.cursor() as cursor:
        if dry_run:
            cursor.execute(f"SELECT count(*) FROM {DEFAULT_PARTITION} e WHERE {where}",  # nosec B608 # constants
                           [before])
            return int(cursor.fetchone()[0])
        total = 0
        while True:
            cursor.execute(
                f"DELETE FROM {DEFAULT_PARTITION} WHERE ctid IN (SELECT e.ctid FROM "  # nosec B608 # constants
                f"{DEFAULT_PARTITION} e WHERE {where} LIMIT %s)",
                [before, batch],
            )
            total += cursor.rowcount
            if cursor.rowcount < batch:
                return total
