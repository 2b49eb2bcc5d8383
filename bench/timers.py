"""``chrono bench timers --count N``: the timer store with N timers pending.

Loads N timers spread over the next 30 days (starting an hour out, so none fires during the run)
straight into the timer store in pipelined batches, measures the load rate and Redis memory per
timer, then measures dispatch lateness of a steady stream of real one-time jobs while the N timers
stay pending. The N timers have no job rows: this measures the timer store and the beat under
that many pending timers, not PostgreSQL with N jobs (``chrono bench ingest`` covers writing jobs).
"""

from __future__ import annotations

import argparse
import os
import random
import time

from bench.ceilings import reports_ceilings
from bench.platform import bench_platform, lateness_report
from localservices.processes import wait_until
from scheduler.clock import now_ms
from scheduler.timers import timer_store

LOAD_BATCH = 20_000
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench timers")
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--probe-jobs", type=int, default=5_000)
    parser.add_argument("--probe-rate", type=float, default=1_000.0)
    return parser.parse_args(argv)


def _timer_id() -> str:
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{h[16:20]}-{h[20:]}"


def load_timers(count: int) -> float:
    """Add ``count`` far-future timers; returns the seconds it took."""
    store = timer_store()
    base = now_ms() + HOUR_MS
    started = time.monotonic()
    for offset in range(0, count, LOAD_BATCH):
        size = min(LOAD_BATCH, count - offset)
        store.add([(_timer_id(), base + random.randrange(30 * DAY_MS)) for _ in range(size)])
    return time.monotonic() - started


@reports_ceilings(figure="load_rate_per_s", of="cpu_loops_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    with bench_platform("timers") as platform:
        client = timer_store().client
        memory_before = client.info("memory")["used_memory"]
        load_s = load_timers(args.count)
        memory_after = client.info("memory")["used_memory"]
        pending = timer_store().pending_count()
        platform.start_beat("bench-beat-0")
        platform.schedule_steady(args.probe_jobs, args.probe_rate)
        done = wait_until(
            lambda: platform.executions.filter(dispatched_at__isnull=False).count()
            >= args.probe_jobs,
            timeout_s=120 + args.probe_jobs / args.probe_rate,
            interval_s=1.0,
        )
        report = lateness_report(platform.executions, with_start=False)
    return {
        "bench": "timers",
        "count": args.count,
        "pending_timers": pending,
        "bytes_per_timer": round((memory_after - memory_before) / args.count, 1),
        "load_rate_per_s": round(args.count / load_s),
        "probe_jobs": args.probe_jobs,
        "probe_rate_per_s": args.probe_rate,
        "dispatch_lateness_ms": report["dispatch_lateness_ms"],
        "lost": args.probe_jobs - report["dispatched"],
        "completed_in_time": done,
    }
