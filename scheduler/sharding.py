"""Which shard a timer lives in, and which beat replica owns a shard.

Pure functions. ``shard = crc32(timer id) mod S`` with S fixed per deployment, so shards move
between replicas but timers never re-hash. Ownership uses rendezvous (highest random weight)
hashing: every replica computes the same map from the same member list, and a join or leave moves
only the shards it must.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Sequence


def shard_for(timer_id: str, shard_count: int) -> int:
    """The shard of ``timer_id``; stable across processes and Python versions (no ``hash()``)."""
    return zlib.crc32(timer_id.encode()) % shard_count


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
