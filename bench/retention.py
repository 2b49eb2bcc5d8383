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
``setup_s``. Everything it created is dropped by the measurement itself.
"""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import datetime, timedelta

from django.db import connection

from bench.ceilings import reports_ceilings
from bench.common import summarize_ms
from bench.platform import bench_platform
from scheduler import partitions

FIRST_DAY_BACK = 60


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench retention")
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="executions in each dropped day")
    parser.add_argument("--repeat", type=int, default=3, help="days created, filled and dropped")
    args = parser.parse_args(argv)
    if args.rows < 0 or args.repeat < 1:
        parser.error("--rows must be at least 0 and --repeat at least 1")
    return args


def fill_day(day, rows: int, tenant_id: uuid.UUID) -> None:
    """``rows`` SUCCEEDED executions spread over ``day``, one random job id each."""
    start, end = partitions.day_bounds(day)
    fill(start, end, rows, tenant_id)


def fill(start: datetime, end: datetime, rows: int, tenant_id: uuid.UUID) -> None:
    """``rows`` SUCCEEDED executions spread evenly over ``[start, end)``, one random job id
    each, by one ``INSERT … SELECT generate_series`` (no round trip per row); the table
    vacuumed and analysed after."""
    span_s = (end - start).total_seconds()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO chrono_execution (execution_id, job_id, tenant_id, attempt, "
            "scheduled_for, finished_at, status, error, logs_url, fencing_token) "
            "SELECT gen_random_uuid(), gen_random_uuid(), %s, 1, "
            "%s + ((n - 1) * %s / greatest(%s, 1)) * interval '1 second', "
            "%s + ((n - 1) * %s / greatest(%s, 1)) * interval '1 second', "
            "'SUCCEEDED', '', '', 1 FROM generate_series(1, %s) AS n",
            [tenant_id, start, span_s, rows, start, span_s, rows, rows],
        )
        # Vacuumed too, as a platform's history has long been: otherwise the run measured next
        # pays for autovacuum's first pass and the first reads' hint-bit writes.
        cursor.execute("VACUUM (ANALYZE) chrono_execution")


@reports_ceilings()
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    today = partitions.today_utc()
    create_ms: list[float] = []
    drop_ms: list[float] = []
    setup_s = 0.0
    with bench_platform("retention") as platform:
        for n in range(args.repeat):
            day = today - timedelta(days=FIRST_DAY_BACK + n)
            if day in partitions.existing_days():
                partitions.drop_day(day)
            started = time.perf_counter()
            partitions.create_day(day)
            create_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            fill_day(day, args.rows, platform.tenant.tenant_id)
            setup_s += time.perf_counter() - started
            started = time.perf_counter()
            outcome = partitions.drop_day(day)
            drop_ms.append((time.perf_counter() - started) * 1000)
            if not outcome.dropped:
                raise RuntimeError(f"day {day} was kept: {outcome.kept_because}")
    return {"bench": "retention", "rows_per_day": args.rows, "repeat": args.repeat,
            "drop_ms": summarize_ms(drop_ms), "create_ms": summarize_ms(create_ms),
            "setup_s": round(setup_s, 1)}
