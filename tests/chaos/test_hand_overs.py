"""Shards changing hands, with the default settings, under load: nothing is late.

Three beat replicas run with the configuration a deployment gets by default (no fast-failover
overrides), and no worker: what is measured is the dispatch, each execution's ``dispatched_at``
(its publish confirmed) against its ``scheduled_for``, and every message the queue received
(with no consumer, each one published stays there: more messages than jobs is a duplicate).
"""

from __future__ import annotations

import signal
import time

import pytest

from bench.common import queue_depth
from chronocore.config import get_config
from scheduler import api
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.models import Execution
from scheduler.sharding import shard_for, shard_tag
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REPLICAS = ("beat-a", "beat-b", "beat-c")
SHARDS = get_config().shard_count
# Jobs are scheduled this long for the rolling restart: three restarts of a few seconds each
# on two busy cores, with room.
ROLLING_S = 45


def holders(platform) -> dict[int, str]:
    """``{shard: lease value}`` of every shard leased now."""
    pipe = platform.redis.pipeline(transaction=False)
    for shard in range(SHARDS):
        pipe.get(f"{shard_tag(shard)}:lease")
    return {s: v.decode() for s, v in enumerate(pipe.execute()) if v}


def shards_of(platform, replica_id: str) -> set[int]:
    return {s for s, v in holders(platform).items() if v.startswith(f"{replica_id}|")}


def settled(platform, names=REPLICAS) -> bool:
    """Every shard leased, and by each replica its share (each has handed over the others')."""
    owners = [v.split("|")[0] for v in holders(platform).values()]
    return len(owners) == SHARDS and all(owners.count(n) > SHARDS // len(names) // 2
                                         for n in names)


def start_replicas(platform, names=REPLICAS):
    # One after another, not inside platform.together(): with the three joining at once the
    # rolling restart below missed its bound in 2 of 3 suite runs (1.65 and 2.5 s late) on
    # 2026-12-06, and passed alone; until that is understood, they join as they always did.
    beats = {name: platform.start_beat(name) for name in names}
    assert wait_for(lambda: settled(platform, names), timeout_s=30), \
        "\n".join(f"{n}:\n{b.log_tail(8)}" for n, b in beats.items())
    return beats


def steady_jobs(platform, tenant, *, rate: int, seconds: float, after_s: float = 2.0):
    start = now_ms() + int(after_s * 1000)
    fire_times = [ms_to_datetime(start + int(i * 1000 / rate)) for i in range(int(rate * seconds))]
    jobs = api.schedule_once_many("e2e.record_run", tenant=tenant, fire_times=fire_times,
                                  queue=platform.queue)
    return start, jobs


def dispatch_lateness(jobs) -> dict[str, int]:
    """``{job id: ms from scheduled_for to dispatched_at}`` of every dispatched job."""
    rows = Execution.objects.filter(job__in=jobs, dispatched_at__isnull=False).values_list(
        "job_id", "scheduled_for", "dispatched_at")
    return {str(job): datetime_to_ms(d) - datetime_to_ms(s) for job, s, d in rows}


def all_dispatched(jobs):
    return lambda: Execution.objects.filter(job__in=jobs, dispatched_at__isnull=False).count() \
        >= len(jobs)


def logs_of(beats) -> str:
    return "".join(b.log_path.read_text(errors="replace") for b in beats.values())


def test_a_rolling_restart_of_every_replica_delays_no_job_by_more_than_a_second(platform, tenant):
    """Each replica in turn stopped (SIGTERM) and started again under 1,000 jobs/s: the one
    stopping leaves the membership and publishes what it prepared before it releases; the
    ones giving shards back to the restarted one hand them over once drained."""
    beats = start_replicas(platform)
    start_ms, jobs = steady_jobs(platform, tenant, rate=1_000, seconds=ROLLING_S)
    time.sleep(max(0.0, (start_ms - now_ms()) / 1000) + 2)
    for name in REPLICAS:
        assert beats[name].stop() == 0, beats[name].log_tail()
        beats[name] = platform.start_beat(name)
        assert wait_for(lambda: settled(platform), timeout_s=30)
        time.sleep(1.5)
    assert now_ms() < start_ms + ROLLING_S * 1000, "the restarts outlasted the jobs"

    assert wait_for(all_dispatched(jobs), timeout_s=60)
    lateness = dispatch_lateness(jobs)
    assert len(lateness) == len(jobs)
    late = sorted(lateness.values())[-5:]
    print(f"rolling restart: {len(jobs)} jobs, the latest dispatches {late} ms late")
    assert max(lateness.values()) <= 1_000, f"the latest dispatches were {late} ms late"
    assert queue_depth(platform.queue) == len(jobs), "a job was published twice"
    assert "publishing nothing of them" not in logs_of(beats)


def test_a_replica_stopped_for_a_second_loses_none_of_its_shards(platform, tenant):
    beats = start_replicas(platform)
    start_ms, jobs = steady_jobs(platform, tenant, rate=300, seconds=8)
    time.sleep(max(0.0, (start_ms - now_ms()) / 1000) + 2)
    sleeper = "beat-b"
    held = holders(platform)
    beats[sleeper].signal(signal.SIGSTOP)
    time.sleep(1.0)
    beats[sleeper].signal(signal.SIGCONT)
    time.sleep(1.0)
    # The same leases, fencing tokens included: no shard moved, none was even re-acquired.
    assert holders(platform) == held
    assert shards_of(platform, sleeper)

    assert wait_for(all_dispatched(jobs), timeout_s=60)
    lateness = dispatch_lateness(jobs)
    assert len(lateness) == len(jobs)
    assert max(lateness.values()) <= 1_500, "the stop held jobs back longer than itself"
    assert queue_depth(platform.queue) == len(jobs), "a job was published twice"
    logs = logs_of(beats)
    assert "lost its lease" not in logs and "fenced off" not in logs


def test_a_replica_killed_has_its_shards_firing_again_within_three_seconds(platform, tenant):
    """SIGKILL: its leases expire (2 s), the others take its shards and claim again at once
    what it had claimed (prepared) and not acknowledged: no job waits for the 30 s ack
    deadline."""
    beats = start_replicas(platform)
    start_ms, jobs = steady_jobs(platform, tenant, rate=500, seconds=12)
    time.sleep(max(0.0, (start_ms - now_ms()) / 1000) + 4)
    victim = "beat-c"
    victim_shards = shards_of(platform, victim)
    assert victim_shards
    beats[victim].signal(signal.SIGKILL)
    killed_ms = now_ms()

    assert wait_for(all_dispatched(jobs), timeout_s=60)
    lateness = dispatch_lateness(jobs)
    assert len(lateness) == len(jobs), "a job of the killed replica was lost"
    moved = {job: ms for job, ms in lateness.items()
             if shard_for(job, SHARDS) in victim_shards}
    assert moved
    print(f"kill -9: the killed replica's {len(moved)} jobs at most {max(moved.values())} ms "
          f"late, the others' {max(lateness.values())} ms")
    assert max(lateness.values()) <= 3_000, \
        f"the killed replica's shards fired {max(moved.values())} ms late"
    # Only what the victim had published and not yet acknowledged can go out twice.
    duplicates = queue_depth(platform.queue) - len(jobs)
    assert 0 <= duplicates <= 500, duplicates
    assert killed_ms < start_ms + 12_000
