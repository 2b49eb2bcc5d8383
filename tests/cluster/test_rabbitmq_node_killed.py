"""A RabbitMQ node killed with SIGKILL mid-dispatch, on a real three-node cluster.

A real ``chrono beat`` publishes a few thousand one-time jobs through node 1 of three (its
``BROKER_URL`` lists them all, node 1 first); two real workers consume, one through node 1 (the
first to declare the queue, so the queue's Raft leader is there too) and one through node 2; a
reaper runs through node 1. Node 1 is killed halfway. What must hold:

- nothing confirmed is lost: every accepted job's execution runs and ends SUCCEEDED, and each
  body runs exactly once (the worker-side start dedupes redeliveries by execution id);
- duplicates are only of what was unconfirmed: the executions published more than once (told
  apart by the publish stamp ``chrono_published_ms``, which a broker redelivery keeps and a
  publish again changes) number no more than the messages the beat logged it published again;
- the platform goes on through the surviving nodes: the beat and the worker of node 1 move to
  another node, both workers run jobs after the kill, and the dispatch gap is bounded.

The figures (gap, duplicates, redeliveries, how long the cluster took to boot) are printed in
one JSON line (``pytest -s`` shows it) and end up in the report of issue 20.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest

from scheduler import api
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.models import Execution, ExecutionStatus
from tests.cluster.rmqcluster_fixtures import *  # noqa: F403 - the fixtures
from tests.helpers import deliveries, delivery_log, runs, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

JOBS = 3_000
SPREAD_MS = 20_000  # 150 jobs/s: what two thread-pool workers drain on a shared 2-core box
KILL_AT_MS = 8_000  # after the first fire time
# The beat's log lines that say how many messages it published again after a failure.
REPUBLISHED = re.compile(r"(\d+) messages without a confirm go out again|a batch of (\d+) was "
                         r"(?:lost|nacked), publishing it again")


def _republished(beat_log: str) -> int:
    return sum(int(a or b) for a, b in REPUBLISHED.findall(beat_log))


def _largest_gap_ms(stamps: list[int], *, after_ms: int) -> tuple[int, int]:
    """The longest pause between two consecutive publishes from ``after_ms`` on, and when the
    pause began."""
    ordered = sorted(s for s in stamps if s >= after_ms)
    gaps = [(b - a, a) for a, b in zip(ordered, ordered[1:], strict=False)]
    return max(gaps) if gaps else (0, after_ms)


def test_a_node_killed_mid_dispatch_loses_no_confirmed_job_and_dispatch_goes_on(
    cluster_platform, tenant
):
    platform, cluster = cluster_platform, cluster_platform.cluster
    node_1 = cluster.nodes[0]
    worker_a = platform.start_worker("worker-a", first=0)  # declares the queue on node 1
    platform.start_worker("worker-b", first=1)
    platform.start_reaper(first=0)
    beat = platform.start_beat("beat-1", first=0)
    members = cluster.queue_members(platform.queue)
    assert sorted(members["members"]) == sorted(n.node_name for n in cluster.nodes), (
        f"the quorum queue is not replicated on every node: {members}")

    first_fire_ms = now_ms() + 3_000
    fire_ms = [first_fire_ms + i * SPREAD_MS // JOBS for i in range(JOBS)]
    jobs = api.schedule_once_many("e2e.record_run", tenant=tenant, queue=platform.queue,
                                  fire_times=[ms_to_datetime(ms) for ms in fire_ms])
    assert len(jobs) == JOBS

    assert wait_for(lambda: now_ms() >= first_fire_ms + KILL_AT_MS, timeout_s=60)
    assert "publishing through RabbitMQ node 127.0.0.1:5701" in beat.log_tail(400)
    dispatched_before = Execution.objects.filter(job__in=jobs,
                                                 dispatched_at__isnull=False).count()
    assert dispatched_before > 0, "nothing was dispatched before the kill"
    kill_ms = now_ms()
    cluster.kill(0)

    assert wait_for(
        lambda: Execution.objects.filter(job__in=jobs, status=ExecutionStatus.SUCCEEDED).count()
        == JOBS, timeout_s=180, interval_s=1.0), (
        f"{Execution.objects.filter(job__in=jobs).exclude(status='SUCCEEDED').count()} of "
        f"{JOBS} executions did not succeed; beat:\n{beat.log_tail(30)}")

    executions = list(Execution.objects.filter(job__in=jobs).values_list(
        "execution_id", "worker_id", "started_at"))
    assert len(executions) == JOBS, "one execution per one-time job"
    ran = runs(platform.redis)
    expected = {str(execution_id) for execution_id, _, _ in executions}
    assert set(ran) == expected and set(ran.values()) == {1}, (
        "every body ran exactly once: "
        f"{sorted((e, n) for e, n in ran.items() if n != 1)[:5]}")

    # Duplicates only of what was unconfirmed.
    stamps: dict[str, set[int]] = defaultdict(set)
    for execution_id, _, published_ms in delivery_log(platform.redis):
        stamps[execution_id].add(published_ms)
    published_again = sum(len(s) - 1 for s in stamps.values())
    beat_log = beat.log_path.read_text(errors="replace")
    republished = _republished(beat_log)
    assert published_again <= republished, (
        f"{published_again} executions were published more than once, but the beat published "
        f"only {republished} messages again")
    delivered = sum(deliveries(platform.redis).values())
    redelivered = delivered - sum(len(s) for s in stamps.values())

    # The platform went on through the surviving nodes.
    moved = re.findall(r"publishing through RabbitMQ node (127\.0\.0\.1:57\d\d)", beat_log)
    assert moved[0] == "127.0.0.1:5701" and set(moved[1:]) & {"127.0.0.1:5702",
                                                              "127.0.0.1:5703"}, moved
    assert re.search(r"Connected to amqp://chrono:\*\*@127\.0\.0\.1:570[23]",
                     worker_a.log_path.read_text(errors="replace")), worker_a.log_tail()
    workers_after = {worker_id.split("@")[0] for _, worker_id, started_at in executions
                     if datetime_to_ms(started_at) > kill_ms + 1_000}
    assert workers_after == {"worker-a", "worker-b"}, workers_after
    all_stamps = [ms for s in stamps.values() for ms in s]
    gap_ms, gap_from_ms = _largest_gap_ms(all_stamps, after_ms=kill_ms - 1_000)
    assert max(all_stamps) > kill_ms + 2_000, "nothing was published after the kill"
    # Bounded on a loaded shared machine: a reconnect to a live node takes well under a second;
    # the bound leaves room for the beat's back-off and a slow quorum queue leader election.
    assert gap_ms < 10_000, f"dispatch stopped for {gap_ms} ms after the kill"
    dispatch_lateness = [
        datetime_to_ms(dispatched) - fire for dispatched, fire in
        ((e.dispatched_at, datetime_to_ms(e.scheduled_for))
         for e in Execution.objects.filter(job__in=jobs).only("dispatched_at", "scheduled_for"))]
    print(json.dumps({
        "test": "rabbitmq_node_killed", "jobs": JOBS, "cluster_boot_s": round(cluster.boot_s, 1),
        "leader_before_kill": members["leader"], "dispatched_before_kill": dispatched_before,
        "publish_gap_ms": gap_ms, "gap_began_ms_after_kill": gap_from_ms - kill_ms,
        "max_dispatch_lateness_ms": max(dispatch_lateness),
        "published_again_by_beat": republished, "executions_published_twice": published_again,
        "broker_redeliveries": redelivered, "node_killed": node_1.node_name,
        "beat_nodes": moved,
    }))
