"""A platform for one benchmark run: services, a tenant, a queue, beat replicas, a worker.

Benchmarks use the Redis database ``BENCH_REDIS_DB`` (9, or ``CHRONO_BENCH_REDIS_DB``: two
sessions benchmarking on one server each take their own; flushed before and after), their own
tenant (its jobs deleted before and after) and their own queue (deleted after), so they neither
disturb nor are disturbed by a demo running on the same machine.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

from django.db.models import F, Max, Min, QuerySet

from bench.common import (
    delete_queue,
    ensure_platform_ready,
    new_queue,
    process_group,
    summarize_ms,
    wait_for_beat,
    wait_for_worker,
)
from chronocore import grants
from chronocore.config import DEFAULT_REDIS_URL, get_config
from chronocore.models import Tenant
from chronocore.redis_client import redis_client
from localservices.processes import ChronoProcess, ProcessGroup
from scheduler import api, timers
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.models import Execution

BENCH_TENANT = "bench"
BENCH_REDIS_DB = int(os.environ.get("CHRONO_BENCH_REDIS_DB", "9"))


def use_bench_redis_db(db: int = BENCH_REDIS_DB) -> None:
    """Point this process (and the children it starts) at a benchmark's Redis database (on a
    Redis Cluster, whose only database is 0, the cluster named by REDIS_URL: the benchmark's
    own, started with `chrono services cluster-up redis`)."""
    if get_config().redis_cluster:
        return
    parts = urlsplit(os.environ.get("REDIS_URL", DEFAULT_REDIS_URL))
    os.environ["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{db}"))
    get_config.cache_clear()
    redis_client.cache_clear()
    timers.timer_store.cache_clear()


@dataclass
class BenchPlatform:
    tenant: Tenant
    queue: str
    group: ProcessGroup
    beats: dict[str, ChronoProcess] = field(default_factory=dict)
    worker: ChronoProcess | None = None

    @property
    def executions(self) -> QuerySet:
        return Execution.objects.for_tenant(self.tenant)

    def start_beat(self, replica_id: str, *, cpus: Collection[int] | None = None,
                   **env: object) -> ChronoProcess:
        extra = {f"CHRONO_{k.upper()}": str(v) for k, v in env.items()}
        beat = self.group.start(replica_id, ["beat", "--replica-id", replica_id], env=extra,
                                cpus=cpus)
        wait_for_beat(beat, replica_id)
        self.beats[replica_id] = beat
        return beat

    def start_worker(self, concurrency: int = 2, pool: str = "prefork",
                     nice: int = 0, cpus: Collection[int] | None = None) -> ChronoProcess:
        hostname = f"bench-worker@{self.queue}"
        worker = self.group.start("worker", ["worker", "--queues", self.queue, "--concurrency",
                                             str(concurrency), "--pool", pool,
                                             "--hostname", hostname, "--loglevel", "WARNING"],
                                  nice=nice, cpus=cpus)
        wait_for_worker(worker, hostname)
        self.worker = worker
        return worker

    def start_reaper(self, **env: object) -> ChronoProcess:
        """A ``chrono reaper`` (it also keeps the dashboard's all-tenants snapshot); returns
        once its loop started."""
        extra = {f"CHRONO_{k.upper()}": str(v) for k, v in env.items()}
        reaper = self.group.start("reaper", ["reaper"], env=extra)
        reaper.wait_until(lambda: "reaper started" in reaper.log_tail(), timeout_s=30,
                          what="starting")
        return reaper

    def schedule_steady(self, jobs: int, rate: float, *, lead_ms: int = 3_000,
                        task: str = "chrono.noop", queue: str | None = None) -> int:
        """``jobs`` one-time jobs of ``task`` (Chrono's no-op) due evenly at ``rate`` per
        second, on ``queue`` (the platform's); returns the first fire time (epoch ms)."""
        start_ms = now_ms() + lead_ms + jobs // 10
        step_ms = 1_000.0 / rate
        for offset in range(0, jobs, 20_000):
            fire_times = [ms_to_datetime(start_ms + int(i * step_ms))
                          for i in range(offset, min(jobs, offset + 20_000))]
            api.schedule_once_many(task, tenant=self.tenant, fire_times=fire_times,
                                   queue=queue or self.queue)
        return start_ms


@contextmanager
def bench_platform(name: str) -> Iterator[BenchPlatform]:
    use_bench_redis_db()
    ensure_platform_ready()
    redis_client().flushdb()
    tenant, _ = Tenant.objects.get_or_create(slug=BENCH_TENANT, defaults={"name": "Benchmarks"})
    grants.grant(tenant, "*", "*", by="bench")  # the benchmarks run their own tasks everywhere
    clean_up(tenant)
    queue = new_queue(f"bench-{name}")
    platform = BenchPlatform(tenant=tenant, queue=queue,
                             group=process_group(name, CHRONO_DEFAULT_QUEUE=queue))
    try:
        yield platform
    finally:
        platform.group.stop_all()
        delete_queue(queue)
        clean_up(tenant)


def clean_up(tenant: Tenant) -> None:
    """Delete a benchmark tenant's rows (and vacuum them away now, not during the next run),
    and empty the benchmark's Redis database."""
    from django.db import connection

    from search.models import AuditEvent

    # Raw deletes: the ORM's cascade would load every job id first. The audit rows go too, so
    # an indexer running on this machine does not ship millions of benchmark events. The
    # vacuum reclaims the million dead rows now: left to autovacuum, it runs whenever it comes
    # round, possibly during the next benchmark, taking a share of its two cores.
    tables = (AuditEvent._meta.db_table, "chrono_execution", "chrono_job")
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(
                f"DELETE FROM {table} WHERE tenant_id = %s",  # nosec B608 # the tuple above
                [tenant.tenant_id],
            )
        for table in tables:
            cursor.execute(f"VACUUM {table}")
    redis_client().flushdb()


def lateness_report(executions: QuerySet, *, with_start: bool,
                    by_second: bool = False) -> dict[str, object]:
    """Dispatch and start lateness of ``executions``, and the dispatch rate achieved; with
    ``by_second``, also the p99 of each second of target times (a slow first second, a
    stall mid-run or a backlog growing show there, and not in the whole run's percentiles)."""
    rows = list(executions.annotate(
        dispatch=F("dispatched_at") - F("scheduled_for"),
        start=F("started_at") - F("scheduled_for"),
    ).values_list("scheduled_for", "dispatch", "start"))
    dispatch = [d / timedelta(milliseconds=1) for _, d, _ in rows if d is not None]
    start = [s / timedelta(milliseconds=1) for _, _, s in rows if s is not None]
    span = executions.aggregate(first=Min("scheduled_for"), last=Max("dispatched_at"))
    seconds = (span["last"] - span["first"]).total_seconds() if span["last"] else 0
    report: dict[str, object] = {
        "rate_per_s": round(len(dispatch) / seconds, 1) if seconds > 0 else None,
        "dispatch_lateness_ms": summarize_ms(dispatch),
        "start_lateness_ms": summarize_ms(start) if with_start else None,
        "dispatched": len(dispatch),
        "started": len(start),
    }
    if by_second and rows:
        report["p99_by_second_ms"] = {
            "dispatch": _p99_by_second(rows, 1, span["first"]),
            **({"start": _p99_by_second(rows, 2, span["first"])} if with_start else {}),
        }
    return report


def _p99_by_second(rows: list[tuple], column: int, first: datetime) -> list[float | None]:
    seconds: dict[int, list[float]] = {}
    for row in rows:
        second = int((row[0] - first).total_seconds())
        if row[column] is not None:
            seconds.setdefault(second, []).append(row[column] / timedelta(milliseconds=1))
    return [(summarize_ms(seconds[s]) or {}).get("p99") if s in seconds else None
            for s in range(max(seconds, default=-1) + 1)]
