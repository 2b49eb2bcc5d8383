"""Workers killed, paused and failing on purpose, with a real reaper: at least once, fenced.

Leases of 3 s and heartbeats every second make a lost worker visible within seconds.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from bench.common import queue_depth
from chronocore.probe import free_port
from scheduler import api
from scheduler.consumer_recording import MIN_PREFORK_CHILDREN
from scheduler.models import Execution, ExecutionStatus, Job
from scheduler.retry import RetryPolicy
from tests.helpers import attempts_log, deliveries, runs, wait_for
from tests.metrics_support import probe_metrics, value

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FAST_LEASES = {
    "execution_lease_ttl_ms": 3_000,
    "worker_heartbeat_interval_ms": 1_000,
    "reaper_interval_ms": 300,
}


def pool_children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def start(platform, workers=("worker-a", "worker-b")):
    with platform.together():
        platform.start_beat()
        procs = {name: platform.start_worker(name, concurrency=1, **FAST_LEASES)
                 for name in workers}
        platform.start_reaper(**FAST_LEASES)
    return procs


def schedule(platform, tenant, task: str, *, kwargs=None, max_retries=2, policy=None):
    job = api.schedule_once(task, tenant=tenant, delay=0.5, kwargs=kwargs or {},
                            queue=platform.queue)
    Job.objects.filter(pk=job.pk).update(max_retries=max_retries, retry_policy=policy or {
        "initial_delay_ms": 200, "multiplier": 2.0, "max_delay_ms": 1_000})
    return job


def running_on(job) -> tuple[Execution, str]:
    assert wait_for(lambda: job.executions.filter(status="RUNNING").exists(), timeout_s=20)
    execution = job.executions.get()
    return execution, execution.worker_id.split("@")[0]


@pytest.mark.parametrize("victim", ["parent", "pool child"])
def test_a_worker_killed_mid_job_is_replaced_and_one_success_is_recorded(platform, tenant,
                                                                        victim):
    procs = start(platform)
    job = schedule(platform, tenant, "e2e.sleep", kwargs={"seconds": 4})
    execution, name = running_on(job)
    worker = procs[name]
    pid = worker.pid if victim == "parent" else pool_children(worker.pid)[0]
    import os

    os.kill(pid, signal.SIGKILL)

    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(), timeout_s=60)
    execution.refresh_from_db()
    assert execution.attempt == 2, "it ran again as a new attempt"
    assert Execution.objects.filter(job=job).count() == 1
    attempts = [a for e, a, _ in attempts_log(platform.redis) if e == str(execution.execution_id)]
    assert 2 in attempts
    if victim == "parent":
        assert not execution.worker_id.startswith(name), "the dead worker cannot have finished"


def test_a_broker_connection_lost_mid_run_neither_stops_the_job_nor_runs_it_twice(platform,
                                                                                 tenant):
    """RabbitMQ closes every connection while a job runs (a broker restart looks so, and so does
    its consumer timeout on a job longer than 30 minutes): the unacknowledged message goes back
    to the queue and is delivered again, the worker-side start refuses that delivery (the
    execution is RUNNING under a live lease), and the first run goes on and is recorded."""
    import localservices

    rabbitmq = {s.name: s for s in localservices.registered_services(
        localservices.ServicesConfig.from_env())}["rabbitmq"]
    start(platform)
    job = schedule(platform, tenant, "e2e.sleep", kwargs={"seconds": 5})
    execution, _ = running_on(job)
    closed = rabbitmq.ctl("close_all_connections", "chaos test")
    assert closed.returncode == 0, closed.stderr

    execution_id = str(execution.execution_id)
    assert wait_for(lambda: deliveries(platform.redis).get(execution_id, 0) >= 2, timeout_s=60)
    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(), timeout_s=60)
    time.sleep(1)  # a late second run would show by now
    execution.refresh_from_db()
    assert execution.attempt == 1, "the run was not stopped and tried again"
    assert runs(platform.redis) == {execution_id: 1}


def test_a_worker_paused_past_its_lease_has_its_late_result_refused(platform, tenant):
    procs = start(platform)
    job = schedule(platform, tenant, "e2e.sleep", kwargs={"seconds": 2})
    execution, name = running_on(job)
    sleeper = procs[name]
    sleeper.signal_group(signal.SIGSTOP)
    try:
        # The reaper declares the attempt lost; the other worker runs attempt 2 to the end.
        assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(),
                        timeout_s=60)
    finally:
        sleeper.signal_group(signal.SIGCONT)
    execution.refresh_from_db()
    winner = execution.worker_id
    assert execution.attempt == 2 and not winner.startswith(name)
    # The woken worker finishes its stale run; the fencing check must refuse its result.
    refused = "is stale: the execution is SUCCEEDED, attempt 2"
    assert wait_for(lambda: refused in sleeper.log_tail(200), timeout_s=30), sleeper.log_tail()
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.SUCCEEDED and execution.worker_id == winner


def test_a_job_that_always_fails_is_dead_lettered_after_exactly_its_attempts(platform, tenant):
    start(platform, workers=("worker-a",))
    policy = RetryPolicy(max_attempts=4, initial_delay_ms=1_000, multiplier=2.0,
                         max_delay_ms=10_000)
    job = schedule(platform, tenant, "e2e.fail", max_retries=3,
                   policy={k: v for k, v in policy.to_json().items() if k != "max_attempts"})

    assert wait_for(lambda: job.executions.filter(status="DEAD_LETTERED").exists(),
                    timeout_s=60)
    time.sleep(2)  # nothing more may come
    execution = job.executions.get()
    assert execution.attempt == 4
    assert "gave up after 4 attempts" in execution.reason
    assert "e2e.fail always fails" in execution.error
    # Its tenant sees the type and message; the traceback is kept for platform staff.
    assert "Traceback" not in execution.error and 'File "' not in execution.error
    assert execution.traceback.startswith("Traceback (most recent call last):")
    assert runs(platform.redis)[str(execution.execution_id)] == 4
    starts = sorted(ms for e, _, ms in attempts_log(platform.redis)
                    if e == str(execution.execution_id))
    assert len(starts) == 4
    for attempt, (before, after) in enumerate(zip(starts, starts[1:], strict=False), start=2):
        gap = after - before
        # Full jitter in [0, bound]; the run itself and delivery add a little on top.
        assert 0 <= gap <= policy.delay_bound_ms(attempt) + 1_500, (attempt, gap)
    job.refresh_from_db()
    assert job.retry_count == 3


def test_cancelling_a_running_job_stops_it_on_its_worker(platform, tenant):
    start(platform, workers=("worker-a",))
    job = schedule(platform, tenant, "e2e.sleep", kwargs={"seconds": 30})
    execution, _ = running_on(job)
    time.sleep(0.5)
    assert api.cancel_execution(execution.execution_id, tenant=tenant, by="ops") == "stopping"

    assert wait_for(lambda: job.executions.filter(status="CANCELLED").exists(), timeout_s=10)
    execution.refresh_from_db()
    assert execution.reason == "cancel requested by ops"
    assert (execution.finished_at - execution.started_at).total_seconds() < 15
    assert str(execution.execution_id) not in runs(platform.redis), "the body ran to its end"


def test_a_cancelled_queued_job_never_starts(platform, tenant):
    start(platform, workers=("worker-a",))
    blocker = schedule(platform, tenant, "e2e.sleep", kwargs={"seconds": 3})
    running_on(blocker)
    queued = schedule(platform, tenant, "e2e.record_run")
    assert wait_for(lambda: queued.executions.filter(status="DISPATCHED").exists(),
                    timeout_s=10), "it should be waiting in the queue behind the blocker"
    assert api.cancel(queued.job_id, tenant=tenant, by="ops")

    assert wait_for(lambda: blocker.executions.filter(status="SUCCEEDED").exists(),
                    timeout_s=20)
    time.sleep(1.5)  # the worker has taken the cancelled message by now
    execution = queued.executions.get()
    assert execution.status == ExecutionStatus.CANCELLED
    assert str(execution.execution_id) not in runs(platform.redis)
    assert execution.started_at is None


def test_a_soft_timeout_stops_the_task_and_a_hard_one_kills_it_then_the_attempt_is_retried(
    platform, tenant
):
    start(platform, workers=("worker-a",))
    soft = api.schedule_once("e2e.sleep", tenant=tenant, delay=0.3, kwargs={"seconds": 30},
                             queue=platform.queue, soft_timeout_ms=1_000)
    hard = api.schedule_once("e2e.sleep", tenant=tenant, delay=0.3, kwargs={"seconds": 30},
                             queue=platform.queue, hard_timeout_ms=1_500,
                             retry=RetryPolicy(max_attempts=2, initial_delay_ms=100))

    assert wait_for(lambda: soft.executions.filter(status="FAILED").exists(), timeout_s=30)
    execution = soft.executions.get()
    assert "SoftTimeLimitExceeded" in execution.error
    assert (execution.finished_at - execution.started_at).total_seconds() < 10
    # The hard limit kills the pool process: the attempt is lost, retried, killed again.
    assert wait_for(lambda: hard.executions.filter(status="DEAD_LETTERED").exists(),
                    timeout_s=60)
    execution = hard.executions.get()
    assert execution.attempt == 2 and "lost" in execution.reason


# A prefork pool records beside its consumer from MIN_PREFORK_CHILDREN children on.
@pytest.mark.parametrize("pool, size", [("threads", 2), ("prefork", MIN_PREFORK_CHILDREN)])
def test_a_worker_killed_with_deliveries_waiting_for_its_pool_loses_none(platform, tenant,
                                                                          pool, size):
    """A worker's consumer holds the deliveries its pool's threads (its children) cannot take
    yet and starts each only as one takes it (scheduler.consumer_recording). Killed with
    ``size`` running and six waiting, it had started only those running: the six go back to
    the queue unstarted and run once on the next worker, the others are found lost by the
    reaper and run again."""

    with platform.together():
        platform.start_beat()
        victim = platform.start_worker("worker-a", concurrency=size, pool=pool, **FAST_LEASES)
        platform.start_reaper(**FAST_LEASES)
    count = size + 6
    jobs = [schedule(platform, tenant, "e2e.sleep", kwargs={"seconds": 3})
            for _ in range(count)]
    executions = Execution.objects.filter(job__in=jobs)
    assert wait_for(lambda: executions.filter(status="RUNNING").count() == size
                    and executions.count() == count and queue_depth(platform.queue) == 0,
                    timeout_s=30)
    time.sleep(0.5)  # one more start, if the waiting deliveries were started, would show now
    assert executions.filter(status="RUNNING").count() == size
    assert executions.filter(status="DISPATCHED").count() == 6, "a waiting delivery started"
    killed = set(executions.filter(status="RUNNING").values_list("execution_id", flat=True))

    children = pool_children(victim.pid)
    victim.signal(signal.SIGKILL)
    victim.popen.wait(10)
    # Celery's prefork children are killed with their parent (PR_SET_PDEATHSIG).
    assert wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children),
                    timeout_s=20)
    port = free_port()
    platform.start_worker("worker-b", concurrency=size, pool=pool, metrics_port=port,
                          **FAST_LEASES)
    assert wait_for(lambda: executions.filter(status="SUCCEEDED").count() == count,
                    timeout_s=90)
    time.sleep(1)  # a late second run would show by now
    assert set(runs(platform.redis).values()) == {1}, "a body completed twice"
    assert len(runs(platform.redis)) == count
    for execution in executions:
        assert execution.worker_id.startswith("worker-b@")
        assert execution.attempt == (2 if execution.execution_id in killed else 1)
    # Every start of the next worker was made by its consumer as its threads (children) took
    # them: every first delivery (the killed runs' refused there, their executions held or
    # moved on) and the killed runs' second attempts.
    worker_b = probe_metrics(port)
    assert value(worker_b, "chrono_worker_starts_total", made_by="consumer") == count + size
    assert value(worker_b, "chrono_worker_starts_total", made_by="task") == 0
    assert value(worker_b, "chrono_worker_executions_total", outcome="not_startable") == size


# A prefork pool of 2 makes its starts in its children and sends only its successes to the
# worker's process (ConsumerRecording(hold=False)); one of 8 records both there.
@pytest.mark.parametrize("pool, size, running", [("threads", 8, 6), ("prefork", 8, 6),
                                                 ("prefork", 2, 2)])
def test_a_worker_stopped_mid_run_records_every_success_before_it_exits(platform, tenant,
                                                                         pool, size, running):
    """A warm shutdown (SIGTERM: a deploy, a scale-down) lets the running tasks end; their
    successes are recorded before the process exits, though the consumer's recorder that
    records them while the worker runs (scheduler.consumer_recording) has stopped: nothing is
    left RUNNING for the reaper to call lost and run again."""
    with platform.together():
        platform.start_beat()
        worker = platform.start_worker("worker-a", concurrency=size, pool=pool)
    jobs = [schedule(platform, tenant, "e2e.sleep", kwargs={"seconds": 2})
            for _ in range(running)]
    executions = Execution.objects.filter(job__in=jobs)
    assert wait_for(lambda: executions.filter(status="RUNNING").count() == running,
                    timeout_s=30)

    worker.signal(signal.SIGTERM)
    assert worker.popen.wait(60) == 0, worker.log_tail()
    assert sorted(executions.values_list("status", flat=True)) == ["SUCCEEDED"] * running
    assert set(executions.values_list("attempt", flat=True)) == {1}
    assert set(runs(platform.redis).values()) == {1} and len(runs(platform.redis)) == running
