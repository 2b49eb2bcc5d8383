"""``chrono bench retention``: how long the retention pass takes to drop one day of executions,
and to create one ahead, with ``--rows`` executions in the day.

Set-up, ``--repeat`` times: a day partition of its own, 60 + n days in the past (older than any
retention), filled with ``--rows`` finished executions of the benchmark tenant by one
``INSERT … SELECT generate_series`` in PostgreSQL (no round trip per row), then analysed. The
measured steps are the pass's own functions: :func:`scheduler.partitions.create_day` (an empty
day, attached) and :func:`scheduler.partitions.drop_day` (detach, the checks on the detached
table, drop). The issue's bound is a day dropped in at most 1 s (a day holds 100 M rows at the
brief's rate: ``--rows 100000000`` needs tens of GB of disk).

Prints ``drop_ms`` and ``create_ms`` (p50/p95/p99/max over the repeats), ``rows_per_day`` and
``setup_s``. Everything it created is dropped by the measurement itself. Also, over the repeats:
``phases_ms``, each step of the drop (:data:`scheduler.partitions.DROP_PHASES`: the checks, the
detach, the checks on the detached table, the ``DROP``, the commit where PostgreSQL removes the
files after releasing its locks), ``locked_ms`` (the detach, the locked checks and the drop:
how long the parent's exclusive lock was held), and ``writer_wait_ms``: the longest a statement
on ``chrono_execution`` from another connection took while the day was dropped (a probe reading
one row of today's partition every :data:`PROBE_INTERVAL_S`, as the beat's and the workers'
statements would wait behind the lock).

Filling a day of 10 M rows takes minutes (408 s in session 9) for a drop of about a second, so a
filled day can be kept and copied: ``--keep`` creates and fills the days and leaves them (nothing
is dropped; their rows belong to a tenant of their own, :data:`KEPT_TENANT`, which the platform's
clean-up leaves alone), and ``--reuse`` drops a day that is already there as it is, filling
only the days that are missing. A copy of the kept database costs seconds (PostgreSQL copies the
files; no one may be connected to the template)::

    DATABASE_URL=$FILLED chrono bench retention --rows 10000000 --repeat 1 --keep
    psql -c 'CREATE DATABASE bench_copy TEMPLATE bench_filled STRATEGY FILE_COPY'
    DATABASE_URL=$COPY chrono bench retention --rows 10000000 --repeat 1 --reuse

A reused day's rows are counted and printed (``reused_rows``); ``--rows`` is not checked
against them.

``--ended-jobs N`` also measures the pass's deletion of jobs that ended
(:mod:`scheduler.ended_jobs`): N COMPLETED one-time jobs of the benchmark tenant that ended 60
days ago (one ``INSERT … SELECT generate_series``, vacuumed and analysed), among as many that
ended yesterday and as many ACTIVE ones (which it must leave), then
:func:`scheduler.ended_jobs.delete_expired` over them with the executions of the days kept
probed as the pass probes them. Prints ``ended_jobs``: how many were deleted, the rate, and
each batch's time (``batch_ms``, :data:`scheduler.ended_jobs.DELETE_BATCH` jobs a batch).
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.db import connection, connections

from bench.ceilings import reports_ceilings
from bench.common import summarize_ms
from bench.platform import bench_platform
from chronocore.models import Tenant
from scheduler import ended_jobs, partitions

FIRST_DAY_BACK = 60
KEPT_TENANT = "bench-retention-kept"
PROBE_INTERVAL_S = 0.001


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench retention")
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="executions in each dropped day")
    parser.add_argument("--repeat", type=int, default=3, help="days created, filled and dropped")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--keep", action="store_true",
                      help="create and fill the days, and leave them (drop nothing) for --reuse "
                           "in this database or a copy of it")
    mode.add_argument("--reuse", action="store_true",
                      help="drop a day already there (of an earlier --keep) without refilling "
                           "it; fill only the missing days")
    parser.add_argument("--ended-jobs", type=int, default=0,
                        help="also delete this many jobs that ended 60 days ago, as the pass "
                             "does, and time it")
    args = parser.parse_args(argv)
    if args.rows < 0 or args.repeat < 1 or args.ended_jobs < 0:
        parser.error("--rows and --ended-jobs must be at least 0 and --repeat at least 1")
    return args


def kept_tenant() -> Tenant:
    """The tenant of the rows of ``--keep`` and ``--reuse`` (not the benchmark tenant, whose rows
    the platform deletes before and after each run)."""
    tenant, _ = Tenant.objects.get_or_create(slug=KEPT_TENANT,
                                             defaults={"name": "Benchmarks (kept days)"})
    return tenant


def rows_of(day) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM "  # nosec B608 # a partition's name
                       f"{connection.ops.quote_name(partitions.partition_name(day))}")
        return int(cursor.fetchone()[0])


def fill_day(day, rows: int, tenant_id: uuid.UUID) -> None:
    """``rows`` SUCCEEDED executions spread over ``day``, one random job id each."""
    start, end = partitions.day_bounds(day)
    fill(start, end, rows, tenant_id)


def fill(start: datetime, end: datetime, rows: int, tenant_id: uuid.UUID) -> None:
    """``rows`` SUCCEEDED executions spread evenly over ``[start, end)``, one random job id
    each, by one ``INSERT … SELECT generate_series`` (no round trip per row); the table
    vacuumed and analysed after. Each row holds what a finished execution holds: dispatched,
    started and finished times, the worker that ran it (one of 16 names of a Celery worker's
    length), its lease and exit code 0 (``logs_url`` stays empty, as the platform stores it: the
    API derives it), so that the day's files are the size a day of real executions makes."""
    span_s = (end - start).total_seconds()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO chrono_execution (execution_id, job_id, tenant_id, attempt, "
            "scheduled_for, dispatched_at, started_at, finished_at, lease_expires_at, status, "
            "worker_id, exit_code, error, logs_url, fencing_token) "
            "SELECT id, gen_random_uuid(), %s, 1, t, t + interval '5 ms', t + interval '20 ms', "
            "t + interval '120 ms', t + interval '30 s', 'SUCCEEDED', "
            "'celery@chrono-worker-' || (n %% 16) || '.prod.internal', 0, '', '', 1 "
            "FROM (SELECT n, gen_random_uuid() AS id, "
            "%s + ((n - 1) * %s / greatest(%s, 1)) * interval '1 second' AS t "
            "FROM generate_series(1, %s) AS n) AS r",
            [tenant_id, start, span_s, rows, rows],
        )
        # Vacuumed too, as a platform's history has long been: otherwise the run measured next
        # pays for autovacuum's first pass and the first reads' hint-bit writes.
        cursor.execute("VACUUM (ANALYZE) chrono_execution")


def fill_jobs(jobs: int, tenant_id: uuid.UUID, *, status: str, ended_days_ago: int) -> None:
    """``jobs`` one-time jobs of ``status`` whose last change was ``ended_days_ago`` days ago,
    by one ``INSERT … SELECT generate_series``; the table vacuumed and analysed after."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO chrono_job (job_id, tenant_id, name, job_type, timezone, next_run_at, "
            "status, retry_count, max_retries, args, kwargs, queue, cancelled_by, updated_at) "
            "SELECT gen_random_uuid(), %s, 'bench-ended-' || n, 'chrono.noop', 'UTC', "
            "CASE WHEN %s = 'ACTIVE' THEN now() + interval '1 day' END, %s, 0, 0, '[]', '{}', "
            "'bench', '', now() - %s * interval '1 day' - n * interval '1 ms' "
            "FROM generate_series(1, %s) AS n",
            [tenant_id, status, status, ended_days_ago, jobs])
        cursor.execute("VACUUM (ANALYZE) chrono_job")


def delete_ended_jobs(jobs: int, tenant_id: uuid.UUID) -> dict[str, object]:
    """The pass's deletion of ``jobs`` ended jobs among as many recent and active ones."""
    started = time.perf_counter()
    fill_jobs(jobs, tenant_id, status="COMPLETED", ended_days_ago=FIRST_DAY_BACK)
    fill_jobs(jobs, tenant_id, status="COMPLETED", ended_days_ago=1)
    fill_jobs(jobs, tenant_id, status="ACTIVE", ended_days_ago=FIRST_DAY_BACK)
    setup_s = time.perf_counter() - started
    cutoff, _ = partitions.day_bounds(partitions.today_utc() - timedelta(days=7))
    marks = [time.perf_counter()]

    def note_batch() -> bool:  # called after each full batch
        marks.append(time.perf_counter())
        return False

    deleted, _ = ended_jobs.delete_expired(cutoff, should_stop=note_batch)
    marks.append(time.perf_counter())
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM chrono_job WHERE tenant_id = %s", [tenant_id])
        left = int(cursor.fetchone()[0])
    took_s = marks[-1] - marks[0]
    return {"deleted": deleted, "left": left, "expected_left": 2 * jobs,
            "per_s": round(deleted / took_s) if took_s > 0 else None,
            "took_s": round(took_s, 2),
            "batch_ms": summarize_ms([(b - a) * 1000
                                      for a, b in itertools.pairwise(marks)]),
            "setup_s": round(setup_s, 1)}


@contextmanager
def writer_probe(waits_ms: list[float]):
    """While the block runs, read one (absent) row of today from another connection every
    :data:`PROBE_INTERVAL_S`; on exit, the slowest read's milliseconds are appended to
    ``waits_ms``."""
    stop = threading.Event()
    ready = threading.Event()
    slowest = [0.0]
    errors: list[BaseException] = []

    def probe() -> None:
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                now = datetime.now().astimezone()
                query = ("SELECT 1 FROM chrono_execution WHERE execution_id = %s "
                         "AND scheduled_for = %s")
                cursor.execute(query, [uuid.uuid4(), now])
                ready.set()
                while not stop.is_set():
                    started = time.perf_counter()
                    cursor.execute(query, [uuid.uuid4(), now])
                    slowest[0] = max(slowest[0], (time.perf_counter() - started) * 1000)
                    stop.wait(PROBE_INTERVAL_S)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
            ready.set()
        finally:
            other.close()

    thread = threading.Thread(target=probe, name="retention-writer-probe", daemon=True)
    thread.start()
    ready.wait(30)
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    if errors:
        raise RuntimeError(f"the writer probe failed: {errors[0]}") from errors[0]
    waits_ms.append(round(slowest[0], 1))


@reports_ceilings()
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    today = partitions.today_utc()
    create_ms: list[float] = []
    drop_ms: list[float] = []
    reused_rows: list[int] = []
    phases: dict[str, list[float]] = {phase: [] for phase in partitions.DROP_PHASES}
    locked_ms: list[float] = []
    writer_wait_ms: list[float] = []
    setup_s = 0.0
    with bench_platform("retention") as platform:
        tenant = kept_tenant() if args.keep or args.reuse else platform.tenant
        for n in range(args.repeat):
            day = today - timedelta(days=FIRST_DAY_BACK + n)
            if day in partitions.existing_days():
                if args.reuse:
                    reused_rows.append(rows_of(day))
                else:
                    partitions.drop_day(day)
            if day not in partitions.existing_days():
                started = time.perf_counter()
                partitions.create_day(day)
                create_ms.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                fill_day(day, args.rows, tenant.tenant_id)
                setup_s += time.perf_counter() - started
            if args.keep:
                continue
            with writer_probe(writer_wait_ms):
                started = time.perf_counter()
                outcome = partitions.drop_day(day)
                drop_ms.append((time.perf_counter() - started) * 1000)
            if not outcome.dropped:
                raise RuntimeError(f"day {day} was kept: {outcome.kept_because}")
            for phase, took in outcome.timings_ms.items():
                phases[phase].append(took)
            locked_ms.append(outcome.locked_ms)
        ended = (delete_ended_jobs(args.ended_jobs, platform.tenant.tenant_id)
                 if args.ended_jobs else None)
    return {"bench": "retention", "rows_per_day": args.rows, "repeat": args.repeat,
            "kept": args.keep, "reused_rows": reused_rows,
            "drop_ms": summarize_ms(drop_ms),
            "phases_ms": {phase: summarize_ms(took) for phase, took in phases.items()},
            "locked_ms": summarize_ms(locked_ms), "writer_wait_ms": summarize_ms(writer_wait_ms),
            "create_ms": summarize_ms(create_ms), "setup_s": round(setup_s, 1),
            "ended_jobs": ended}
