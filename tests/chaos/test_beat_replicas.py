"""Three beat replicas against real Redis, RabbitMQ and PostgreSQL, broken on purpose.

Each test schedules jobs, breaks something (SIGKILL, SIGSTOP past the lease, a Redis flush) and
then checks from the workers' own evidence (``tests/e2e/tasks.py``) that nothing was lost, and
counts what was delivered twice.
"""

from __future__ import annotations

import signal
import time

import pytest

from scheduler import api
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.models import Execution, ExecutionStatus, Job, JobStatus
from scheduler.timers import timer_store
from tests.helpers import FAST_FAILOVER, deliveries, delivery_log, replicas_seen, runs, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REPLICAS = ("beat-a", "beat-b", "beat-c")


def start_three(platform):
    # The replicas join one after another (see tests/chaos/test_hand_overs.py, start_replicas).
    beats = {replica: platform.start_beat(replica, **FAST_FAILOVER) for replica in REPLICAS}
    platform.start_worker(concurrency=2)
    # Let ownership settle: each replica releases what the map gives the others.
    assert wait_for(lambda: all(platform.owned(r) > 0 for r in REPLICAS), timeout_s=20)
    return beats


def spread_jobs(platform, tenant, *, count: int, over_s: float, after_s: float = 1.0):
    start = now_ms() + int(after_s * 1000)
    step = over_s * 1000 / count
    fire_times = [ms_to_datetime(start + int(i * step)) for i in range(count)]
    return api.schedule_once_many("e2e.record_run", tenant=tenant, fire_times=fire_times,
                                  queue=platform.queue)


def all_succeeded(jobs):
    """Every one of ``jobs`` has a succeeded execution (other jobs' executions do not count)."""
    ids = [job.job_id for job in jobs]
    return lambda: (Execution.objects.filter(job_id__in=ids, status=ExecutionStatus.SUCCEEDED)
                    .count() >= len(ids))


def assert_each_ran_exactly_once(platform, jobs):
    executions = list(Execution.objects.filter(job__in=jobs))
    assert len(executions) == len(jobs), "an occurrence has no execution, or has two"
    assert {e.status for e in executions} == {ExecutionStatus.SUCCEEDED}
    ran = runs(platform.redis)
    assert {str(e.execution_id) for e in executions} <= ran.keys(), "an execution never ran"
    assert all(ran[str(e.execution_id)] == 1 for e in executions), "a task body ran twice"


def test_three_replicas_dispatch_every_occurrence_exactly_once(platform, tenant):
    start_three(platform)
    jobs = spread_jobs(platform, tenant, count=900, over_s=6)
    cron = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",
                             queue=platform.queue)

    assert wait_for(all_succeeded(jobs), timeout_s=90)
    assert wait_for(lambda: cron.executions.filter(status="SUCCEEDED").count() >= 5,
                    timeout_s=30)
    assert_each_ran_exactly_once(platform, jobs)
    assert set(deliveries(platform.redis).values()) == {1}, "a duplicate in normal running"
    assert len(replicas_seen(platform.redis)) == 3, "the three replicas should share the work"
    fired = sorted(datetime_to_ms(e.scheduled_for) for e in cron.executions.all())
    assert [b - a for a, b in zip(fired, fired[1:], strict=False)] == [1_000] * (len(fired) - 1)


def test_kill_9_of_a_replica_loses_nothing(platform, tenant, record_property):
    beats = start_three(platform)
    jobs = spread_jobs(platform, tenant, count=1_500, over_s=10)
    victim = "beat-b"
    assert wait_for(lambda: replicas_seen(platform.redis)[victim] > 20, timeout_s=20)
    beats[victim].signal(signal.SIGKILL)

    assert wait_for(all_succeeded(jobs), timeout_s=120)
    assert_each_ran_exactly_once(platform, jobs)
    duplicates = sum(n - 1 for n in deliveries(platform.redis).values())
    record_property("duplicates", duplicates)
    print(f"kill -9 of {victim}: lost 0, duplicate deliveries {duplicates}")
    # Only what the victim had claimed and not acknowledged can be published twice.
    assert duplicates <= 1_000


def test_a_replica_paused_past_its_lease_dispatches_nothing_when_it_wakes(platform, tenant):
    beats = start_three(platform)
    jobs = spread_jobs(platform, tenant, count=1_200, over_s=12)
    sleeper = "beat-c"
    assert wait_for(lambda: replicas_seen(platform.redis)[sleeper] > 10, timeout_s=20)
    old_leases = platform.leases_of(sleeper)
    assert old_leases
    beats[sleeper].signal(signal.SIGSTOP)
    stopped_ms = now_ms()
    time.sleep(FAST_FAILOVER["shard_lease_ttl_ms"] / 1000 * 2.5)
    beats[sleeper].signal(signal.SIGCONT)
    woke_ms = now_ms()

    assert wait_for(all_succeeded(jobs), timeout_s=120)
    assert_each_ran_exactly_once(platform, jobs)
    # Stamped after the stop (so after waking, and so checked against the lease after waking):
    # a stamp in the very millisecond of the stop was read before it.
    late = [(e, lease, published) for e, lease, published in delivery_log(platform.redis)
            if lease in old_leases and published > stopped_ms]
    assert late == [], f"dispatched under a lease it lost while stopped (woke at {woke_ms})"


def test_redis_flush_then_rebuild_loses_no_job(platform, tenant):
    start_three(platform)
    jobs = spread_jobs(platform, tenant, count=300, over_s=3, after_s=6)
    cron = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",
                             queue=platform.queue)
    time.sleep(1.5)
    # FLUSHDB, not FLUSHALL: the same loss for Chrono, without wiping other Redis databases.
    platform.redis.flushdb()
    rebuild = platform.group.start("rebuild", ["rebuild-timers"])
    assert rebuild.popen.wait(60) == 0, rebuild.log_tail()

    assert wait_for(all_succeeded(jobs), timeout_s=90)
    assert_each_ran_exactly_once(platform, jobs)
    assert Job.objects.filter(job_id__in=[j.job_id for j in jobs],
                              status=JobStatus.COMPLETED).count() == 300
    before = cron.executions.count()
    assert wait_for(lambda: cron.executions.count() >= before + 2, timeout_s=15), \
        "the cron job stopped firing after the flush"


def test_after_a_redis_flush_the_replicas_repair_timers_by_themselves(platform, tenant):
    start_three(platform)
    jobs = spread_jobs(platform, tenant, count=100, over_s=2, after_s=5)
    time.sleep(1.0)
    platform.redis.flushdb()  # no rebuild command: the replicas lose their leases, take them
    # again, and reconcile every shard they gain from PostgreSQL.
    assert wait_for(all_succeeded(jobs), timeout_s=60)
    assert_each_ran_exactly_once(platform, jobs)


def test_rabbitmq_dropping_every_connection_mid_run_loses_nothing(platform, tenant):
    """RabbitMQ closes every client connection (what a broker restart looks like from the
    clients) three times while jobs are firing: the beats' firers fail a publish, try it again
    on a new connection, and every job still runs exactly once."""
    import localservices

    rabbitmq = {s.name: s for s in localservices.registered_services(
        localservices.ServicesConfig.from_env())}["rabbitmq"]
    beats = start_three(platform)
    jobs = spread_jobs(platform, tenant, count=900, over_s=6)
    assert wait_for(lambda: sum(replicas_seen(platform.redis).values()) > 100, timeout_s=20)
    for _ in range(3):
        closed = rabbitmq.ctl("close_all_connections", "chaos test")
        assert closed.returncode == 0, closed.stderr
        time.sleep(0.7)

    assert wait_for(all_succeeded(jobs), timeout_s=120)
    assert_each_ran_exactly_once(platform, jobs)
    logs = "".join(beat.log_path.read_text(errors="replace") for beat in beats.values())
    assert "publishing failed, retrying" in logs, "no beat saw its connection closed"


def test_jobs_committed_whose_timers_never_reached_redis_fire_seconds_late_not_minutes(
        platform, tenant):
    """A process killed between a job's commit and its timer (a worker's engine listener
    writing a workflow's next step) leaves a pending row with no timer and no announcement:
    the beat's overdue sweep finds it a few seconds past its time, long before the round robin
    of 256 shards (two seconds each) would, and each job still runs exactly once."""
    with platform.together():
        beat = platform.start_beat("beat-a", **FAST_FAILOVER)
        platform.start_worker(concurrency=2)
    assert wait_for(lambda: platform.owned("beat-a") > 0, timeout_s=20)
    time.sleep(4)  # past the reconciler's pass over the shards it has just gained
    jobs = api.schedule_once_many("e2e.record_run", tenant=tenant, queue=platform.queue,
                                  fire_times=[ms_to_datetime(now_ms() + 600_000)] * 20)
    ids = [str(job.job_id) for job in jobs]
    timer_store().remove(ids)  # as if the commit's timers were never written
    due = now_ms() + 1_000
    Job.objects.filter(job_id__in=ids).update(next_run_at=ms_to_datetime(due))

    assert wait_for(all_succeeded(jobs), timeout_s=20), "the jobs without timers never ran"
    assert_each_ran_exactly_once(platform, jobs)
    late = [datetime_to_ms(e.started_at) - due for e in Execution.objects.filter(job__in=jobs)]
    assert max(late) < 15_000, late
    assert "overdue jobs had no timer" in beat.log_path.read_text(errors="replace")
