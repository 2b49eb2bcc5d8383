"""``chrono bench drain``: how fast one Celery worker runs and records a backlog of Chrono jobs.

A beat replica dispatches ``--jobs`` no-op jobs into the benchmark's queue with no consumer; the
beat is stopped; then one worker (``--pool`` x ``--concurrency``) drains the queue. Reports:

* ``rate_per_s``: executions recorded finished per second, first start to last finish;
* ``cpu_ms_per_job``: CPU time per job spent by the worker's processes, PostgreSQL and RabbitMQ
  during the drain (from /proc), which says where a job's cost goes on this machine.

Start lateness at a given rate is the queueing this rate implies: when jobs arrive faster than
the worker drains them, the backlog (and so the lateness) grows without bound.
"""

from __future__ import annotations

import argparse

from django.db.models import Count, Max, Min

from bench.ceilings import reports_ceilings
from bench.common import cpu_by_role, queue_depth
from bench.platform import bench_platform
from localservices.processes import wait_until


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench drain")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--pool", default="prefork", choices=["prefork", "threads"])
    parser.add_argument("--timeout", type=float, default=300.0)
    return parser.parse_args(argv)


@reports_ceilings(figure="rate_per_s", of="cpu_loops_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    with bench_platform("drain") as platform:
        platform.start_beat("bench-beat-0")
        platform.schedule_steady(args.jobs, rate=5_000.0, lead_ms=1_000)
        wait_until(lambda: platform.executions.filter(dispatched_at__isnull=False).count()
                   >= args.jobs, timeout_s=30 + args.jobs / 1_000, interval_s=0.5)
        platform.beats.pop("bench-beat-0").stop()
        queued = _depth(platform.queue)
        before = cpu_by_role()
        worker = platform.start_worker(args.concurrency, args.pool)
        done = wait_until(
            lambda: platform.executions.filter(finished_at__isnull=False).count() >= args.jobs,
            timeout_s=args.timeout, interval_s=0.5)
        after = cpu_by_role(worker_pid=worker.pid)
        span = platform.executions.aggregate(first=Min("started_at"), last=Max("finished_at"))
        finished = platform.executions.filter(finished_at__isnull=False).count()
        statuses = dict(platform.executions.values_list("status").annotate(n=Count("pk")))
    seconds = (span["last"] - span["first"]).total_seconds() if span["last"] else 0
    return {
        "bench": "drain",
        "jobs": args.jobs,
        "worker": f"{args.pool} x{args.concurrency}",
        "queued": queued,
        "finished": finished,
        "rate_per_s": round(finished / seconds, 1) if seconds > 0 else None,
        "cpu_ms_per_job": {role: round((after.get(role, 0) - before.get(role, 0)) * 1000
                                       / max(finished, 1), 3)
                           for role in sorted(set(after) | set(before))},
        "statuses": statuses,
        "completed_in_time": done,
    }


def _depth(queue: str) -> int:
    import amqp

    try:
        return queue_depth(queue)
    except amqp.NotFound:  # declared by the beat's first publish
        return 0
