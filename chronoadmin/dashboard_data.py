"""What the live dashboard shows, as one JSON-ready dict, read from the per-minute rollups
(:mod:`scheduler.rollups`), Redis and a few small indexed queries — never a count or scan of the
executions table, which grows by millions of rows a day.

Every query here is bounded: the rollups of the last hour of one tenant (or of the platform-wide
rows), the jobs by status from the counts triggers keep (:mod:`scheduler.job_counts`: a few rows
per tenant, never a count of the jobs table), the running executions (at most the workers'
concurrency, through the partial index on RUNNING), overdue retries and expired leases (partial
indexes, counted up to :data:`STUCK_COUNT_LIMIT`), the workers table; and, for the platform
view, the queues' depth and consumers from RabbitMQ (:mod:`chronoadmin.dashboard_queues`:
cached, and never waited for long). A tenant's figures are one round trip to PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import redis
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from chronoadmin.dashboard_queues import queues_panel
from reaper.models import Worker, WorkerState
from scheduler import job_counts
from scheduler.models import Execution, ExecutionStatus
from scheduler.rollups import ALL_TASKS, ALL_TENANTS, BUCKETS, quantile_ms
from scheduler.timers import timer_store

WINDOW_MINUTES = 60
TOP_TASKS = 20
TOP_FAILING = 10
MAX_WORKERS = 100


def _summed_histogram(column: str) -> str:
    """SQL summing the histogram arrays of ``column`` over a group, bucket by bucket.

    One built-in ``sum`` per bucket subscript: 16 C aggregates fold the 12,000 rows of the
    platform's last hour (200 tasks x 60 minutes) in ~11 ms, where the SQL-function aggregate
    ``chrono_sum_int_arrays`` (a subquery per row) took ~100 ms per array on the same rows.
    """
    return "ARRAY[" + ", ".join(f"sum({column}[{i}])" for i in range(1, BUCKETS + 1)) + "]"


# The SQL interpolates only column names and bucket subscripts (module constants).
# The charts read the all-tasks rows (one a minute: rollups.ALL_TASKS); the sums only add up
# the rows of a minute written before there were any (none, after an hour).
_SERIES_SQL = f"""
SELECT minute, sum(dispatched), sum(started), sum(succeeded), sum(failed),
       {_summed_histogram("dispatch_lateness")}, {_summed_histogram("start_lateness")}
FROM chrono_execution_rollup
WHERE tenant_id = %s AND task = %s AND minute >= %s
GROUP BY minute ORDER BY minute
"""  # nosec B608

# The task table in one statement: every task's counts (two integer sums over the hour's
# rows), then the duration histograms of only the tasks shown (the top by runs and by failures,
# ties by name in code point order, as sorted() breaks them): on the platform's 12,000 rows of
# an hour (200 tasks) 3.4 + 3.4 ms, where folding every task's histogram took 15 ms.
_TASKS_SQL = f"""
WITH counts AS (
  SELECT task, sum(succeeded) AS succeeded, sum(failed) AS failed
  FROM chrono_execution_rollup
  WHERE tenant_id = %s AND task <> %s AND minute >= %s
  GROUP BY task HAVING sum(succeeded) + sum(failed) > 0
), shown AS (
  (SELECT task FROM counts ORDER BY succeeded + failed DESC, task COLLATE "C" LIMIT {TOP_TASKS})
  UNION
  (SELECT task FROM counts WHERE failed > 0 ORDER BY failed DESC, task COLLATE "C"
   LIMIT {TOP_FAILING})
), durations AS (
  SELECT task, sum(duration_sum_ms) AS duration_sum_ms, {_summed_histogram("duration")} AS duration
  FROM chrono_execution_rollup
  WHERE tenant_id = %s AND task IN (SELECT task FROM shown) AND minute >= %s
  GROUP BY task
)
SELECT c.task, c.succeeded, c.failed, d.duration_sum_ms, d.duration
FROM counts c JOIN shown USING (task) LEFT JOIN durations d USING (task)
"""  # nosec B608

# Work that should have moved and has not, counted through the partial indexes on RUNNING and
# RETRY_WAIT and never past STUCK_COUNT_LIMIT: an outage that leaves a million retries overdue
# costs this statement no more than a thousand.
STUCK_COUNT_LIMIT = 1_000
_STUCK_SQL = """
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM chrono_execution
     WHERE status = 'RUNNING' AND lease_expires_at < %s AND (%s::uuid IS NULL OR tenant_id = %s)
     LIMIT %s) lease_expired),
  (SELECT count(*) FROM (SELECT 1 FROM chrono_execution
     WHERE status = 'RETRY_WAIT' AND retry_at < %s AND (%s::uuid IS NULL OR tenant_id = %s)
     LIMIT %s) retry_overdue)
"""


def _histogram(summed: list[int | None] | None) -> list[int] | None:
    """A summed histogram as counts (a bucket no row of the group had sums to NULL)."""
    return None if summed is None else [int(count or 0) for count in summed]


def _minutes(now: datetime) -> list[datetime]:
    last = now.replace(second=0, microsecond=0)
    return [last - timedelta(minutes=n) for n in range(WINDOW_MINUTES - 1, -1, -1)]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def fetch_results(statements: list[tuple[str, list[object]]]) -> list[list[tuple]]:
    """The rows of each of ``statements`` (SQL, parameters), sent to PostgreSQL as one query:
    one round trip, where a busy machine makes each round trip wait for the server's process
    to be scheduled. (Django's psycopg cursors bind parameters client-side, so one query may
    hold several statements; each gives a result set.)"""
    sql = ";\n".join(statement for statement, _ in statements)
    parameters = [value for _, values in statements for value in values]
    with connection.cursor() as cursor:
        cursor.execute(sql, parameters)
        results = [cursor.fetchall()]
        while cursor.nextset():
            results.append(cursor.fetchall())
    return results


def series_query(tenant_id: str, now: datetime) -> tuple[str, list[object]]:
    return _SERIES_SQL, [tenant_id, ALL_TASKS, _minutes(now)[0]]


def minute_series(rows: list[tuple], now: datetime) -> list[dict]:
    """Counts and lateness percentiles of each of the last 60 minutes (zeros where nothing
    happened, so the charts' time axis has no holes), from :func:`series_query`'s rows."""
    by_minute = {row[0]: row for row in rows}
    points = []
    for minute in _minutes(now):
        row = by_minute.get(minute)
        counts = (0, 0, 0, 0) if row is None else tuple(int(v or 0) for v in row[1:5])
        dispatch = _histogram(row[5]) if row else None
        start = _histogram(row[6]) if row else None
        points.append({
            "minute": minute.isoformat(),
            "dispatched": counts[0], "started": counts[1],
            "succeeded": counts[2], "failed": counts[3],
            "dispatch_p50_ms": _round(dispatch and quantile_ms(dispatch, 0.5)),
            "dispatch_p99_ms": _round(dispatch and quantile_ms(dispatch, 0.99)),
            "start_p50_ms": _round(start and quantile_ms(start, 0.5)),
            "start_p99_ms": _round(start and quantile_ms(start, 0.99)),
        })
    return points


def tasks_query(tenant_id: str, now: datetime) -> tuple[str, list[object]]:
    since = _minutes(now)[0]
    return _TASKS_SQL, [tenant_id, ALL_TASKS, since, tenant_id, since]


def task_table(rows: list[tuple]) -> tuple[list[dict], list[dict]]:
    """Per task over the last hour: runs, failures, failure rate, duration p50/p95 and mean;
    the :data:`TOP_TASKS` with the most runs, and the :data:`TOP_FAILING` with the most
    failures (ties broken by name, so the tables do not flicker between polls), from
    :func:`tasks_query`'s rows (those tasks only)."""
    shown = {}
    for task, succeeded, failed, total_ms, summed in rows:
        succeeded, failed = int(succeeded), int(failed)
        histogram = _histogram(summed)
        shown[task] = {
            "task": task,
            "succeeded": succeeded,
            "failed": failed,
            "failure_rate": round(failed / (succeeded + failed), 4),
            "duration_p50_ms": _round(histogram and quantile_ms(histogram, 0.5)),
            "duration_p95_ms": _round(histogram and quantile_ms(histogram, 0.95)),
            "duration_mean_ms": round(int(total_ms or 0) / (succeeded + failed), 1),
        }
    busiest = sorted(shown.values(), key=lambda t: (-(t["succeeded"] + t["failed"]), t["task"]))
    failing = sorted((t for t in shown.values() if t["failed"]),
                     key=lambda t: (-t["failed"], t["task"]))
    return busiest[:TOP_TASKS], failing[:TOP_FAILING]


def workers(now: datetime, heartbeat_interval_s: float) -> list[dict]:
    """Workers that heartbeated in the last hour, with their state and what each is running
    now."""
    running = dict(
        Execution.objects.filter(status=ExecutionStatus.RUNNING)
        .values_list("worker_id").annotate(n=Count("execution_id")).order_by()
    )
    recent = Worker.objects.filter(last_heartbeat_at__gte=now - timedelta(hours=1))
    silent_after = timedelta(seconds=3 * heartbeat_interval_s)
    shown = []
    for w in recent.order_by("-last_heartbeat_at")[:MAX_WORKERS]:
        state = w.state(now=now, silent_after=silent_after)
        shown.append({
            "worker_id": w.worker_id,
            "queues": w.queue_name,
            "hostname": w.hostname,
            "heartbeat_age_s": round((now - w.last_heartbeat_at).total_seconds(), 1),
            "healthy": state == WorkerState.UP,
            # up, stopped (a warm shutdown: a deploy, a scale-down) or lost (stopped
            # heartbeating without a final heartbeat): only a lost worker is a problem.
            "state": str(state),
            "running": running.get(w.worker_id, 0),
        })
    return shown


def stuck_query(now: datetime, tenant_id: str | None) -> tuple[str, list[object]]:
    """Running executions whose lease expired (the reaper has not caught up) and retries
    overdue by a minute (their sender died), each counted up to :data:`STUCK_COUNT_LIMIT`."""
    overdue = now - timedelta(minutes=1)
    return _STUCK_SQL, [now, tenant_id, tenant_id, STUCK_COUNT_LIMIT,
                        overdue, tenant_id, tenant_id, STUCK_COUNT_LIMIT]


def stuck_work(rows: list[tuple]) -> dict:
    (lease_expired, retry_overdue), = rows
    return {"lease_expired": lease_expired, "retry_overdue": retry_overdue,
            "counted_up_to": STUCK_COUNT_LIMIT}


def pending_timers() -> int | None:
    try:
        return timer_store().pending_count()
    except redis.RedisError:
        return None


def dashboard_data(*, tenant_id: str | None, heartbeat_interval_s: float,
                   now: datetime | None = None) -> dict:
    """Everything the dashboard draws; ``tenant_id`` None is the whole platform. A tenant's
    figures take one round trip to PostgreSQL (:func:`fetch_results`); the platform's, two
    more (the workers) and the queue panel's."""
    now = now or timezone.now()
    rollup_tenant = tenant_id or ALL_TENANTS
    series_rows, task_rows, job_rows, stuck_rows = fetch_results([
        series_query(rollup_tenant, now),
        tasks_query(rollup_tenant, now),
        job_counts.jobs_by_status_query(tenant_id),
        stuck_query(now, tenant_id),
    ])
    tasks, failing = task_table(task_rows)
    live_workers = workers(now, heartbeat_interval_s) if tenant_id is None else []
    return {
        "generated_at": now.isoformat(),
        "window_minutes": WINDOW_MINUTES,
        "series": minute_series(series_rows, now),
        "tasks": tasks,
        "top_failing": failing,
        "jobs_by_status": job_counts.jobs_by_status_from(job_rows),
        "stuck": stuck_work(stuck_rows),
        # Platform-wide facts: shared workers, queues and one timer store serve every tenant
        # (a queue's depth counts every tenant's messages).
        "workers": live_workers,
        "timers_pending": pending_timers() if tenant_id is None else None,
        "queues": None if tenant_id is not None else queues_panel(
            q for w in live_workers if w["healthy"] for q in w["queues"].split(",") if q),
    }
