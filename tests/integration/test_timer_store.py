"""The timer store against the real Redis: claims, acks, fencing and redelivery."""

from __future__ import annotations

import time
import uuid

import pytest

from scheduler.ownership import REPLICAS_KEY, ShardOwnership
from scheduler.timers import TimerStore, shard_keys

SHARDS = 8


def tid(name: str) -> str:
    """A timer id (job ids are UUIDs) that reads as ``name`` in the test."""
    return str(uuid.uuid5(uuid.NAMESPACE_OID, name))


@pytest.fixture
def store(redis_client) -> TimerStore:
    return TimerStore(redis_client, shard_count=SHARDS)


def lease_all(store: TimerStore, replica_id: str = "r1") -> ShardOwnership:
    ownership = ShardOwnership(store, replica_id=replica_id, lease_ttl_ms=5_000)
    ownership.refresh(now_ms=1_000)
    assert sorted(ownership.leases) == list(range(SHARDS))
    return ownership


def test_add_puts_one_timer_per_id_and_moves_it_when_added_again(store):
    store.add([(tid("job-a"), 5_000), (tid("job-b"), 6_000)])
    store.add([(tid("job-a"), 7_000)])
    assert store.fire_time_of(tid("job-a")) == 7_000
    assert store.pending_count() == 2


def test_claim_takes_only_due_timers_and_moves_them_inflight(store):
    ownership = lease_all(store)
    store.add([(tid("due"), 1_000), (tid("later"), 9_000)])
    claimed, fenced, _ = store.claim_due(ownership.leases, range(SHARDS), now_ms=2_000,
                                         ack_deadline_ms=10_000, limit=100)
    assert fenced == []
    assert [(t.timer_id, t.fire_at_ms, t.redelivered) for t in claimed] == [
        (tid("due"), 1_000, False)
    ]
    due, inflight, claimed_key, _ = shard_keys(store.shard_of(tid("due")))
    assert store.client.zscore(due, tid("due")) is None
    assert store.client.zscore(inflight, tid("due")) == 12_000
    assert store.client.hget(claimed_key, tid("due")) == b"1000"


def test_a_claim_with_a_lost_lease_is_fenced_and_claims_nothing(store):
    ownership = lease_all(store)
    store.add([(tid("job"), 1_000)])
    shard = store.shard_of(tid("job"))
    stale = dict(ownership.leases)
    store.client.delete(shard_keys(shard)[3])  # the lease expired
    other = ShardOwnership(store, replica_id="r2", lease_ttl_ms=5_000)
    assert other._acquire([shard]) == [shard]  # another replica took it

    claimed, fenced, _ = store.claim_due(stale, [shard], now_ms=2_000, ack_deadline_ms=10_000,
                                         limit=100)
    assert claimed == [] and fenced == [shard]
    assert store.fire_time_of(tid("job")) == 1_000  # still due, for the new owner
    assert other.leases[shard] != stale[shard]  # a fresh fencing token


def test_reacquiring_a_shard_yields_a_new_fencing_token(store):
    ownership = lease_all(store)
    before = ownership.leases[0]
    ownership.release([0])
    ownership._acquire([0])
    assert ownership.leases[0] != before
    assert int(ownership.leases[0].split("|")[1]) > int(before.split("|")[1])


def test_unacknowledged_claim_is_claimed_again_after_its_deadline(store):
    ownership = lease_all(store)
    store.add([(tid("job"), 1_000)])
    first, _, _ = store.claim_due(ownership.leases, range(SHARDS), now_ms=1_500,
                                  ack_deadline_ms=1_000, limit=10)
    assert len(first) == 1
    before_deadline, _, _ = store.claim_due(ownership.leases, range(SHARDS), now_ms=2_000,
                                            ack_deadline_ms=1_000, limit=10)
    assert before_deadline == []
    again, _, _ = store.claim_due(ownership.leases, range(SHARDS), now_ms=2_600,
                                  ack_deadline_ms=1_000, limit=10)
    assert [(t.timer_id, t.fire_at_ms, t.redelivered) for t in again] == [
        (tid("job"), 1_000, True)
    ]


def test_a_shard_taken_over_has_what_its_dead_owner_claimed_claimed_again_at_once(store):
    dead = lease_all(store, "dead")
    store.add([(tid("prepared"), 1_100), (tid("later"), 5_000)])
    claimed, _, _ = store.claim_due(dead.leases, range(SHARDS), now_ms=1_100,
                                    ack_deadline_ms=30_000, limit=10)
    assert [t.timer_id for t in claimed] == [tid("prepared")]  # then it was killed
    for shard in range(SHARDS):
        store.client.delete(shard_keys(shard)[3])  # its leases expired
    store.client.zrem(REPLICAS_KEY, "dead")  # and its membership
    heir = lease_all(store, "heir")
    took_over_ms = 3_000
    reclaim = dict.fromkeys(range(SHARDS), took_over_ms + 30_000 - 1)

    # Without the take-over's cut-off it would wait for its deadline (31,100 ms):
    assert store.claim_due(heir.leases, range(SHARDS), now_ms=took_over_ms,
                           ack_deadline_ms=30_000, limit=10)[0] == []
    again, _, _ = store.claim_due(heir.leases, range(SHARDS), now_ms=took_over_ms,
                                  ack_deadline_ms=30_000, limit=10, reclaim_before_ms=reclaim)
    assert [(t.timer_id, t.fire_at_ms, t.redelivered) for t in again] == [
        (tid("prepared"), 1_100, True)]
    # What the heir claimed itself is never claimed again under the same cut-off...
    assert store.claim_due(heir.leases, range(SHARDS), now_ms=took_over_ms + 10,
                           ack_deadline_ms=30_000, limit=10, reclaim_before_ms=reclaim)[0] == []
    # ...and the dead owner's late ack cannot touch it (fenced), nor can it claim.
    assert store.ack(dead.leases, [(claimed[0], None)]) == sorted(
        {store.shard_of(tid("prepared"))})
    assert store.claim_due(dead.leases, range(SHARDS), now_ms=6_000,
                           ack_deadline_ms=30_000, limit=10)[0] == []


def test_ack_removes_the_inflight_entry_and_adds_the_next_occurrence(store):
    ownership = lease_all(store)
    store.add([(tid("cron"), 1_000), (tid("once"), 1_000)])
    claimed, _, _ = store.claim_due(ownership.leases, range(SHARDS), now_ms=1_000,
                                    ack_deadline_ms=5_000, limit=10)
    by_id = {t.timer_id: t for t in claimed}
    acks = [(by_id[tid("cron")], 61_000), (by_id[tid("once")], None)]
    assert store.ack(ownership.leases, acks) == []
    assert store.fire_time_of(tid("cron")) == 61_000
    assert store.fire_time_of(tid("once")) is None
    assert store.pending_count() == 1
    # Nothing is redelivered after the deadline: both were acknowledged.
    later, _, _ = store.claim_due(ownership.leases, range(SHARDS), now_ms=10_000,
                                  ack_deadline_ms=5_000, limit=10)
    assert later == []


def test_claim_respects_the_batch_limit_and_keeps_the_rest_due(store):
    ownership = lease_all(store)
    shard = 3
    ids = [tid(f"t{i}") for i in range(400) if store.shard_of(tid(f"t{i}")) == shard][:10]
    store.add([(timer_id, 1_000 + i) for i, timer_id in enumerate(ids)])
    claimed, _, _ = store.claim_due(ownership.leases, [shard], now_ms=5_000, ack_deadline_ms=5_000,
                                    limit=4)
    assert [t.timer_id for t in claimed] == ids[:4]  # earliest first
    assert store.client.zcard(shard_keys(shard)[0]) == len(ids) - 4


def test_ownership_splits_shards_between_live_replicas_and_hands_over_on_leave(store):
    a = ShardOwnership(store, replica_id="a", lease_ttl_ms=5_000)
    b = ShardOwnership(store, replica_id="b", lease_ttl_ms=5_000)
    a.refresh(now_ms=1_000)
    assert len(a.leases) == SHARDS  # alone, it holds everything
    b.refresh(now_ms=1_000)  # b joins: a still holds b's shards until a refreshes
    assert not b.leases and b.wanted  # the map gives b shards a holds: b retries soon
    change = a.refresh(now_ms=1_100)  # a hands over what the map gives b: leaving first
    assert change.leaving and set(change.leaving) == set(a.leaving) == set(b.wanted)
    assert set(a.claimable) == set(a.leases) - set(a.leaving)  # claimed no more, still held
    b.refresh(now_ms=1_150)
    assert not b.leases  # not released yet: a publishes what it claimed from them first
    a.release(sorted(a.leaving))  # drained (the beat's _hand_over decides when)
    assert not a.leaving
    b.refresh(now_ms=1_200)
    assert not b.wanted
    assert set(a.leases).isdisjoint(b.leases)
    assert set(a.leases) | set(b.leases) == set(range(SHARDS))
    assert a.leases and b.leases
    a.leave()
    assert store.client.zscore(REPLICAS_KEY, "a") is None
    b.refresh(now_ms=1_300)
    assert sorted(b.leases) == list(range(SHARDS))


def test_a_lease_is_surely_held_only_until_its_ttl_minus_a_margin(store):
    ownership = ShardOwnership(store, replica_id="r1", lease_ttl_ms=1_000)
    ownership.refresh(now_ms=1_000)
    assert ownership.surely_held(0)
    time.sleep(0.85)  # past TTL minus the 200 ms margin, before Redis expires it
    assert not ownership.surely_held(0)
    ownership.renew(now_ms=1_500)  # renewed in time (by the keeper): held again
    assert ownership.surely_held(0)
    assert not ownership.surely_held(SHARDS + 1)  # never held
