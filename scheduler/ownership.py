"""Shard ownership of one beat replica: membership heartbeats, fenced leases, hand-over.

Every replica heartbeats into ``chrono:replicas`` (ZSET, member = replica id, score = the time its
membership expires) and computes the same shard → replica map from the live members by rendezvous
hashing (:mod:`scheduler.sharding`). It then holds a lease on each shard the map gives it; the lease
value carries a fencing token that every claim checks inside Redis, so a replica that was paused or
cut off past its lease claims nothing when it wakes, until it acquires a fresh lease. Shards the
map no longer gives it are released at once, so their new owner takes them on its next refresh.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from scheduler.sharding import shard_tag, shards_owned_by
from scheduler.timers import TimerStore

REPLICAS_KEY = "chrono:replicas"

log = logging.getLogger("chrono.beat")


@dataclass
class OwnershipChange:
    gained: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)


def _lease_keys(shard: int) -> tuple[str, str]:
    tag = shard_tag(shard)
    return f"{tag}:lease", f"{tag}:fence"


class ShardOwnership:
    """The shards one replica holds, as ``{shard: lease value}``."""

    def __init__(self, store: TimerStore, *, replica_id: str, lease_ttl_ms: int) -> None:
        if "|" in replica_id:
            raise ValueError("a replica id cannot contain '|'")
        self.store = store
        self.replica_id = replica_id
        self.lease_ttl_ms = lease_ttl_ms
        self.leases: dict[int, str] = {}
        # When each lease was last acquired or renewed, by this process's monotonic clock.
        self._renewed_at: dict[int, float] = {}

    def live_replicas(self, now_ms: int) -> list[str]:
        client = self.store.client
        pipe = client.pipeline(transaction=False)
        pipe.zadd(REPLICAS_KEY, {self.replica_id: now_ms + self.lease_ttl_ms})
        pipe.zremrangebyscore(REPLICAS_KEY, "-inf", now_ms)
        pipe.zrange(REPLICAS_KEY, 0, -1)
        return [member.decode() for member in pipe.execute()[2]]

    def refresh(self, now_ms: int) -> OwnershipChange:
        """Heartbeat, renew held leases, release shards moved away, acquire shards moved here."""
        target = set(
            shards_owned_by(self.replica_id, self.live_replicas(now_ms), self.store.shard_count)
        )
        change = OwnershipChange()
        change.lost += self._renew(target)
        change.lost += self.release(sorted(set(self.leases) - target))
        change.gained += self._acquire(sorted(target - set(self.leases)))
        if change.gained or change.lost:
            log.info(
                "replica %s: +%d shards, -%d shards, holds %d",
                self.replica_id, len(change.gained), len(change.lost), len(self.leases),
            )
        return change

    def _renew(self, target: set[int]) -> list[int]:
        held = sorted(s for s in self.leases if s in target)
        if not held:
            return []
        pipe = self.store.client.pipeline(transaction=False)
        for shard in held:
            self.store.renew_lease_script(
                keys=[_lease_keys(shard)[0]],
                args=[self.leases[shard], self.lease_ttl_ms],
                client=pipe,
            )
        sent_at = time.monotonic()
        replies = pipe.execute()
        lost = [s for s, ok in zip(held, replies, strict=True) if not ok]
        for shard in held:
            self._renewed_at[shard] = sent_at
        for shard in lost:
            log.warning("replica %s lost its lease on shard %d", self.replica_id, shard)
            del self.leases[shard]
        return lost

    def _acquire(self, shards: list[int]) -> list[int]:
        if not shards:
            return []
        pipe = self.store.client.pipeline(transaction=False)
        for shard in shards:
            self.store.acquire_lease_script(
                keys=list(_lease_keys(shard)),
                args=[self.replica_id, self.lease_ttl_ms],
                client=pipe,
            )
        sent_at = time.monotonic()
        gained = []
        for shard, value in zip(shards, pipe.execute(), strict=True):
            if value:
                self.leases[shard] = value.decode()
                self._renewed_at[shard] = sent_at
                gained.append(shard)
        return gained

    def release(self, shards: list[int]) -> list[int]:
        """Give up ``shards`` (a clean stop, or the map moved them); returns them."""
        if not shards:
            return []
        pipe = self.store.client.pipeline(transaction=False)
        for shard in shards:
            self.store.release_lease_script(
                keys=[_lease_keys(shard)[0]], args=[self.leases[shard]], client=pipe
            )
            del self.leases[shard]
        pipe.execute()
        return shards

    def surely_held(self, shard: int) -> bool:
        """True while this replica's lease on ``shard`` cannot have expired in Redis yet.

        Measured from when the last acquire or renew was *sent*, by the monotonic clock, with a
        safety margin of a fifth of the TTL for clock-rate drift. A replica checks this right
        before publishing what it claimed: after a pause (GC, SIGSTOP) longer than the lease it
        publishes nothing, and leaves its claimed timers to the shard's next owner.
        """
        renewed_at = self._renewed_at.get(shard)
        if renewed_at is None or shard not in self.leases:
            return False
        margin_s = self.lease_ttl_ms / 5000
        return time.monotonic() < renewed_at + self.lease_ttl_ms / 1000 - margin_s

    def drop(self, shards: list[int]) -> None:
        """Forget shards whose lease a claim or ack found lost (fenced)."""
        for shard in shards:
            if self.leases.pop(shard, None) is not None:
                log.warning("replica %s was fenced off shard %d", self.replica_id, shard)

    def leave(self) -> None:
        """A clean stop: release every lease and the membership, so others take over at once."""
        self.release(sorted(self.leases))
        self.store.client.zrem(REPLICAS_KEY, self.replica_id)
