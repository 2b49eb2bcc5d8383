"""Which shard a timer lives in, and which beat replica owns a shard.

Pure functions. A timer's shard comes from the first 32 bits of its id (job ids are random UUIDs)
scaled onto S equal ranges, S fixed per deployment, so shards move between replicas but timers
never re-hash, and PostgreSQL can select one shard's jobs by an index range. Ownership uses
rendezvous (highest random weight) hashing: every replica computes the same map from the same
member list, and a join or leave moves only the shards it must.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence


def timer_key(timer_id: str) -> int:
    """The first 32 bits of a timer id (a job's UUID) as a number; PostgreSQL computes the same
    value into ``chrono_job.timer_key``, so one shard's jobs are one index range."""
    return int(timer_id.replace("-", "")[:8], 16)


def shard_for(timer_id: str, shard_count: int) -> int:
    """The shard of ``timer_id``: its timer key scaled onto ``shard_count`` equal ranges."""
    return (timer_key(timer_id) * shard_count) >> 32


def timer_key_range(shard: int, shard_count: int) -> tuple[int, int]:
    """The timer keys ``[low, high)`` of one shard (the inverse of :func:`shard_for`)."""
    low = -((-shard << 32) // shard_count)  # ceil(shard * 2**32 / shard_count)
    high = -((-(shard + 1) << 32) // shard_count)
    return low, high


def shard_tag(shard: int) -> str:
    """The Redis Cluster hash tag shared by every key of one shard."""
    return f"{{chrono:{shard}}}"


def _weight(shard: int, replica_id: str) -> int:
    digest = hashlib.blake2b(f"{shard}/{replica_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(shard: int, replica_ids: Sequence[str]) -> str | None:
    """The replica that owns ``shard`` among ``replica_ids`` (None when there are none)."""
    if not replica_ids:
        return None
    return max(replica_ids, key=lambda replica_id: (_weight(shard, replica_id), replica_id))


def shards_owned_by(replica_id: str, replica_ids: Iterable[str], shard_count: int) -> list[int]:
    """Every shard that ``replica_id`` owns when ``replica_ids`` are the live replicas."""
    members = sorted(set(replica_ids) | {replica_id})
    return [s for s in range(shard_count) if owner_of(s, members) == replica_id]
