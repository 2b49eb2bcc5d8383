"""The reconciler against real PostgreSQL and Redis: PostgreSQL is the truth."""

from __future__ import annotations

import pytest

from scheduler import api
from scheduler.clock import datetime_to_ms, ms_to_datetime
from scheduler.models import Job
from scheduler.ownership import ShardOwnership
from scheduler.reconcile import (
    OVERDUE_GRACE_MS,
    rebuild_all,
    reconcile_overdue,
    reconcile_shard,
)
from scheduler.timers import shard_keys, timer_store

pytestmark = pytest.mark.django_db(transaction=True)


def test_missing_and_misplaced_timers_are_repaired_and_others_left_alone(tenant, redis_client):
    store = timer_store()
    missing = api.schedule_once("chrono.noop", tenant=tenant, delay=600)
    misplaced = api.schedule_once("chrono.noop", tenant=tenant, delay=600)
    claimed = api.schedule_once("chrono.noop", tenant=tenant, delay=0)
    store.remove([str(missing.job_id)])
    store.add([(str(misplaced.job_id), 1_000)])
    stranger = "00000000-0000-4000-8000-000000000001"  # a timer with no job: left for the beat
    store.add([(stranger, 5_000)])
    owner = ShardOwnership(store, replica_id="r", lease_ttl_ms=10_000)
    owner.refresh(now_ms=1_000)
    store.claim_due(owner.leases, [store.shard_of(str(claimed.job_id))],
                    now_ms=datetime_to_ms(claimed.next_run_at) + 1, ack_deadline_ms=60_000,
                    limit=10)

    shards = {store.shard_of(str(j.job_id)) for j in (missing, misplaced, claimed)}
    reports = [reconcile_shard(store, shard) for shard in shards]

    assert sum(r.added for r in reports) == 1 and sum(r.moved for r in reports) == 1
    for job in (missing, misplaced):
        assert store.fire_time_of(str(job.job_id)) == datetime_to_ms(job.next_run_at)
    claimed_due = shard_keys(store.shard_of(str(claimed.job_id)))[0]
    assert store.client.zscore(claimed_due, str(claimed.job_id)) is None  # still inflight
    assert store.fire_time_of(stranger) == 5_000


def test_a_job_finished_since_it_was_read_is_not_put_back(tenant, redis_client):
    store = timer_store()
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=600)
    store.remove([str(job.job_id)])
    api.cancel(job.job_id, tenant=tenant)
    reconcile_shard(store, store.shard_of(str(job.job_id)))
    assert store.fire_time_of(str(job.job_id)) is None


def test_rebuild_writes_every_pending_timer(tenant, redis_client):
    jobs = [api.schedule_once("chrono.noop", tenant=tenant, delay=600 + i) for i in range(25)]
    api.pause(jobs[0].job_id, tenant=tenant)
    redis_client.flushdb()
    assert rebuild_all(timer_store()) == 24
    assert timer_store().fire_time_of(str(jobs[0].job_id)) is None
    assert timer_store().fire_time_of(str(jobs[1].job_id)) == datetime_to_ms(
        jobs[1].next_run_at)


def test_overdue_jobs_without_a_timer_get_one_and_the_beats_timers_are_left_alone(
        tenant, redis_client):
    """A crash between a job's commit and its timer leaves a pending job with no timer: the
    overdue sweep adds it within seconds instead of the round robin's minutes; a timer still
    due or inflight, a job not yet past the grace and a shard of another replica are left."""
    store = timer_store()
    lost, due, claimed, recent = (
        api.schedule_once("chrono.noop", tenant=tenant, delay=0) for _ in range(4))
    mine = frozenset(store.shard_of(str(j.job_id)) for j in (lost, due, claimed, recent))
    elsewhere = next(job for job in iter(
        lambda: api.schedule_once("chrono.noop", tenant=tenant, delay=0), None)
        if store.shard_of(str(job.job_id)) not in mine)
    now = datetime_to_ms(lost.next_run_at) + OVERDUE_GRACE_MS + 5_000
    Job.objects.filter(pk=recent.pk).update(next_run_at=ms_to_datetime(now - 1_000))
    store.remove([str(lost.job_id), str(recent.job_id), str(elsewhere.job_id)])
    owner = ShardOwnership(store, replica_id="r", lease_ttl_ms=10_000)
    owner.refresh(now_ms=1_000)
    store.claim_due(owner.leases, [store.shard_of(str(claimed.job_id))],
                    now_ms=datetime_to_ms(claimed.next_run_at) + 1, ack_deadline_ms=60_000,
                    limit=10)

    report = reconcile_overdue(store, mine, now_ms=now)

    assert report.added == 1, report
    assert store.fire_time_of(str(lost.job_id)) == datetime_to_ms(lost.next_run_at)
    assert store.fire_time_of(str(due.job_id)) == datetime_to_ms(due.next_run_at)
    assert store.fire_time_of(str(recent.job_id)) is None  # within the grace: the beat's
    assert store.fire_time_of(str(elsewhere.job_id)) is None  # another replica's shard
    claimed_due = shard_keys(store.shard_of(str(claimed.job_id)))[0]
    assert store.client.zscore(claimed_due, str(claimed.job_id)) is None  # still inflight
