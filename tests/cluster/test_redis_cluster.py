"""Chrono on a real Redis Cluster (three primaries with a replica each, `rcluster_fixtures`):
real `chrono beat` and worker processes fire one-time and cron jobs on time, the announcements
travel by sharded pub/sub, and a primary killed with SIGKILL fails over to its replica with no
job lost, the reconciler putting back from PostgreSQL what the replica had not received."""

from __future__ import annotations

import re
import signal
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from chronocore.redis_client import connect
from scheduler import api
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.lifecycle import cancel_channel
from scheduler.models import Execution, ExecutionStatus, Job, JobStatus
from scheduler.ownership import ShardOwnership
from scheduler.sharding import shard_for
from scheduler.timers import TimerStore, shard_keys, timer_store
from tests.cluster.rcluster_fixtures import cluster_platform, healthy_cluster, redis_cluster
from tests.e2e.tasks import RUNS_KEY
from tests.helpers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]
__all__ = ["cluster_platform", "healthy_cluster", "redis_cluster"]  # fixtures, used by name

FILLER_BYTES = 1 << 20
FILLER_COUNT = 40  # more than the loopback socket buffers hold: the rest waits in the primary


def _runs(platform) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in platform.evidence.hgetall(RUNS_KEY).items()}


def _node_of(client, timer_id: str) -> int:
    """Port of the primary serving ``timer_id``'s shard."""
    due = shard_keys(shard_for(timer_id, timer_store().shard_count))[0]
    return client.get_node_from_key(due).port


def test_one_time_jobs_spread_over_every_primary_each_fire_once_on_time(cluster_platform, tenant):
    platform = cluster_platform
    platform.start_beat()
    platform.start_worker(concurrency=2)
    start = now_ms() + 2_000
    jobs = api.schedule_once_many("e2e.record_run", tenant=tenant, queue=platform.queue,
                                  fire_times=[ms_to_datetime(start + i * 10) for i in range(300)])
    # The timers sit in the cluster, on all three primaries (every key of a shard in one slot).
    assert timer_store().pending_count() == 300
    assert {_node_of(platform.redis, str(j.job_id)) for j in jobs} == set(
        platform.cluster.primaries())

    assert wait_for(lambda: Execution.objects.filter(status="SUCCEEDED").count() >= 300,
                    timeout_s=90), Execution.objects.values("status").count()
    time.sleep(1.0)  # a duplicate delivery, if any, would land now
    executions = list(Execution.objects.all())
    assert {e.job_id for e in executions} == {j.job_id for j in jobs}
    runs = _runs(platform)
    assert runs.keys() == {str(e.execution_id) for e in executions}
    assert set(runs.values()) == {1}, "some execution ran more than once"
    assert all(e.dispatched_at >= e.scheduled_for for e in executions), "published early"
    lateness = sorted((e.dispatched_at - e.scheduled_for).total_seconds() for e in executions)
    assert lateness[len(lateness) // 2] < 0.2, lateness[-10:]
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 300
    assert wait_for(lambda: timer_store().pending_count() == 0, timeout_s=5)


def test_cron_job_fires_on_consecutive_occurrences_on_the_cluster(cluster_platform, tenant):
    platform = cluster_platform
    platform.start_beat()
    platform.start_worker()
    job = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",
                            queue=platform.queue)
    first_ms = datetime_to_ms(job.next_run_at)

    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").count() >= 4, timeout_s=30)
    fired = sorted(datetime_to_ms(e.scheduled_for) for e in job.executions.all())
    assert fired[0] == first_ms
    assert [b - a for a, b in zip(fired, fired[1:], strict=False)] == [1_000] * (len(fired) - 1)
    lateness = sorted((e.dispatched_at - e.scheduled_for).total_seconds()
                      for e in job.executions.filter(dispatched_at__isnull=False))
    assert lateness[len(lateness) // 2] < 0.2, lateness
    assert set(_runs(platform).values()) == {1}


def test_a_job_due_in_50_ms_reaches_the_beat_by_sharded_announcement(cluster_platform, tenant):
    # Scans every 20 s: only the announcement (SPUBLISH) can bring this timer in time.
    platform = cluster_platform
    platform.start_beat(lookahead_ms=30_000, scan_interval_ms=20_000, ack_deadline_ms=60_000)
    platform.start_worker()
    time.sleep(1.0)  # the beat's first scan is behind it
    job = api.schedule_once("e2e.record_run", tenant=tenant, delay=0.05, queue=platform.queue)

    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(), timeout_s=15)
    execution = job.executions.get()
    assert timedelta(0) <= execution.dispatched_at - execution.scheduled_for < timedelta(seconds=2)


def test_cancelling_a_running_job_reaches_its_worker_by_sharded_announcement(
        cluster_platform, tenant):
    platform = cluster_platform
    platform.start_beat()
    # Lease renewals every 40 s: within this test only the announcement can stop the run.
    platform.start_worker(execution_lease_ttl_ms=120_000)
    job = api.schedule_once("e2e.sleep", tenant=tenant, kwargs={"seconds": 30}, delay=0.2,
                            queue=platform.queue)
    assert wait_for(lambda: job.executions.filter(status="RUNNING").exists(), timeout_s=30)
    execution = job.executions.get()
    time.sleep(0.5)
    assert api.cancel_execution(execution.execution_id, tenant=tenant, by="ops") == "stopping"

    assert wait_for(lambda: job.executions.filter(status="CANCELLED").exists(), timeout_s=15)
    execution.refresh_from_db()
    assert (execution.finished_at - execution.started_at).total_seconds() < 15


def _filler_tag(client, port: int) -> str:
    """A hash tag whose slot ``port`` serves."""
    return next(tag for tag in (f"{{filler-{i}}}" for i in range(100_000))
                if client.get_node_from_key(tag).port == port)


def test_a_primary_killed_with_sigkill_fails_over_and_no_job_is_lost(cluster_platform, tenant,
                                                                      capsys):
    platform, cluster = cluster_platform, cluster_platform.cluster
    client = platform.redis
    beat = platform.start_beat()
    platform.start_worker(concurrency=4, pool="threads")
    cron = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",
                             queue=platform.queue)
    start = now_ms() + 2_000
    steady = api.schedule_once_many("e2e.record_run", tenant=tenant, queue=platform.queue,
                                    fire_times=[ms_to_datetime(start + i * 50)
                                                for i in range(300)])  # 20/s over 15 s
    time.sleep(5)  # firing under way

    victim = client.get_node_from_key(shard_keys(0)[0]).port
    replica = cluster.replica_of(victim)
    tag = _filler_tag(client, victim)
    # Replication lag, made to order: with the replica stopped, 40 MB go to it ahead of the
    # timers of the jobs scheduled next, which the primary acknowledges and holds in its output
    # buffer; it dies with them. What an asynchronous replica lacks when its primary dies.
    cluster.kill(replica, signal.SIGSTOP)
    try:
        pipe = client.pipeline(transaction=False)
        for n in range(FILLER_COUNT):
            pipe.set(f"{tag}:{n}", b"x" * FILLER_BYTES)
        pipe.execute()
        soon = now_ms() + 3_000
        doomed = api.schedule_once_many("e2e.record_run", tenant=tenant, queue=platform.queue,
                                        fire_times=[ms_to_datetime(soon + i * 10)
                                                    for i in range(150)])
    finally:
        cluster.kill(victim, signal.SIGKILL)
        killed_at, killed_ms = time.monotonic(), now_ms()
        cluster.kill(replica, signal.SIGCONT)
    on_victim = [str(j.job_id) for j in doomed if _node_of(client, str(j.job_id)) == victim]

    # The gap: until the replica serves the victim's slots. Jobs accepted meanwhile are in
    # PostgreSQL even when adding their timer fails.
    during, refused, raised = [], [], 0
    while True:
        try:
            client.set(f"{tag}:probe", 1)
            break
        except redis.RedisError as exc:
            refused.append(type(exc).__name__)
            try:
                during.append(api.schedule_once("e2e.record_run", tenant=tenant, delay=0.5,
                                                queue=platform.queue))
            except redis.RedisError:
                raised += 1  # committed, its timer not added: the reconciler's to put back
            time.sleep(0.2)
    gap_s = time.monotonic() - killed_at
    pipe = client.pipeline(transaction=False)
    for timer_id in on_victim:
        pipe.zscore(shard_keys(shard_for(timer_id, timer_store().shard_count))[0], timer_id)
    missing = sum(1 for score in pipe.execute() if score is None)
    # The nodes' views agree a moment after the client was served (gossip).
    assert wait_for(lambda: replica in cluster.primaries() and cluster.replica_of(victim) is None,
                    timeout_s=10), cluster.topology()

    # Every one-time job: the steady ones, the doomed, and those accepted during the gap (an
    # API call that raised after its commit included).
    one_time = set(Job.objects.exclude(job_id=cron.job_id).values_list("job_id", flat=True))
    assert len(one_time) >= len(steady) + len(doomed) + len(during)

    def all_ran() -> bool:
        return (Execution.objects.filter(job_id__in=one_time, status="SUCCEEDED")
                .values("job_id").distinct().count() == len(one_time))

    assert wait_for(all_ran, timeout_s=120), (
        len(one_time), Execution.objects.filter(job_id__in=one_time).values("status").count(),
        beat.log_tail())
    executions = Execution.objects.filter(job_id__in=one_time)
    # The beat records a publish once RabbitMQ confirmed it; a worker may have run the job and
    # recorded its success first (its recording no longer waits on its tasks' group commits).
    assert wait_for(lambda: not executions.filter(dispatched_at__isnull=True).exists(),
                    timeout_s=30), "a confirmed publish was never recorded"
    assert all(e.dispatched_at >= e.scheduled_for for e in executions), "published early"
    runs = _runs(platform)
    assert all(runs.get(str(e.execution_id), 0) >= 1 for e in executions
               if e.status == ExecutionStatus.SUCCEEDED)
    assert cron.executions.filter(scheduled_for__gt=ms_to_datetime(killed_ms + 5_000),
                                  status="SUCCEEDED").exists(), "the cron job stopped"

    repaired = re.search(r"reconciled every owned shard after the Redis restart or failover in "
                         r"([\d.]+) s: (\d+) timers checked, (\d+) missing added",
                         beat.log_path.read_text())
    assert repaired, beat.log_tail()
    doomed_late = sorted((e.dispatched_at - e.scheduled_for).total_seconds()
                         for e in Execution.objects.filter(job_id__in=[j.job_id for j in doomed]))
    with capsys.disabled():
        print(f"\nredis failover: writes to the killed primary's slots refused for {gap_s:.1f} s "
              f"({len(refused)} probes: {sorted(set(refused))}); {missing} of {len(on_victim)} "
              f"timers written to it were missing on the promoted replica; the reconciler's pass "
              f"took {repaired.group(1)} s and added {repaired.group(3)} timers; the doomed jobs "
              f"were dispatched up to {doomed_late[-1]:.1f} s late; of the jobs scheduled during "
              f"the gap {len(during)} returned and {raised} raised after their commit, all ran")
    assert missing > 0 or int(repaired.group(3)) > 0, "the replica lacked nothing: no lag made"
    assert int(repaired.group(3)) >= 1


def test_a_primary_hung_fails_over_and_the_beat_and_worker_go_on_without_it(cluster_platform,
                                                                           tenant, capsys):
    # SIGSTOP: the node keeps its connections open and answers nothing (a hung host, a network
    # that drops rather than refuses). The cluster fails it over; Chrono's clients, waiting on
    # its sockets, must give up on them (their socket time-out, chronocore.redis_client) and
    # follow the new primary, while the node stays hung. Without the time-out 63 of the 300
    # jobs had run 90 s later.
    platform, cluster = cluster_platform, cluster_platform.cluster
    beat = platform.start_beat()
    worker = platform.start_worker(concurrency=4, pool="threads")
    start = now_ms() + 2_000
    jobs = api.schedule_once_many("e2e.record_run", tenant=tenant, queue=platform.queue,
                                  fire_times=[ms_to_datetime(start + i * 50)
                                              for i in range(300)])  # 20/s over 15 s
    time.sleep(5)  # firing under way
    victim = platform.redis.get_node_from_key(shard_keys(0)[0]).port
    replica = cluster.replica_of(victim)
    cluster.kill(victim, signal.SIGSTOP)
    hung_at = time.monotonic()
    try:
        _wait_promoted(cluster, replica)
        failed_over_s = time.monotonic() - hung_at

        def all_ran() -> bool:
            return (Execution.objects.filter(job__in=jobs, status="SUCCEEDED")
                    .values("job_id").distinct().count() == len(jobs))

        assert wait_for(all_ran, timeout_s=90), (
            Execution.objects.filter(job__in=jobs, status="SUCCEEDED").count(),
            beat.log_tail(), worker.log_tail())
        ran_s = time.monotonic() - hung_at
    finally:
        cluster.kill(victim, signal.SIGCONT)
    # A job can run before the beat's recorder, whose acks waited on the hung node, has
    # written its dispatch: it writes it when it catches up (a CI run read it still empty).
    assert wait_for(lambda: not Execution.objects.filter(job__in=jobs,
                                                         dispatched_at__isnull=True).exists(),
                    timeout_s=30), beat.log_tail()
    late = sorted((e.dispatched_at - e.scheduled_for).total_seconds()
                  for e in Execution.objects.filter(job__in=jobs))
    with capsys.disabled():
        print(f"\nredis primary hung: failed over after {failed_over_s:.1f} s; every job ran "
              f"{ran_s:.1f} s after the hang; dispatch lateness max {late[-1]:.1f} s")
    assert beat.popen.poll() is None and worker.popen.poll() is None


def test_after_the_announcements_node_hung_the_beat_listens_on_its_replica(cluster_platform,
                                                                           tenant):
    # A subscription's connection is silent while nothing is published: on a node that hangs
    # it heard nothing ever again, the channel served by the promoted replica. It pings now,
    # and gives the node up when no pong comes back (scheduler.announcements).
    platform, cluster = cluster_platform, cluster_platform.cluster
    # Scans every 20 s: only an announcement brings a job due in 50 ms in time.
    beat = platform.start_beat(lookahead_ms=30_000, scan_interval_ms=20_000,
                               ack_deadline_ms=60_000)
    platform.start_worker()
    channel = timer_store().announce_channel
    victim = platform.redis.get_node_from_key(channel).port
    replica = cluster.replica_of(victim)
    assert wait_for(lambda: _subscribers(cluster, victim, channel) == 1, timeout_s=10)
    cluster.kill(victim, signal.SIGSTOP)
    try:
        _wait_promoted(cluster, replica)
        assert wait_for(lambda: _subscribers(cluster, replica, channel) == 1, timeout_s=20), \
            beat.log_tail()
        _follow_failover(timer_store())  # this process's own client, the API's
        job = api.schedule_once("e2e.record_run", tenant=tenant, delay=0.05,
                                queue=platform.queue)
        assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(),
                        timeout_s=15), beat.log_tail()
    finally:
        cluster.kill(victim, signal.SIGCONT)
    execution = job.executions.get()
    assert timedelta(0) <= execution.dispatched_at - execution.scheduled_for < timedelta(seconds=2)


def test_after_the_cancel_channels_node_hung_a_cancel_reaches_the_running_job(
        cluster_platform, tenant):
    # The worker's cancel listener, on a client of its own: it pings, gives a silent node up,
    # and reads the slot map again before subscribing anew (chronocore.redis_client.
    # refresh_slots), else it would subscribe to the hung node again and again.
    platform, cluster = cluster_platform, cluster_platform.cluster
    platform.start_beat()
    # Lease renewals every 40 s: within this test only the announcement can stop the run. One
    # pool process, whose listener a first job starts, on the cluster as it was.
    worker = platform.start_worker(concurrency=1, execution_lease_ttl_ms=120_000)
    first = api.schedule_once("e2e.record_run", tenant=tenant, delay=0.1, queue=platform.queue)
    assert wait_for(lambda: first.executions.filter(status="SUCCEEDED").exists(), timeout_s=30)
    channel = cancel_channel(platform.redis)
    victim = platform.redis.get_node_from_key(channel).port
    replica = cluster.replica_of(victim)
    assert wait_for(lambda: _subscribers(cluster, victim, channel) >= 1, timeout_s=10)
    cluster.kill(victim, signal.SIGSTOP)
    try:
        _wait_promoted(cluster, replica)
        assert wait_for(lambda: _subscribers(cluster, replica, channel) >= 1, timeout_s=20), \
            worker.log_tail()
        _follow_failover(timer_store())
        job = api.schedule_once("e2e.sleep", tenant=tenant, kwargs={"seconds": 30}, delay=0.2,
                                queue=platform.queue)
        assert wait_for(lambda: job.executions.filter(status="RUNNING").exists(), timeout_s=30)
        execution = job.executions.get()
        assert api.cancel_execution(execution.execution_id, tenant=tenant, by="ops") == "stopping"
        assert wait_for(lambda: job.executions.filter(status="CANCELLED").exists(),
                        timeout_s=15), worker.log_tail()
    finally:
        cluster.kill(victim, signal.SIGCONT)
    execution.refresh_from_db()
    assert (execution.finished_at - execution.started_at).total_seconds() < 15


def test_a_beat_and_a_worker_started_while_their_urls_first_node_hangs_reach_the_others(
        cluster_platform, tenant):
    # A client reads the slot map when it is made, from the URL's first node that answers: with
    # one node named, a process started while that node hung could not reach the cluster.
    platform, cluster = cluster_platform, cluster_platform.cluster
    victim = cluster.ports[0]
    replica = (cluster.replica_of(victim)
               if cluster.topology()[victim]["role"] == "primary" else None)
    platform.group.env = {**platform.group.env, "REDIS_URL": cluster.url_of_nodes(
        [victim, *(port for port in cluster.ports if port != victim)])}
    cluster.kill(victim, signal.SIGSTOP)
    try:
        if replica is not None:
            _wait_promoted(cluster, replica)
            _follow_failover(timer_store())
        beat = platform.start_beat()
        worker = platform.start_worker(pool="threads")
        job = api.schedule_once("e2e.record_run", tenant=tenant, delay=0.5,
                                queue=platform.queue)
        assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(),
                        timeout_s=30), (beat.log_tail(), worker.log_tail())
    finally:
        cluster.kill(victim, signal.SIGCONT)
    assert _runs(platform) == {str(job.executions.get().execution_id): 1}


def _follow_failover(store) -> None:
    """Until a command on every shard is served: a client that has not met the failover yet
    learns the new primary from its first errors (each a socket time-out on the hung node)."""
    def served() -> bool:
        try:
            store.pending_count()
        except redis.RedisError:
            return False
        return True

    assert wait_for(served, timeout_s=30)


def _subscribers(cluster, port: int, channel: str) -> int:
    with cluster.node(port) as node:
        return int(node.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1])


def test_a_claim_with_a_primary_hung_claims_the_other_nodes_shards_and_names_the_hung_ones(
        cluster_platform):
    # One claim is one pipeline over every primary. redis-py's cluster pipeline, run with
    # raise_on_error=False, puts the error of a node that failed mid-call in the place of its
    # commands' replies: the claim once read that as a reply, and the TypeError ended the beat
    # in the failover test above (CI, 2026-12-06). Here the node hangs (SIGSTOP) under a client
    # with a 1 s socket time-out and no retries, and nothing fails over (the replica is told
    # not to take over, the other primaries to serve their slots meanwhile): the same error in
    # place, every time. (redis-py then retries each of the node's commands on its own, a
    # time-out each: the claim takes in two of the hung node's shards, not its 85.)
    cluster, client = cluster_platform.cluster, cluster_platform.redis
    store = TimerStore(connect(cluster.url, cluster=True, socket_timeout=1.0,
                               retry=Retry(NoBackoff(), 0)),
                       shard_count=timer_store().shard_count)
    owner = ShardOwnership(store, replica_id="claimer", lease_ttl_ms=60_000)
    owner.refresh(now_ms())
    assert sorted(owner.leases) == list(range(store.shard_count))
    due_ms = now_ms() - 1_000
    timers = [(str(uuid.uuid4()), due_ms) for _ in range(200)]
    store.add(timers)
    victim = cluster.primaries()[0]
    victim_shards = {shard for shard in range(store.shard_count)
                     if client.get_node_from_key(shard_keys(shard)[0]).port == victim}
    hung_shards = set(sorted(victim_shards)[:2])
    shards = sorted(set(range(store.shard_count)) - victim_shards | hung_shards)
    on_victim = {timer_id for timer_id, _ in timers if _node_of(client, timer_id) == victim}
    assert len(hung_shards) == 2 and on_victim
    with _no_failover(cluster, victim):
        cluster.kill(victim, signal.SIGSTOP)
        try:
            claim = store.claim_due(owner.leases, shards, now_ms=now_ms(),
                                    ack_deadline_ms=30_000, limit=1_000)
        finally:
            cluster.kill(victim, signal.SIGCONT)

    assert set(claim.unreachable) == hung_shards
    assert all(isinstance(exc, redis.TimeoutError) for exc in claim.unreachable.values())
    assert {t.timer_id for t in claim.timers} == {timer_id for timer_id, _ in timers} - on_victim
    assert claim.fenced == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
def test_the_keeper_renews_the_live_nodes_leases_while_a_primary_is_down(cluster_platform, sig):
    # The keeper's renewals go a thread per node: one pipeline over every node raised for all
    # of them while one was down (the failover test's beat lost and took back 160 of its 256
    # shards), and one node after another waited on a hung node (its pipeline timed out, and
    # redis-py sent its commands again one by one, a time-out each: 40 s, until the node was
    # continued) while the others' leases lapsed. Nothing fails over here (as above): the
    # node stays down or hung for as long as the test looks.
    cluster, client = cluster_platform.cluster, cluster_platform.redis
    store = timer_store()
    owner = ShardOwnership(store, replica_id="keeper", lease_ttl_ms=3_000)
    owner.refresh(now_ms())
    assert sorted(owner.leases) == list(range(store.shard_count))
    victim = cluster.primaries()[0]
    on_victim = {shard for shard in range(store.shard_count)
                 if client.get_node_from_key(shard_keys(shard)[3]).port == victim}
    live = set(range(store.shard_count)) - on_victim
    failures, slowest_s = [], 0.0
    with _no_failover(cluster, victim):
        cluster.kill(victim, sig)
        try:
            until = time.monotonic() + 4.5  # 1.5 times the TTL since the acquire
            while time.monotonic() < until:  # the beat's keeper, every 250 ms
                began = time.monotonic()
                try:
                    owner.renew(now_ms())
                except redis.RedisError as exc:
                    failures.append(exc)
                slowest_s = max(slowest_s, time.monotonic() - began)
                time.sleep(0.25)
            assert all(owner.surely_held(shard) for shard in live)
            assert not any(owner.surely_held(shard) for shard in on_victim)
            pipe = client.pipeline(transaction=False)
            for shard in sorted(live):
                pipe.pttl(shard_keys(shard)[3])
            assert min(pipe.execute()) > 0, "a live node's lease expired"
        finally:
            if sig == signal.SIGSTOP:
                cluster.kill(victim, signal.SIGCONT)
    assert slowest_s < 1.0, f"a renewal held the keeper {slowest_s:.1f} s"
    if sig == signal.SIGKILL:
        assert failures and all(isinstance(f, redis.ConnectionError) for f in failures)


@contextmanager
def _no_failover(cluster, victim: int):
    """``victim``'s replica told not to take over, the other primaries to serve their slots
    meanwhile: a node down or hung stays so for as long as the test looks."""
    replica = cluster.replica_of(victim)
    survivors = [port for port in cluster.ports if port != victim]
    _configure(cluster, [replica], "cluster-replica-no-failover", "yes")
    _configure(cluster, survivors, "cluster-require-full-coverage", "no")
    try:
        yield
    finally:
        _configure(cluster, [replica], "cluster-replica-no-failover", "no")
        _configure(cluster, survivors, "cluster-require-full-coverage", "yes")


def _wait_promoted(cluster, replica: int) -> None:
    assert wait_for(lambda: cluster.topology(ask=[replica])[replica]["role"] == "primary",
                    timeout_s=20), cluster.topology(ask=[replica])


def _configure(cluster, ports, name: str, value: str) -> None:
    for port in ports:
        with cluster.node(port) as node:
            node.config_set(name, value)
