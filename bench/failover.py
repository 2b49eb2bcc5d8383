"""``chrono bench failover``: replicas dispatching steadily, one killed with SIGKILL.

Runs ``--replicas`` beat replicas with no worker (so every publish stays countable in the queue),
schedules one-time jobs at ``--rate`` for ``--seconds``, kills one replica with SIGKILL after
``--kill-after`` seconds, waits until every job was dispatched, and reports:

* ``failover_gap_ms``: from the kill to the first dispatch of a shard the killed replica held;
* ``moved_shard_lateness_ms``: dispatch lateness of the jobs of those shards due after the kill;
* ``lost``: jobs never dispatched; ``duplicates``: publishes beyond one per occurrence.
"""

from __future__ import annotations

import argparse
import signal
import time
from datetime import timedelta

from bench.ceilings import reports_ceilings
from bench.common import queue_depth, summarize_ms
from bench.platform import bench_platform
from chronocore.config import get_config
from localservices.processes import wait_until
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.sharding import shard_for


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench failover")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--kill-after", type=float, default=8.0)
    parser.add_argument("--lease-ttl-ms", type=int, default=get_config().shard_lease_ttl_ms)
    parser.add_argument("--ack-deadline-ms", type=int, default=get_config().ack_deadline_ms)
    return parser.parse_args(argv)


@reports_ceilings()
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    jobs = int(args.rate * args.seconds)
    with bench_platform("failover") as platform:
        for i in range(args.replicas):
            platform.start_beat(f"bench-beat-{i}", shard_lease_ttl_ms=args.lease_ttl_ms,
                                ack_deadline_ms=args.ack_deadline_ms)
        victim = "bench-beat-1"
        time.sleep(2)  # ownership settles: every replica holds its share
        start_ms = platform.schedule_steady(jobs, args.rate)
        time.sleep(max(0.0, (start_ms - now_ms()) / 1000 + args.kill_after))
        victim_shards = _shards_of(victim)
        platform.beats[victim].signal(signal.SIGKILL)
        killed_ms = now_ms()
        done = wait_until(
            lambda: platform.executions.filter(dispatched_at__isnull=False).count() >= jobs,
            timeout_s=args.seconds + args.ack_deadline_ms / 1000 + 60,
            interval_s=1.0,
        )
        rows = list(platform.executions.filter(dispatched_at__isnull=False)
                    .values_list("job_id", "scheduled_for", "dispatched_at"))
        moved = [(s, d) for job_id, s, d in rows
                 if shard_for(str(job_id), get_config().shard_count) in victim_shards]
        after_kill = [datetime_to_ms(d) for _, d in moved if datetime_to_ms(d) > killed_ms]
        moved_lateness = [(d - s) / timedelta(milliseconds=1) for s, d in moved
                          if datetime_to_ms(s) >= killed_ms]
        published = queue_depth(platform.queue)
    return {
        "bench": "failover",
        "replicas": args.replicas,
        "rate_per_s": args.rate,
        "jobs": jobs,
        "shard_lease_ttl_ms": args.lease_ttl_ms,
        "ack_deadline_ms": args.ack_deadline_ms,
        "victim_shards": len(victim_shards),
        "failover_gap_ms": min(after_kill) - killed_ms if after_kill else None,
        "moved_shard_lateness_ms": summarize_ms(moved_lateness),
        "lost": jobs - len(rows),
        "duplicates": published - len(rows),
        "completed_in_time": done,
        "killed_at": ms_to_datetime(killed_ms).isoformat(),
    }


def _shards_of(replica_id: str) -> set[int]:
    from chronocore.redis_client import redis_client
    from scheduler.sharding import shard_tag

    client = redis_client()
    shards = range(get_config().shard_count)
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        pipe.get(f"{shard_tag(shard)}:lease")
    prefix = f"{replica_id}|".encode()
    return {s for s, v in zip(shards, pipe.execute(), strict=True) if v and v.startswith(prefix)}
