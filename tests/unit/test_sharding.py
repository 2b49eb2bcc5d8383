"""Shard of a timer and rendezvous ownership: pure functions, no services."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from scheduler.sharding import owner_of, shard_for, shards_owned_by, timer_key, timer_key_range

IDS = [str(uuid.UUID(int=i * 0x9E3779B97F4A7C15 % (1 << 128))) for i in range(1, 20_001)]


@pytest.mark.parametrize("shards", [1, 3, 7, 256, 1000])
def test_every_timer_key_falls_in_the_range_of_its_shard(shards):
    for timer_id in IDS[:3_000]:
        low, high = timer_key_range(shard_for(timer_id, shards), shards)
        assert low <= timer_key(timer_id) < high


@pytest.mark.parametrize("shards", [1, 3, 7, 256, 1000])
def test_shard_ranges_tile_the_whole_key_space(shards):
    assert timer_key_range(0, shards)[0] == 0
    assert timer_key_range(shards - 1, shards)[1] == 2**32
    for shard in range(shards - 1):
        assert timer_key_range(shard, shards)[1] == timer_key_range(shard + 1, shards)[0]


def test_random_job_ids_spread_evenly_over_shards():
    counts = Counter(shard_for(str(uuid.uuid4()), 16) for _ in range(32_000))
    assert len(counts) == 16
    assert max(counts.values()) < 1.15 * 2_000


def test_every_replica_computes_the_same_owner():
    replicas = ["a", "b", "c"]
    for shard in range(256):
        assert owner_of(shard, replicas) == owner_of(shard, list(reversed(replicas)))


def test_a_replica_leaving_moves_only_its_own_shards():
    before = {s: owner_of(s, ["a", "b", "c"]) for s in range(256)}
    after = {s: owner_of(s, ["a", "b"]) for s in range(256)}
    moved = [s for s in range(256) if before[s] != after[s]]
    assert moved and all(before[s] == "c" for s in moved)


def test_shards_are_split_roughly_evenly_between_replicas():
    owned = [len(shards_owned_by(r, ["a", "b", "c"], 256)) for r in ["a", "b", "c"]]
    assert sum(owned) == 256
    assert min(owned) > 256 / 3 * 0.7


def test_no_replicas_means_no_owner():
    assert owner_of(0, []) is None
