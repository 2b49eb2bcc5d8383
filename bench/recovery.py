"""``chrono bench recovery``: workers killed with SIGKILL in the middle of jobs.

Runs a beat, a reaper and ``--workers`` workers (one slot each) with short leases, schedules
``--jobs`` jobs that each sleep ``--job-seconds``, and every time a batch is running kills one
worker's process group (parent and pool child) and starts a fresh worker in its place. Reports,
for the attempts that were running on a killed worker, ``recovery_ms`` (kill to the next attempt
starting) and ``detection_ms`` (kill to the reaper declaring the attempt lost, plus its retry
delay of at most 100 ms), and over all jobs ``lost`` (never succeeded) and ``duplicates``
(task bodies that ran to their end more than once: a killed run never finishes, so 0).
"""

from __future__ import annotations

import argparse
import signal
import time

from bench.ceilings import reports_ceilings
from bench.common import summarize_ms, wait_for_worker
from bench.platform import bench_platform
from chronoadmin.builtin_tasks import BENCH_RUNS_KEY
from chronocore.redis_client import redis_client
from localservices.processes import wait_until
from scheduler import api
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.models import Execution
from scheduler.retry import RetryPolicy


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench recovery")
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--spacing-seconds", type=float, default=1.0,
                        help="between job fire times; keep the workers below capacity")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--job-seconds", type=float, default=2.0)
    parser.add_argument("--lease-ttl-ms", type=int, default=3_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    return parser.parse_args(argv)


@reports_ceilings()
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    settings = {"execution_lease_ttl_ms": args.lease_ttl_ms,
                "worker_heartbeat_interval_ms": args.heartbeat_interval_ms,
                "reaper_interval_ms": 250}
    env = {f"CHRONO_{k.upper()}": str(v) for k, v in settings.items()}
    with bench_platform("recovery") as platform:
        redis_client().delete(BENCH_RUNS_KEY)
        platform.start_beat("bench-beat-0")
        platform.group.start("reaper", ["reaper"], env=env)
        workers = [_start_worker(platform, i, env) for i in range(args.workers)]
        for i in range(args.jobs):
            api.schedule_once("chrono.bench.counted_sleep", tenant=platform.tenant,
                              delay=0.5 + i * args.spacing_seconds,
                              kwargs={"seconds": args.job_seconds}, queue=platform.queue,
                              retry=RetryPolicy(max_attempts=6, initial_delay_ms=100))
        kills: list[tuple[int, set[str]]] = []
        for n in range(args.kills):
            running = list(platform.executions.filter(status="RUNNING")
                           .values_list("execution_id", "worker_id"))
            if not running:
                time.sleep(0.5)
                continue
            victim_name = running[0][1]
            index = next(i for i, (_, name) in enumerate(workers) if name == victim_name)
            victim, _ = workers[index]
            kills.append((now_ms(), {str(e) for e, w in running if w == victim_name}))
            victim.signal_group(signal.SIGKILL)
            workers[index] = _start_worker(platform, args.workers + n, env)
            time.sleep(args.job_seconds)
        done = wait_until(
            lambda: platform.executions.filter(status="SUCCEEDED").count() >= args.jobs,
            timeout_s=120, interval_s=1.0)
        recovery, detection = [], []
        for killed_ms, execution_ids in kills:
            for execution in Execution.objects.filter(execution_id__in=execution_ids):
                if execution.attempt > 1 and execution.started_at is not None:
                    recovery.append(datetime_to_ms(execution.started_at) - killed_ms)
                if execution.retry_at is not None:  # set when the reaper declared it lost
                    detection.append(datetime_to_ms(execution.retry_at) - killed_ms)
        runs = {k.decode(): int(v) for k, v in redis_client().hgetall(BENCH_RUNS_KEY)
                .items()}
        succeeded = platform.executions.filter(status="SUCCEEDED").count()
    return {
        "bench": "recovery",
        "jobs": args.jobs,
        "kills": len(kills),
        "attempts_killed": sum(len(ids) for _, ids in kills),
        "recovery_ms": summarize_ms(recovery),
        "detection_ms": summarize_ms(detection),
        "lost": args.jobs - succeeded,
        "duplicates": sum(n - 1 for n in runs.values() if n > 1),
        "execution_lease_ttl_ms": args.lease_ttl_ms,
        "worker_heartbeat_interval_ms": args.heartbeat_interval_ms,
        "dead_after_missed_heartbeats": 3,
        "completed_in_time": done,
    }


def _start_worker(platform, index: int, env: dict[str, str]):
    hostname = f"bench-worker-{index}@{platform.queue}"
    worker = platform.group.start(f"worker-{index}", [
        "worker", "--queues", platform.queue, "--concurrency", "1", "--hostname", hostname,
        "--loglevel", "WARNING"], env=env)
    wait_for_worker(worker, hostname)
    return worker, hostname

