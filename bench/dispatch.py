"""``chrono bench dispatch``: one-time jobs due at a steady rate, fired by real beat replicas.

Schedules ``--jobs`` one-time jobs whose fire times are spread evenly at ``--rate`` per second,
runs ``--replicas`` beat replicas and (unless ``--no-worker``) a Celery worker, waits until every
job was dispatched (and started), and reports from the executions table:

* ``dispatch_lateness_ms``: confirmed publish time minus target time;
* ``start_lateness_ms``: worker start time minus target time;
* ``rate_per_s``: jobs dispatched per second of dispatch activity (first target to last
  confirm): the offered rate when the replicas keep up, their ceiling when they do not;
* ``p99_by_second_ms``: the p99 of each second of the run.

With ``--pin`` the beat replicas and RabbitMQ's node run on CPU 0 and the worker on the other
CPUs (PostgreSQL and the rest go where the kernel puts them), as on a box where the workers are
kept off the dispatch path's core; RabbitMQ gets every core back after the run.

Before the measured jobs, ``--warmup`` jobs run at the same rate through the same processes
(just started: their connections, prepared statements and code paths are cold) and are
reported apart, as ``warmup``: the figures are those of a running platform, and what a freshly
started one does in its first seconds stays visible.

``--history-rows`` puts that many finished executions of the last ``--history-days`` days in
the table first (each past day in its own partition, today's share in today's), to show what a
table holding a platform's history costs the dispatch path; they are dropped at the end.

``--rollups off`` starts the beat replicas and the worker with ``CHRONO_BENCH_ROLLUPS_OFF=1``
(:data:`scheduler.rollups.BENCH_ROLLUPS_OFF`, a benchmark's switch, not a production option):
they then count nothing for the dashboard, so runs with ``on`` and ``off``, alternated, measure
what the rollups cost the beat and the worker per job (issue 13).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection
from django.db.models import QuerySet

from bench import retention
from bench.ceilings import reports_ceilings
from bench.common import cpu_by_role, processes_on_cpus, queue_depth, rabbitmq_pids
from bench.platform import bench_platform, lateness_report
from localservices.processes import wait_until
from scheduler import partitions
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.rollups import BENCH_ROLLUPS_OFF


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench dispatch")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1_000.0, help="jobs due per second")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--no-worker", action="store_true",
                        help="measure dispatch alone (workers cannot drain high rates)")
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--worker-pool", default="prefork", choices=["prefork", "threads"])
    parser.add_argument("--worker-nice", type=int, default=0,
                        help="lower the worker's CPU priority (it shares the cores with the beat)")
    parser.add_argument("--pin", action="store_true",
                        help="keep the beat replicas and RabbitMQ on CPU 0 and the worker on "
                             "the others (PostgreSQL and the rest go where the kernel puts "
                             "them): the worker then takes no core from the dispatch path")
    parser.add_argument("--warmup", type=int, default=2_000,
                        help="jobs run (at --rate) before the measured ones, reported apart")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--history-rows", type=int, default=0,
                        help="finished executions in the table during the run, spread over "
                             "the last --history-days days (dropped at the end)")
    parser.add_argument("--history-days", type=float, default=3.0)
    parser.add_argument("--rollups", default="on", choices=["on", "off"],
                        help="off: the beat and worker count nothing for the dashboard "
                             f"({BENCH_ROLLUPS_OFF}=1, benchmarks only), to compare with on")
    return parser.parse_args(argv)


def _pinning(pin: bool) -> tuple[set[int], set[int]]:
    """CPUs for the dispatch path (beat replicas, RabbitMQ) and for the worker."""
    if not pin:
        return set(), set()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    return {cpus[0]}, set(cpus[1:])


HISTORY_TENANT = "bench-history"


@contextmanager
def _history(rows: int, days: float) -> Iterator[int]:
    """``rows`` finished executions of a tenant of their own spread evenly over the last
    ``days`` days (up to a minute ago) while the run lasts, each past day in a partition of its
    own as the retention pass creates them ahead; none by default. Afterwards the days it
    created are dropped and its rows elsewhere deleted."""
    if rows <= 0:
        yield 0
        return
    from chronocore.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug=HISTORY_TENANT,
                                             defaults={"name": "Benchmark history"})
    end = ms_to_datetime(now_ms() - 60_000)
    start = end - timedelta(days=days)
    past = [start.date() + timedelta(days=n) for n in range((end.date() - start.date()).days)]
    created = sorted(set(past) - partitions.existing_days())
    for day in created:
        partitions.create_day(day)
    try:
        retention.fill(start, end, rows, tenant.tenant_id)
        yield rows
    finally:
        for day in created:  # only what it created: other rows of those days stay
            partitions.drop_day(day)
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM chrono_execution WHERE tenant_id = %s",
                           [tenant.tenant_id])
        tenant.delete()


@reports_ceilings(figure="rate_per_s", of="amqp_publish_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    dispatch_cpus, worker_cpus = _pinning(args.pin)
    # The processes the platform starts inherit this process's environment.
    os.environ[BENCH_ROLLUPS_OFF] = "1" if args.rollups == "off" else "0"
    with (bench_platform("dispatch") as platform,
          _history(args.history_rows, args.history_days) as history_rows,
          processes_on_cpus(rabbitmq_pids() if args.pin else [], dispatch_cpus)):
        for i in range(args.replicas):
            platform.start_beat(f"bench-beat-{i}", cpus=dispatch_cpus)
        if not args.no_worker:
            platform.start_worker(args.worker_concurrency, args.worker_pool, args.worker_nice,
                                  cpus=worker_cpus)
        pids = {"beat_pids": [b.pid for b in platform.beats.values()],
                "worker_pid": platform.worker.pid if platform.worker else None}
        field = "dispatched_at" if args.no_worker else "started_at"

        def scheduled(jobs: int) -> tuple[int, QuerySet]:
            """``jobs`` more at ``--rate``: their first fire time and their executions."""
            first_ms = platform.schedule_steady(jobs, args.rate)
            return first_ms, platform.executions.filter(
                scheduled_for__gte=ms_to_datetime(first_ms))

        def all_done(executions: QuerySet, jobs: int) -> bool:
            return executions.filter(**{f"{field}__isnull": False}).count() >= jobs

        warmup = None
        if args.warmup:
            _, warming = scheduled(args.warmup)
            wait_until(lambda: all_done(warming, args.warmup), timeout_s=args.timeout,
                       interval_s=0.5)
            warmup = lateness_report(warming, with_start=not args.no_worker, by_second=True)
        first_fire_ms, measured = scheduled(args.jobs)
        # From the first fire time: what dispatching (and running) costs, not scheduling.
        wait_until(lambda: now_ms() >= first_fire_ms, timeout_s=60, interval_s=0.01)
        before = cpu_by_role(**pids)
        done = wait_until(lambda: all_done(measured, args.jobs),
                          timeout_s=args.timeout + args.jobs / args.rate, interval_s=1.0)
        after = cpu_by_role(**pids)
        report = lateness_report(measured, with_start=not args.no_worker, by_second=True)
        # With no consumer every publish is still in the queue; with a worker, duplicates are
        # absorbed by the worker-side start and not counted here.
        duplicates = (queue_depth(platform.queue) - report["dispatched"] - args.warmup
                      if args.no_worker else None)
    return {
        "bench": "dispatch",
        "jobs": args.jobs,
        "offered_rate_per_s": args.rate,
        "replicas": args.replicas,
        "history_rows": history_rows,
        "rollups": args.rollups,
        "worker": None if args.no_worker else f"{args.worker_pool} x{args.worker_concurrency}",
        "worker_nice": args.worker_nice,
        "pinned": ({"beat_and_rabbitmq_cpus": sorted(dispatch_cpus),
                    "worker_cpus": sorted(worker_cpus)} if args.pin else None),
        **report,
        "lost": args.jobs - report["dispatched"],
        # CPU per job of each part of the platform during the run.
        "cpu_ms_per_job": {role: round((after[role] - before.get(role, 0)) * 1000 / args.jobs, 3)
                           for role in sorted(after)},
        "warmup": warmup and {"jobs": args.warmup,
                              **{k: warmup[k] for k in ("dispatch_lateness_ms",
                                                        "start_lateness_ms",
                                                        "p99_by_second_ms")}},
        "duplicates": duplicates,
        "completed_in_time": done,
    }
