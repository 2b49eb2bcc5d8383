"""What the live dashboard shows, as one JSON-ready dict, read from the per-minute rollups
(:mod:`scheduler.rollups`), Redis and a few small indexed queries — never a count or scan of the
executions table, which grows by millions of rows a day.

Every query here is bounded: the rollups of the last hour of one tenant (or of the platform-wide
rows), the jobs by status from the counts triggers keep (:mod:`scheduler.job_counts`: a few rows
per tenant, never a count of the jobs table), the running executions (at most the workers'
concurrency, through the partial index on RUNNING), overdue retries and expired leases (partial
indexes), the workers table; and, for the platform view, the queues' depth and consumers from
RabbitMQ (:mod:`chronoadmin.dashboard_queues`: cached, and never waited for long).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import redis
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from chronoadmin.dashboard_queues import queues_panel
from reaper.models import Worker
from scheduler import job_counts
from scheduler.models import Execution, ExecutionStatus
from scheduler.rollups import ALL_TASKS, ALL_TENANTS, BUCKETS, quantile_ms
from scheduler.timers import timer_store

WINDOW_MINUTES = 60
TOP_TASKS = 20
TOP_FAILING = 10
MAX_WORKERS = 100


@dataclass(frozen=True)
class MinutePoint:
    """One minute of the charts."""

    minute: str
    dispatched: int
    started: int
    succeeded: int
    failed: int
    dispatch_p50_ms: float | None
    dispatch_p99_ms: float | None
    start_p50_ms: float | None
    start_p99_ms: float | None



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

# The task table in two steps: every task's counts (two integer sums over the hour's rows),
# then the duration histograms of only the tasks shown (the top by runs and by failures): on
# the platform's 12,000 rows of an hour (200 tasks) 3.4 + 3.4 ms, where folding every task's
# histogram took 15 ms.
_TASK_COUNTS_SQL = """
SELECT task, sum(succeeded), sum(failed)
FROM chrono_execution_rollup
WHERE tenant_id = %s AND task <> %s AND minute >= %s
GROUP BY task
"""

_TASK_DURATIONS_SQL = f"""
SELECT task, sum(duration_sum_ms), {_summed_histogram("duration")}
FROM chrono_execution_rollup
WHERE tenant_id = %s AND task = ANY(%s) AND minute >= %s
GROUP BY task
"""  # nosec B608


def _histogram(summed: list[int | None] | None) -> list[int] | None:
    """A summed histogram as counts (a bucket no row of the group had sums to NULL)."""
    return None if summed is None else [int(count or 0) for count in summed]


def _minutes(now: datetime) -> list[datetime]:
    last = now.replace(second=0, microsecond=0)
    return [last - timedelta(minutes=n) for n in range(WINDOW_MINUTES - 1, -1, -1)]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def minute_series(tenant_id: str, now: datetime) -> list[dict]:
    """Counts and lateness percentiles of each of the last 60 minutes (zeros where nothing
    happened, so the charts' time axis has no holes)."""
    minutes = _minutes(now)
    with connection.cursor() as cursor:
        cursor.execute(_SERIES_SQL, [tenant_id, ALL_TASKS, minutes[0]])
        rows = {row[0]: row for row in cursor.fetchall()}
    points = []
    for minute in minutes:
        row = rows.get(minute)
        counts = (0, 0, 0, 0) if row is None else tuple(int(v or 0) for v in row[1:5])
        dispatch = _histogram(row[5]) if row else None
        start = _histogram(row[6]) if row else None
        points.append(asdict(MinutePoint(
            minute.isoformat(), *counts,
            _round(dispatch and quantile_ms(dispatch, 0.5)),
            _round(dispatch and quantile_ms(dispatch, 0.99)),
            _round(start and quantile_ms(start, 0.5)),
            _round(start and quantile_ms(start, 0.99)),
        )))
    return points


def task_table(tenant_id: str, now: datetime) -> tuple[list[dict], list[dict]]:
    """Per task over the last hour: runs, failures, failure rate, duration p50/p95 and mean;
    the :data:`TOP_TASKS` with the most runs, and the :data:`TOP_FAILING` with the most
    failures (ties broken by name, so the tables do not flicker between polls)."""
    since = _minutes(now)[0]
    with connection.cursor() as cursor:
        cursor.execute(_TASK_COUNTS_SQL, [tenant_id, ALL_TASKS, since])
        counts = {task: (int(ok), int(failed)) for task, ok, failed in cursor.fetchall()
                  if int(ok) + int(failed)}
        busiest = sorted(counts, key=lambda t: (-sum(counts[t]), t))[:TOP_TASKS]
        failing = sorted((t for t in counts if counts[t][1]),
                         key=lambda t: (-counts[t][1], t))[:TOP_FAILING]
        shown = sorted(set(busiest) | set(failing))
        durations: dict[str, tuple[int, list[int] | None]] = {}
        if shown:
            cursor.execute(_TASK_DURATIONS_SQL, [tenant_id, shown, since])
            durations = {task: (int(total), _histogram(summed))
                         for task, total, summed in cursor.fetchall()}
    rows = {}
    for task in shown:
        succeeded, failed = counts[task]
        total_ms, histogram = durations.get(task, (0, None))
        rows[task] = {
            "task": task,
            "succeeded": succeeded,
            "failed": failed,
            "failure_rate": round(failed / (succeeded + failed), 4),
            "duration_p50_ms": _round(histogram and quantile_ms(histogram, 0.5)),
            "duration_p95_ms": _round(histogram and quantile_ms(histogram, 0.95)),
            "duration_mean_ms": round(total_ms / (succeeded + failed), 1),
        }
    return [rows[t] for t in busiest], [rows[t] for t in failing]


def workers(now: datetime, heartbeat_interval_s: float) -> list[dict]:
    """Workers that heartbeated in the last hour, with what each is running now."""
    running = dict(
        Execution.objects.filter(status=ExecutionStatus.RUNNING)
        .values_list("worker_id").annotate(n=Count("execution_id")).order_by()
    )
    recent = Worker.objects.filter(last_heartbeat_at__gte=now - timedelta(hours=1))
    return [
        {
            "worker_id": w.worker_id,
            "queues": w.queue_name,
            "hostname": w.hostname,
            "heartbeat_age_s": round((now - w.last_heartbeat_at).total_seconds(), 1),
            "healthy": w.is_healthy
            and (now - w.last_heartbeat_at).total_seconds() < 3 * heartbeat_interval_s,
            "running": running.get(w.worker_id, 0),
        }
        for w in recent.order_by("-last_heartbeat_at")[:MAX_WORKERS]
    ]


def stuck_work(now: datetime, tenant_id: str | None) -> dict:
    """Work that should have moved and has not: running executions whose lease expired (the
    reaper has not caught up) and retries overdue by a minute (their sender died)."""
    executions = Execution.objects.all()
    if tenant_id is not None:
        executions = executions.filter(tenant_id=tenant_id)
    return {
        "lease_expired": executions.filter(status=ExecutionStatus.RUNNING,
                                           lease_expires_at__lt=now).count(),
        "retry_overdue": executions.filter(status=ExecutionStatus.RETRY_WAIT,
                                           retry_at__lt=now - timedelta(minutes=1)).count(),
    }


def pending_timers() -> int | None:
    try:
        return timer_store().pending_count()
    except redis.RedisError:
        return None


def dashboard_data(*, tenant_id: str | None, heartbeat_interval_s: float,
                   now: datetime | None = None) -> dict:
    """Everything the dashboard draws; ``tenant_id`` None is the whole platform."""
    now = now or timezone.now()
    rollup_tenant = tenant_id or ALL_TENANTS
    tasks, failing = task_table(rollup_tenant, now)
    live_workers = workers(now, heartbeat_interval_s) if tenant_id is None else []
    return {
        "generated_at": now.isoformat(),
        "window_minutes": WINDOW_MINUTES,
        "series": minute_series(rollup_tenant, now),
        "tasks": tasks,
        "top_failing": failing,
        "jobs_by_status": job_counts.jobs_by_status(tenant_id),
        "stuck": stuck_work(now, tenant_id),
        # Platform-wide facts: shared workers, queues and one timer store serve every tenant
        # (a queue's depth counts every tenant's messages).
        "workers": live_workers,
        "timers_pending": pending_timers() if tenant_id is None else None,
        "queues": None if tenant_id is not None else queues_panel(
            q for w in live_workers if w["healthy"] for q in w["queues"].split(",") if q),
    }
