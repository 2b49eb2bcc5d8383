"""Per-minute counters of the work as it happens, for the dashboard: what was dispatched, started,
succeeded and failed, with histograms of dispatch lateness, start lateness and duration, per
minute, tenant and task.

The dashboard must never count the executions table (at 100 M rows a day a ``COUNT`` pins the
database: Oban Web's users learned it at 5 M). So the processes that do the work count it: the
beat's recorder notes each confirmed occurrence, the worker each start and finish, in memory
(:class:`Accumulator`, a dict increment and a bisect per event, ~2 µs), and a thread of each process
adds what it counted to ``chrono_execution_rollup`` once a second with one upsert
(:class:`RollupWriter`). Every count is written four times: under its tenant and task, under
:data:`ALL_TENANTS` (the platform's), and under :data:`ALL_TASKS` for both, so the charts read
one row per minute (the platform's hour: 60 rows, where summing its 200 tasks' 12,000 rows took
most of the view's time) and the task table one row per minute and task.

What a process counted in its last second is lost if it is killed with SIGKILL: these are
statistics, not records (the executions table and the audit log are the records).

Histograms have fixed bucket bounds (:data:`BUCKET_BOUNDS_MS`); :func:`quantile_ms` estimates a
percentile from bucket counts by linear interpolation inside the bucket, so p99 is exact to the
bucket's width (e.g. between 50 and 100 ms).
"""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import DatabaseError, connection

from chronocore.expiry import ExpiredRows

log = logging.getLogger("chrono.rollups")

# Upper bounds (ms, inclusive) of the histogram buckets; one more bucket holds everything above.
BUCKET_BOUNDS_MS: tuple[int, ...] = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
)
BUCKETS = len(BUCKET_BOUNDS_MS) + 1
# The tenant id under which every count is also written: the sum over all tenants.
ALL_TENANTS = "00000000-0000-0000-0000-000000000000"
# The task name under which every count is also written: the sum over tasks (no task name can
# hold a ``*``: ``scheduler.specs.TASK_NAME``).
ALL_TASKS = "*"
FLUSH_INTERVAL_S = 1.0
MINUTE_MS = 60_000
# Benchmarks only, not a production option: ``chrono bench dispatch --rollups off`` sets it to
# ``1`` in the beat and worker processes it starts, which then count nothing (and so write no
# rollup rows), so that runs with and without the rollups, alternated, measure what counting
# costs each job on the dispatch path (issue 13: at most 5 % of the beat's and worker's CPU).
# A process started with it shows none of its work on the dashboard.
BENCH_ROLLUPS_OFF = "CHRONO_BENCH_ROLLUPS_OFF"


def bucket_of(value_ms: float) -> int:
    """Index of the bucket holding ``value_ms`` (negative values count as 0)."""
    return bisect.bisect_left(BUCKET_BOUNDS_MS, max(value_ms, 0))


def quantile_ms(buckets: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of the values counted in ``buckets``, interpolated inside
    its bucket; None when nothing was counted. The open last bucket reports its lower bound."""
    total = sum(buckets)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(buckets):
        if count and seen + count >= rank:
            lower = 0 if index == 0 else BUCKET_BOUNDS_MS[index - 1]
            if index >= len(BUCKET_BOUNDS_MS):
                return float(lower)
            upper = BUCKET_BOUNDS_MS[index]
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return float(BUCKET_BOUNDS_MS[-1])


def add_buckets(into: list[int], other: Sequence[int]) -> list[int]:
    for index, count in enumerate(other):
        into[index] += count
    return into


@dataclass
class Counts:
    """What happened in one minute to one tenant's task."""

    dispatched: int = 0
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    duration_sum_ms: int = 0
    dispatch_lateness: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    start_lateness: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    duration: list[int] = field(default_factory=lambda: [0] * BUCKETS)


RollupKey = tuple[int, str, str]  # (minute start ms, tenant id, task name)


class Accumulator:
    """Counts of one process since its last flush. Thread-safe: a thread pool's tasks and the
    beat's recorder note into it while the writer drains it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[RollupKey, Counts] = {}

    def _counts_for(self, at_ms: int, tenant_id: str, task: str) -> Counts:
        key = (at_ms - at_ms % MINUTE_MS, tenant_id, task)
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = Counts()
        return counts

    def note_dispatched(self, at_ms: int, tenant_id: str, task: str, lateness_ms: int) -> None:
        with self._lock:
            counts = self._counts_for(at_ms, tenant_id, task)
            counts.dispatched += 1
            counts.dispatch_lateness[bucket_of(lateness_ms)] += 1

    def note_started(self, at_ms: int, tenant_id: str, task: str, lateness_ms: int) -> None:
        with self._lock:
            counts = self._counts_for(at_ms, tenant_id, task)
            counts.started += 1
            counts.start_lateness[bucket_of(lateness_ms)] += 1

    def note_finished(
        self, at_ms: int, tenant_id: str, task: str, *, succeeded: bool, duration_ms: int
    ) -> None:
        with self._lock:
            counts = self._counts_for(at_ms, tenant_id, task)
            if succeeded:
                counts.succeeded += 1
            else:
                counts.failed += 1
            counts.duration_sum_ms += max(duration_ms, 0)
            counts.duration[bucket_of(duration_ms)] += 1

    def drain(self) -> dict[RollupKey, Counts]:
        """Everything counted so far, under each tenant and under :data:`ALL_TENANTS`; the
        accumulator starts again from zero."""
        with self._lock:
            drained, self._counts = self._counts, {}
        return with_platform_totals(drained)

    def put_back(self, counts: dict[RollupKey, Counts]) -> None:
        """Return counts a failed flush could not write (they are written with the next)."""
        with self._lock:
            for key, value in counts.items():
                if key[1] != ALL_TENANTS and key[2] != ALL_TASKS:
                    merge_counts(self._counts.setdefault(key, Counts()), value)


class _CountsNothing(Accumulator):
    """The accumulator of a process started with :data:`BENCH_ROLLUPS_OFF` (benchmarks only)."""

    def note_dispatched(self, *args: object, **kwargs: object) -> None:
        pass

    def note_started(self, *args: object, **kwargs: object) -> None:
        pass

    def note_finished(self, *args: object, **kwargs: object) -> None:
        pass


def new_accumulator() -> Accumulator:
    """A process's accumulator: one that counts nothing when :data:`BENCH_ROLLUPS_OFF` is
    ``1`` (a benchmark's run without the rollups), the real one when it is unset, empty or
    ``0``."""
    value = os.environ.get(BENCH_ROLLUPS_OFF, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{BENCH_ROLLUPS_OFF} must be 1 (count nothing) or 0, not {value!r}")
    return _CountsNothing() if value == "1" else Accumulator()


def merge_counts(into: Counts, other: Counts) -> Counts:
    into.dispatched += other.dispatched
    into.started += other.started
    into.succeeded += other.succeeded
    into.failed += other.failed
    into.duration_sum_ms += other.duration_sum_ms
    add_buckets(into.dispatch_lateness, other.dispatch_lateness)
    add_buckets(into.start_lateness, other.start_lateness)
    add_buckets(into.duration, other.duration)
    return into


def with_platform_totals(counts: dict[RollupKey, Counts]) -> dict[RollupKey, Counts]:
    """``counts`` (per minute, tenant and task) with their sums over tenants, over tasks, and
    over both."""
    totals: dict[RollupKey, Counts] = {}
    for (minute, tenant_id, task), value in counts.items():
        for key in ((minute, ALL_TENANTS, task), (minute, tenant_id, ALL_TASKS),
                    (minute, ALL_TENANTS, ALL_TASKS)):
            merge_counts(totals.setdefault(key, Counts()), value)
    return {**counts, **totals}


def rebuild_platform_task_totals(since_ms: int) -> None:
    """Write the platform's all-tasks rows from minute ``since_ms`` on again from its per-task
    rows (after rows of synthetic tasks were deleted: ``chrono bench dashboard``)."""
    sums = ", ".join(f"sum({c})" for c in COLUMNS[3:8])
    arrays = ", ".join(f"chrono_sum_int_arrays({c})" for c in _ARRAYS)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM chrono_execution_rollup WHERE tenant_id = %s AND task = %s "
                       "AND minute >= to_timestamp(%s / 1000.0)",
                       [ALL_TENANTS, ALL_TASKS, since_ms])
        cursor.execute(
            f"INSERT INTO chrono_execution_rollup ({', '.join(COLUMNS)}) "  # nosec B608 # constants
            f"SELECT minute, tenant_id, %s, {sums}, {arrays} FROM chrono_execution_rollup "
            "WHERE tenant_id = %s AND task <> %s AND minute >= to_timestamp(%s / 1000.0) "
            "GROUP BY minute, tenant_id",
            [ALL_TASKS, ALL_TENANTS, ALL_TASKS, since_ms])


# Rows of minutes before a cutoff, oldest first: the retention pass deletes them
# (rollup_retention_hours after their minute; the dashboard reads the last hour).
EXPIRED = ExpiredRows.older_than("chrono_execution_rollup", "minute", batch=10_000)


COLUMNS = ("minute", "tenant_id", "task", "dispatched", "started", "succeeded", "failed",
           "duration_sum_ms", "dispatch_lateness", "start_lateness", "duration")
_ARRAYS = ("dispatch_lateness", "start_lateness", "duration")


def _upsert_sql(rows: int) -> str:
    values = ", ".join(
        "(to_timestamp(%s / 1000.0), %s::uuid, %s, %s, %s, %s, %s, %s, %s::int[], %s::int[], "
        "%s::int[])" for _ in range(rows)
    )
    added = ", ".join(
        f"{c} = r.{c} + EXCLUDED.{c}" for c in COLUMNS[3:8]
    )
    arrays = ", ".join(f"{c} = chrono_add_int_arrays(r.{c}, EXCLUDED.{c})" for c in _ARRAYS)
    return (f"INSERT INTO chrono_execution_rollup AS r ({', '.join(COLUMNS)}) VALUES {values} "
            # nosec B608 # column names are module constants, VALUES only placeholders
            f"ON CONFLICT (tenant_id, minute, task) DO UPDATE SET {added}, {arrays}")


def write_counts(counts: dict[RollupKey, Counts]) -> None:
    """Add ``counts`` to the rollup table with one statement (rows in key order, so that two
    processes' upserts lock shared rows in the same order and never deadlock)."""
    if not counts:
        return
    parameters: list[object] = []
    for (minute_ms, tenant_id, task), c in sorted(counts.items(), key=_lock_order):
        parameters += [minute_ms, tenant_id, task, c.dispatched, c.started, c.succeeded,
                       c.failed, c.duration_sum_ms, c.dispatch_lateness, c.start_lateness,
                       c.duration]
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(len(counts)), parameters)


def _lock_order(item: tuple[RollupKey, Counts]) -> tuple[str, int, str]:
    (minute_ms, tenant_id, task), _ = item
    return tenant_id, minute_ms, task


class RollupWriter:
    """The process's accumulator and the thread that writes it once a second.

    Started on first use in the process that uses it (a prefork child starts its own after the
    fork, since threads do not survive one); what is left is written at exit."""

    def __init__(self, *, interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.accumulator = Accumulator()
        self._pid: int | None = None
        self._start_lock = threading.Lock()

    def ensure_started(self) -> Accumulator:
        if self._pid != os.getpid():
            with self._start_lock:
                if self._pid != os.getpid():
                    self.accumulator = new_accumulator()
                    threading.Thread(target=self._run, name="chrono-rollups",
                                     daemon=True).start()
                    atexit.register(self.flush)
                    self._pid = os.getpid()
        return self.accumulator

    def flush(self) -> bool:
        """Write what was counted since the last flush; whether there was anything."""
        drained = self.accumulator.drain()
        if not drained:
            return False
        try:
            write_counts(drained)
        except DatabaseError as exc:
            log.warning("could not write %d rollup rows, kept for the next flush: %r",
                        len(drained), exc)
            connection.close_if_unusable_or_obsolete()
            self.accumulator.put_back(drained)
        except Exception:
            # Not PostgreSQL's refusal but a fault of this process (the thread's connection
            # refused by a test runner, a bug): the counts are kept and the thread goes on, so
            # one bad flush never ends the minute rollups of the process for good.
            log.exception("could not write %d rollup rows, kept for the next flush",
                          len(drained))
            self.accumulator.put_back(drained)
        return True

    def tick(self) -> bool:
        """The writer thread's work each second: flush; after a second with nothing counted
        (the process is idle, or its work is done), give the thread's own connection back
        rather than hold it for ever: one PostgreSQL connection less per idle worker, and none
        left open on a database about to be dropped (a test run's). The next flush opens
        another. Whether anything was written."""
        if self.flush():
            return True
        connection.close()
        return False

    def _run(self) -> None:
        while True:
            time.sleep(self.interval_s)
            self.tick()


_writer = RollupWriter()


def recorder() -> Accumulator:
    """This process's accumulator (its writer thread started on first use)."""
    return _writer.ensure_started()


def flush() -> bool:
    """Write what this process counted now (tests, and processes about to exit); whether
    there was anything."""
    return _writer.flush()


def summed(rows: Iterable[Counts]) -> Counts:
    total = Counts()
    for row in rows:
        merge_counts(total, row)
    return total
