"""``chrono bench dispatch``: one-time jobs due at a steady rate, fired by real beat replicas.

Schedules ``--jobs`` one-time jobs whose fire times are spread evenly at ``--rate`` per second,
runs ``--replicas`` beat replicas and (unless ``--no-worker``) a Celery worker, waits until every
job was dispatched (and started), and reports from the executions table:

* ``dispatch_lateness_ms``: confirmed publish time minus target time;
* ``start_lateness_ms``: worker start time minus target time;
* ``rate_per_s``: jobs dispatched per second of dispatch activity (first target to last
  confirm) — the offered rate when the replicas keep up, their ceiling when they do not.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from django.db.models import F, Max, Min

from bench.common import (
    delete_queue,
    ensure_platform_ready,
    new_queue,
    process_group,
    summarize_ms,
    wait_for_beat,
    wait_for_worker,
    wait_until,
)
from chronoadmin.models import Tenant
from scheduler import api
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.models import Execution, Job

BENCH_TENANT = "bench"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench dispatch")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1_000.0, help="jobs due per second")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--no-worker", action="store_true",
                        help="measure dispatch alone (workers cannot drain high rates)")
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0)
    return parser.parse_args(argv)


def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    ensure_platform_ready()
    tenant, _ = Tenant.objects.get_or_create(slug=BENCH_TENANT, defaults={"name": "Benchmarks"})
    Job.objects.filter(tenant=tenant).delete()
    queue = new_queue("bench-dispatch")
    group = process_group("dispatch", CHRONO_DEFAULT_QUEUE=queue)
    try:
        for i in range(args.replicas):
            replica_id = f"bench-beat-{i}"
            beat = group.start(replica_id, ["beat", "--replica-id", replica_id])
            wait_for_beat(beat, replica_id)
        if not args.no_worker:
            hostname = f"bench-worker@{queue}"
            worker = group.start("worker", ["worker", "--queues", queue, "--concurrency",
                                            str(args.worker_concurrency), "--hostname", hostname,
                                            "--loglevel", "WARNING"])
            wait_for_worker(worker, hostname)
        start_ms = now_ms() + 3_000 + args.jobs // 10
        step_ms = 1_000.0 / args.rate
        fire_times = [ms_to_datetime(start_ms + int(i * step_ms)) for i in range(args.jobs)]
        api.schedule_once_many("chrono.noop", tenant=tenant, fire_times=fire_times, queue=queue)
        field = "dispatched_at" if args.no_worker else "started_at"
        executions = Execution.objects.for_tenant(tenant)
        done = wait_until(
            lambda: executions.filter(**{f"{field}__isnull": False}).count() >= args.jobs,
            timeout_s=args.timeout + args.jobs / args.rate,
            interval_s=1.0,
        )
        return _report(args, executions, done)
    finally:
        group.stop_all()
        delete_queue(queue)
        Job.objects.filter(tenant=tenant).delete()


def _report(args: argparse.Namespace, executions, done: bool) -> dict[str, object]:
    rows = executions.annotate(
        dispatch=F("dispatched_at") - F("scheduled_for"),
        start=F("started_at") - F("scheduled_for"),
    ).values_list("dispatch", "start")
    dispatch = [d / timedelta(milliseconds=1) for d, _ in rows if d is not None]
    start = [s / timedelta(milliseconds=1) for _, s in rows if s is not None]
    span = executions.aggregate(first=Min("scheduled_for"), last=Max("dispatched_at"))
    seconds = (span["last"] - span["first"]).total_seconds() if span["last"] else 0
    duplicates = executions.count() - len({e for e in executions.values_list("job_id", flat=True)})
    return {
        "bench": "dispatch",
        "jobs": args.jobs,
        "offered_rate_per_s": args.rate,
        "replicas": args.replicas,
        "rate_per_s": round(len(dispatch) / seconds, 1) if seconds > 0 else None,
        "dispatch_lateness_ms": summarize_ms(dispatch),
        "start_lateness_ms": None if args.no_worker else summarize_ms(start),
        "dispatched": len(dispatch),
        "started": len(start),
        "lost": args.jobs - len(dispatch),
        "duplicates": duplicates,
        "completed_in_time": done,
    }
